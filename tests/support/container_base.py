"""The images the container tests build on, for a machine with a Docker engine.

The Dockerfile starts from the official ``python:3.11-slim``. Where Docker Hub cannot be
reached (our machines reach PyPI, Debian and npm only), a stand-in is built from Debian's own
packages instead: ``debootstrap`` of Debian bookworm (the official image's release, with its
Python 3.11), a virtual environment at ``/usr/local`` so that ``python`` and ``pip`` are where
the official image puts them, and this machine's trusted certificates, so that ``pip`` inside
the build reaches the package index through this machine's network as the host's ``pip`` does.
It is built once and kept under :data:`STAND_IN`. Likewise ``deploy/compose.yaml``'s
``postgres:16`` has a stand-in, Debian's PostgreSQL 15 on that base (``postgres_image/``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

OFFICIAL = "python:3.11-slim"
STAND_IN = "agentflow-test-base:debian-bookworm-python3.11"
POSTGRES = "postgres:16"
POSTGRES_STAND_IN = "agentflow-test-postgres:debian-bookworm-15"
MIRROR = "http://deb.debian.org/debian"
PATH = "/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin"


def _docker(
    *args: str, timeout: float = 600, stdin: bytes | None = None
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["docker", *args], capture_output=True, timeout=timeout, input=stdin)


def has_image(tag: str) -> bool:
    """Whether the engine holds the image ``tag``."""
    return _docker("image", "inspect", tag, timeout=60).returncode == 0


def python_base() -> str:
    """The image to build on: the official one when it is here or can be pulled, else the stand-in.

    Raises:
        RuntimeError: neither the official image nor the means to build a stand-in (root and
            ``debootstrap``) are at hand; the message says what to install.
    """
    if has_image(OFFICIAL) or _docker("pull", OFFICIAL, timeout=300).returncode == 0:
        return OFFICIAL
    if not has_image(STAND_IN):
        build_stand_in()
    return STAND_IN


def postgres_image() -> str:
    """The compose file's PostgreSQL image when it is here or can be pulled, else its stand-in.

    Raises:
        RuntimeError: as :func:`python_base`, or the stand-in's build failed.
    """
    if has_image(POSTGRES) or _docker("pull", POSTGRES, timeout=300).returncode == 0:
        return POSTGRES
    if not has_image(POSTGRES_STAND_IN):
        source = Path(__file__).with_name("postgres_image")
        built = _docker("build", "--build-arg", f"BASE={python_base()}", "-t", POSTGRES_STAND_IN, str(source))
        if built.returncode != 0:
            raise RuntimeError(built.stderr.decode()[-2000:])
    return POSTGRES_STAND_IN


def build_stand_in() -> None:
    """Build :data:`STAND_IN` from Debian's packages (about a minute and a half here)."""
    if shutil.which("debootstrap") is None or os.geteuid() != 0:
        raise RuntimeError(
            f"{OFFICIAL} cannot be pulled and no stand-in can be built here: "
            "that takes root and debootstrap (apt-get install debootstrap)"
        )
    with tempfile.TemporaryDirectory(prefix="agentflow-base-") as where:
        root = Path(where) / "rootfs"
        subprocess.run(
            ["debootstrap", "--variant=minbase", "--include=python3,python3-venv,ca-certificates",
             "bookworm", str(root), MIRROR],
            check=True, capture_output=True, timeout=1200,
        )  # fmt: skip
        # This machine's certificates, its egress proxy's among them (the build's pip needs it).
        shutil.copy("/etc/ssl/certs/ca-certificates.crt", root / "etc/ssl/certs/ca-certificates.crt")
        (root / "etc/pip.conf").write_text("[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n")
        subprocess.run(["chroot", str(root), "python3", "-m", "venv", "/usr/local"], check=True, timeout=300)
        tar = subprocess.run(
            ["tar", "-C", str(root), "-c", "."], check=True, capture_output=True, timeout=600
        )
        imported = _docker(
            "import", "--change", f"ENV PATH={PATH}", "--change", 'CMD ["python3"]', "-", STAND_IN,
            stdin=tar.stdout,
        )  # fmt: skip
        if imported.returncode != 0:
            raise RuntimeError(imported.stderr.decode()[-2000:])
