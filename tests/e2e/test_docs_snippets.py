"""Every code block of the documentation (README.md, docs/**/*.md) runs, and every link and
cited file exists.

Each document gets a fresh database and a temporary working directory; its blocks run in
order, as a reader would run them (markers: ``tests/support/snippets.py``):

- ``python``: a block with top-level ``await`` runs here, in the document's namespace, where
  ``engine`` is an ``Engine`` on the document's database; any other block runs as a script
  (``python block.py``) in the working directory. ``# name.py`` blocks are files (modules).
- ``bash``/``sh``/``shell``: each command runs. ``agentflow ...`` is a real process in the
  working directory with ``AGENTFLOW_DATABASE_URL`` set, and must exit 0; ``agentflow worker``
  and ``agentflow serve`` start in the background, must still be running when the document
  ends and must then stop cleanly on SIGTERM. ``curl ...`` goes to the API (served here, on
  the document's database) instead of ``localhost:8000`` and must not be answered with an
  error. ``$NAME`` is what a hidden block set ``NAME`` to.
- ``yaml``: a workflow (``name`` and ``kind``) is published; part of one is merged into a
  minimal workflow of its kind and published disabled (validation is the check); files are
  written. ``json`` must parse. Other languages (``sql``, ``text``) illustrate; they do not run.
"""

from __future__ import annotations

import ast
import asyncio
import base64
import contextlib
import inspect
import json
import os
import re
import shlex
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from agentflow.api.app import create_app
from agentflow.engine import Engine
from tests.conftest import make_settings
from tests.support.fork_runner import ForkRunner
from tests.support.http_server import serve
from tests.support.snippets import ROOT, Snippet, broken_references, documents, snippets

SHELLS = ("bash", "sh", "shell")
NOT_RUN = ("sql", "text", "markdown", "")  # illustrations: internals, outputs, templates
BACKGROUND = ("worker", "serve")
MAX_SKIPPED = 8  # skipping is for the few blocks that cannot run; keep it so


@pytest.fixture(scope="module")
def runner() -> Iterator[ForkRunner]:
    forks = ForkRunner()
    yield forks
    forks.close()


def _doc_id(doc: Path) -> str:
    return str(doc.relative_to(ROOT))


def _runnable(doc: Path) -> bool:
    return any(b.skip is None and b.lang not in NOT_RUN for b in snippets(doc))


@pytest.mark.parametrize("doc", [d for d in documents() if _runnable(d)], ids=_doc_id)
async def test_every_block_of_the_document_runs(
    doc: Path, database_url: str, runner: ForkRunner, tmp_path: Path
) -> None:
    blocks = snippets(doc)
    key = base64.b64encode(os.urandom(32)).decode()
    # Code steps on: the documents show run_code nodes, which an engine with them off refuses.
    settings = make_settings(database_url, secret_key=key, run_code="on")
    engine = await Engine.connect(settings, migrate_schema=False)
    session = DocumentRun(doc, engine, database_url, key, runner, tmp_path)
    try:
        for block in blocks:
            if block.skip is None:
                await session.run(block)
        await session.finish()
    finally:
        await session.close()
        await engine.close()


def test_links_and_cited_files_exist() -> None:
    problems = [p for doc in documents() for p in broken_references(doc)]
    assert not problems, "\n".join(problems)


def test_only_a_few_blocks_are_skipped_and_each_says_why() -> None:
    skipped = [f"{b.where} ({b.skip})" for doc in documents() for b in snippets(doc) if b.skip]
    assert len(skipped) <= MAX_SKIPPED, "\n".join(skipped)


