# agentflow: the API and workers, from the wheel only (no source tree, no compilers, no root).
#   docker build -t agentflow .
#   docker compose -f deploy/compose.yaml up        (PostgreSQL, migrations, API, two workers)
# See docs/deployment.md for production settings.

# The base: the official Python image; a machine that cannot reach Docker Hub passes a local
# stand-in with --build-arg PYTHON_IMAGE=... (tests/support/container_base.py builds one).
ARG PYTHON_IMAGE=python:3.11-slim

FROM ${PYTHON_IMAGE} AS wheel
WORKDIR /src
RUN pip install --no-cache-dir "hatchling>=1.21"
COPY pyproject.toml README.md ./
COPY src ./src
RUN pip wheel --no-cache-dir --no-deps --no-build-isolation --wheel-dir /wheels .

FROM ${PYTHON_IMAGE}
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    AGENTFLOW_HOST=0.0.0.0 \
    AGENTFLOW_PORT=8000 \
    AGENTFLOW_DATA_DIR=/var/lib/agentflow
RUN useradd --system --uid 10001 --create-home --home-dir /var/lib/agentflow agentflow
COPY --from=wheel /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
USER 10001
WORKDIR /var/lib/agentflow
EXPOSE 8000
# Liveness only (no database): a replica that cannot reach PostgreSQL answers /readyz with 503.
HEALTHCHECK --interval=15s --timeout=3s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen(f\"http://127.0.0.1:{os.environ.get('AGENTFLOW_PORT', '8000')}/healthz\", timeout=2)"]
ENTRYPOINT ["agentflow"]
CMD ["serve", "--no-worker"]
