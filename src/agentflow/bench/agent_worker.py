"""A1's worker process: what ``agentflow worker`` runs, with a scripted model.

``agentflow worker`` has no option to pass a model object, so A1 starts this module instead
(``python -m agentflow.bench.agent_worker --concurrency N``): the same ``Engine.open`` and
``engine.worker(...)`` (with its dispatcher, scheduler, gatekeeper and notifier), the same
settings from the environment, the same ``running`` line on stdout and SIGTERM handling, but
every model call is answered by ``task_then_complete``. It has no network and no randomness,
so a decision costs the engine's own work and nothing of a real model.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import signal

from agentflow.core.chat import Message, ModelRequest, ToolCall
from agentflow.engine import Engine
from agentflow.llm.scripted import ScriptedProvider
from agentflow.settings import Settings

PROGRAM = ("-m", "agentflow.bench.agent_worker")
"""The interpreter arguments that start this worker (before ``--concurrency N``)."""

TASK = {
    "title": "Send the meeting notes to the customer",
    "description": "Share the notes and the agreed next steps from the meeting.",
    "priority": "high",
}


def task_then_complete() -> ScriptedProvider:
    """A model that creates one task, then completes.

    It answers from the request alone (no state of its own, so it is right under any
    concurrency and on a retried step): a decision whose history holds no tool result yet
    calls ``create_task``; the next one, which sees that call's result, calls ``complete``.
    """

    def respond(request: ModelRequest) -> Message:
        if any(m.role == "tool" for m in request.messages):
            call = ToolCall("c1", "complete", {"summary": "Created the follow-up task."})
        else:
            call = ToolCall("c0", "create_task", dict(TASK))
        return Message("assistant", "", (call,))

    return ScriptedProvider(respond, name="scripted")


async def serve(concurrency: int) -> None:
    """Run one worker with the scripted model until SIGTERM or SIGINT."""
    async with Engine.open(Settings()) as engine:
        gc.freeze()  # as ``agentflow worker`` does (cli.common.freeze_startup_heap)
        worker = engine.worker(concurrency=concurrency, model=task_then_complete())
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, worker.stop)
        print(f"worker {worker.name} running ({worker.concurrency} at once)", flush=True)
        await worker.run()
        print("worker stopped", flush=True)


def main(argv: list[str] | None = None) -> None:
    """Parse ``--concurrency`` and run the worker (logging as ``agentflow worker`` does)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--concurrency", type=int, default=1, help="runs at once")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    asyncio.run(serve(args.concurrency))


if __name__ == "__main__":
    main()