class DocumentRun:
    """One document's blocks, run in order on one database and in one directory."""

    def __init__(self, doc: Path, engine: Engine, url: str, key: str, runner: ForkRunner, tmp: Path) -> None:
        self.doc, self.engine, self.runner = doc, engine, runner
        self.cwd = tmp / "work"
        self.cwd.mkdir()
        self.logs = tmp / "logs"
        self.logs.mkdir()
        self.namespace: dict[str, Any] = {"engine": engine}
        self.env = {k: v for k, v in os.environ.items() if not _private(k)}
        self.env.update(
            AGENTFLOW_DATABASE_URL=url, AGENTFLOW_SECRET_KEY=key, AGENTFLOW_DATA_DIR=str(tmp / "data"),
            AGENTFLOW_POLL_INTERVAL="0.2", AGENTFLOW_PORT="0", COLUMNS="120",
            PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        )  # fmt: skip
        self.background: list[tuple[int, Path, Snippet]] = []
        self._stack = contextlib.AsyncExitStack()
        self._api: str | None = None
        self._count = 0

    async def run(self, block: Snippet) -> None:
        try:
            if block.file:
                (self.cwd / block.file).write_text(block.code)
            elif block.lang in ("python", "py"):
                await self._python(block)
            elif block.lang in SHELLS:
                await self._shell(block)
            elif block.lang in ("yaml", "yml"):
                await self._yaml(block)
            elif block.lang == "json":
                json.loads(block.code)
            elif block.lang not in NOT_RUN:
                raise AssertionError(f"no way to run {block.lang!r} blocks: run it here, or mark it skip")
        except Exception as exc:
            raise AssertionError(f"{block.where}: {type(exc).__name__}: {exc}") from exc

    # python ---------------------------------------------------------------------------

    async def _python(self, block: Snippet) -> None:
        code = compile(block.code, block.where, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        if block.hidden or code.co_flags & inspect.CO_COROUTINE:
            with contextlib.chdir(self.cwd):  # relative paths mean the document's files
                result = eval(code, self.namespace)
                if inspect.isawaitable(result):
                    await result
            return
        # Next to the files the document made, as a reader would save it.
        script = self.cwd / f"docs_block_{block.line}.py"
        script.write_text(block.code)
        await self._process(block, script=script)

    # shell ----------------------------------------------------------------------------

    async def _shell(self, block: Snippet) -> None:
        for line in _commands(block.code):
            words = shlex.split(self._expand(line), comments=True)
            if not words:
                continue
            if words[0] == "agentflow":
                await self._agentflow(block, words[1:])
            elif words[0] == "curl":
                await self._curl(words[1:])
            else:
                raise AssertionError(
                    f"cannot run {words[0]!r}: only agentflow and curl commands run here; if the block"
                    " must not run, put <!-- snippet: skip (why) --> on the line before it"
                )

    def _expand(self, line: str) -> str:
        def value(match: re.Match[str]) -> str:
            name = match["name"]
            if not isinstance(self.namespace.get(name), str):
                raise AssertionError(f"${name} is not set: set it in a hidden block before")
            return str(self.namespace[name])

        return re.sub(r"\$\{?(?P<name>[A-Z][A-Z0-9_]*)\}?", value, line)

    async def _agentflow(self, block: Snippet, args: list[str]) -> None:
        command = next((a for a in args if not a.startswith("-")), "")
        if command in BACKGROUND:
            output = self._log(block)
            pid = await asyncio.to_thread(
                self.runner.start, argv=args, cwd=self.cwd, env=self._env(), output=output
            )
            self.background.append((pid, output, block))

            def started() -> bool:
                if output.exists() and "running (" in output.read_text():
                    return True
                code = self.runner.wait(pid, 0)  # ended already: say why at once
                if code is not None:
                    self.background.pop()
                assert code is None, f"agentflow {command} exited {code}:\n{output.read_text()[-3000:]}"
                return False

            await _until(started, 60, f"agentflow {command} never ran", output)
            return
        await self._process(block, argv=args)

    async def _curl(self, args: list[str]) -> None:
        method, url, headers, body = _parse_curl(args)
        base = await self._api_url()
        url = re.sub(r"^(https?://)?localhost:8000", base, url)
        async with httpx.AsyncClient(timeout=30) as http:
            response = await http.request(
                method or ("POST" if body else "GET"), url, headers=headers, content=body
            )
        assert response.status_code < 400, f"curl {method} {url}: {response.status_code} {response.text}"

    async def _api_url(self) -> str:
        if self._api is None:
            self._api = await self._stack.enter_async_context(serve(create_app(self.engine)))
        return self._api

    # yaml -----------------------------------------------------------------------------

    async def _yaml(self, block: Snippet) -> None:
        config = yaml.safe_load(block.code)
        assert isinstance(config, dict), "a YAML block is a workflow, part of one, or a file"
        if "name" in config and "kind" in config:
            await self.engine.publish_workflow(config)
            return
        kind = config.get("kind", "structured")
        base: dict[str, Any] = (
            {"kind": "agent", "prompt": "Check a part of a workflow from the docs."}
            if kind == "agent"
            else {"kind": "structured", "nodes": [{"id": "noop", "type": "wait", "duration": "1s"}]}
        )
        await self.engine.publish_workflow(
            {**base, "name": f"docs-part-{block.line}", **config}, enabled=False
        )

    # processes ------------------------------------------------------------------------

    def _env(self) -> dict[str, str]:
        # What hidden blocks set, visible to commands and scripts as environment variables.
        exported = {k: v for k, v in self.namespace.items() if k.isupper() and isinstance(v, str)}
        return {**self.env, **exported}

    def _log(self, block: Snippet) -> Path:
        self._count += 1
        return self.logs / f"{block.line}-{self._count}.out"

    async def _process(self, block: Snippet, **what: Any) -> None:
        output = self._log(block)
        code = await asyncio.to_thread(self.runner.run, cwd=self.cwd, env=self._env(), output=output, **what)
        text = output.read_text()
        assert code == 0, f"{what} exited {code}:\n{text[-3000:]}"
        assert "Traceback" not in text, text[-3000:]

    async def finish(self) -> None:
        """The background commands still run, then stop cleanly on SIGTERM."""
        for pid, output, block in self.background:
            code = await asyncio.to_thread(self.runner.wait, pid, 0)
            assert code is None, f"{block.where}: it exited {code}:\n{output.read_text()[-3000:]}"
            os.kill(pid, signal.SIGTERM)
            code = await asyncio.to_thread(self.runner.wait, pid, 30)
            assert code == 0, f"{block.where}: SIGTERM ended it with {code}:\n{output.read_text()[-3000:]}"
            assert "Traceback" not in output.read_text(), output.read_text()[-3000:]
        self.background.clear()

    async def close(self) -> None:
        for pid, _, _ in self.background:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            await asyncio.to_thread(self.runner.wait, pid, 10)
        await self._stack.aclose()


def _private(name: str) -> bool:
    # The reader's own settings and keys must not leak into the documents' commands.
    return name.startswith("AGENTFLOW_") or name.endswith("_API_KEY") or name == "PYTHONPATH"


def _commands(code: str) -> Iterator[str]:
    """The command lines of a shell block, continuation lines joined."""
    pending = ""
    for line in code.splitlines():
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        yield pending + line
        pending = ""
    if pending:
        yield pending


def _parse_curl(args: list[str]) -> tuple[str | None, str, dict[str, str], bytes | None]:
    method: str | None = None
    url = ""
    headers: dict[str, str] = {}
    body: bytes | None = None
    items = iter(args)
    for arg in items:
        if arg in ("-X", "--request"):
            method = next(items)
        elif arg in ("-H", "--header"):
            name, _, value = next(items).partition(":")
            headers[name.strip()] = value.strip()
        elif arg in ("-d", "--data", "--data-raw"):
            body = next(items).encode()
        elif arg.startswith("-"):
            raise AssertionError(f"the docs test does not know curl's {arg}")
        else:
            url = arg
    return method, url, headers, body


async def _until(check: Any, timeout: float, what: str, output: Path) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, (
            f"{what}:\n{output.read_text()[-3000:] if output.exists() else ''}"
        )
        await asyncio.sleep(0.05)
