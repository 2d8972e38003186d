"""A load generator for R10: many concurrent trigger calls from one process.

Run as ``python -m tests.support.trigger_load CONFIG_JSON``; it posts ``count`` calls to the
private trigger of ``workflow`` at the given base URLs (round robin), ``concurrency`` at a
time, each with its own Idempotency-Key and a payload naming one of ``keys`` enrollment
keys; it retries a call on connection errors and 503s (same id) and prints one JSON line:
every call's id, key, final status and answer.
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
from typing import Any

import httpx


async def main(config: dict[str, Any]) -> list[dict[str, Any]]:
    urls: list[str] = config["urls"]
    rng = random.Random(config["seed"])
    calls = [
        {"id": f"{config['prefix']}-{n}", "key": f"k{rng.randrange(config['keys'])}", "n": n}
        for n in range(config["count"])
    ]
    results: list[dict[str, Any]] = []
    queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    for call in calls:
        queue.put_nowait(call)
    headers = {"Authorization": f"Bearer {config['api_key']}"}
    limits = httpx.Limits(max_connections=config["concurrency"])
    async with httpx.AsyncClient(timeout=60, limits=limits, headers=headers) as http:

        async def worker(index: int) -> None:
            while not queue.empty():
                call = queue.get_nowait()
                url = f"{urls[(index + call['n']) % len(urls)]}/api/private/trigger/{config['workflow']}"
                for _attempt in range(50):
                    try:
                        response = await http.post(
                            url,
                            json={"key": call["key"], "n": call["n"]},
                            headers={"Idempotency-Key": call["id"]},
                        )
                    except httpx.TransportError:
                        await asyncio.sleep(0.1)
                        continue
                    if response.status_code == 503:
                        await asyncio.sleep(0.1)
                        continue
                    body = response.json()
                    results.append({**call, "status": response.status_code, "answer": body})
                    break
                else:
                    results.append({**call, "status": None, "answer": None})

        await asyncio.gather(*(worker(i) for i in range(config["concurrency"])))
    return results


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(json.loads(sys.argv[1])))))
