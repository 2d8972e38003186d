"""Loops that run beside a worker's claim loop (the dispatcher, the scheduler, the
gatekeeper, the notifier, the reply reader): which, and kept running whatever fails in them."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Protocol

from agentflow.agent.env import AgentEnv
from agentflow.agent.reply_judge import ModelReplyJudge
from agentflow.runtime.configs import ConfigCache
from agentflow.runtime.dispatcher import Dispatcher
from agentflow.runtime.gatekeeper import EventGate, Gatekeeper
from agentflow.runtime.leases import LocalWorker
from agentflow.runtime.lifecycle_listeners import LifecycleListeners
from agentflow.runtime.notifier import Notifier
from agentflow.runtime.reply_reader import ReplyReader
from agentflow.runtime.scheduler import Scheduler
from agentflow.settings import Settings
from agentflow.store.database import Database

logger = logging.getLogger("agentflow.runtime.worker")


class Companion(Protocol):
    """A loop that runs beside the worker's claim loop (the dispatcher, the scheduler)."""

    async def run(self) -> None: ...

    def stop(self) -> None: ...


async def keep_running(companion: Companion, stopping: asyncio.Event) -> None:
    """Run a companion; if it fails, log why and start it again after a pause.

    Companions wait out database outages themselves; this is the net under anything
    else, so that events and schedules are never left silently unhandled by a worker
    that still claims runs.
    """
    pause = 1.0
    while not stopping.is_set():
        try:
            await companion.run()
            return
        except Exception:
            logger.exception("%s failed; restarting it in %.0fs", type(companion).__name__, pause)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stopping.wait(), pause)
        pause = min(pause * 2, 30.0)


def worker_companions(
    db: Database,
    settings: Settings,
    *,
    owner: str,
    gate: EventGate,
    agents: AgentEnv,
    configs: ConfigCache,
    listeners: LifecycleListeners,
    local: LocalWorker | None = None,
) -> list[Companion]:
    """The loops a worker named ``owner`` runs beside its claim loop: events to runs (the
    dispatcher); schedules, debounce windows, expiries and retention (the scheduler); gated
    events (the gatekeeper, asking ``gate``); the notification outbox (the notifier); replies
    by email and Slack (the reply reader). ``local``: the worker, when its dispatcher's starts
    are eager."""
    return [
        Dispatcher(db, local).consumer(poll_interval=settings.poll_interval),
        Scheduler(
            db,
            poll_interval=settings.poll_interval,
            retention=settings.event_retention_hours * 3600 if settings.event_retention_hours else None,
            run_retention_days=settings.run_retention_days,
            audit_retention_days=settings.audit_retention_days,
            listeners=listeners,
        ),
        Gatekeeper(db, gate, owner=owner, poll_interval=settings.poll_interval, listeners=listeners),
        Notifier(
            db,
            agents.http,
            smtp_url=settings.smtp_url,
            smtp_from=settings.smtp_from,
            owner=owner,
            poll_interval=settings.poll_interval,
            slack_bot_token=settings.slack_bot_token.get_secret_value() if settings.slack_bot_token else None,
            slack_api_url=settings.slack_api_url,
        ),
        ReplyReader(
            db,
            ModelReplyJudge(agents.model, agents.prices),
            configs,
            settings,
            owner=owner,
            poll_interval=settings.poll_interval,
        ),
    ]
