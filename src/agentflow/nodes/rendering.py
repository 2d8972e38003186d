"""Render templates without stalling the event loop.

Templates belong to tenants, and one tenant's slow template must not hold up the API,
other runs or lease heartbeats. A render starts on the event loop, where nearly all of them
finish in microseconds; one that runs past a few milliseconds gives way
(``RenderDeferred``) and is done again on a small thread pool, where its CPU limit still
applies. Rendering has no side effects, so doing it again is safe.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

from agentflow.core.templating import RenderDeferred, deferring
from agentflow.core.templating.meter import courteous

P = ParamSpec("P")
T = TypeVar("T")

_POOL = ThreadPoolExecutor(max_workers=1, thread_name_prefix="agentflow-render")
"""One thread: slow renders are rare, and each thread more competes with the event loop
for the interpreter lock (two made the loop wait about 20 ms, one about 5)."""


async def call_rendering(fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
    """Call ``fn``, pure code that renders templates, here when quick, else on a thread.

    Returns:
        What ``fn`` returns; its exceptions (``StepFailure`` with ``template_limit`` ...) pass.
    """
    try:
        with deferring():
            return fn(*args, **kwargs)
    except RenderDeferred:
        pass
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(_POOL, functools.partial(_courteously, fn, *args, **kwargs))


def _courteously(fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
    with courteous():
        return fn(*args, **kwargs)
