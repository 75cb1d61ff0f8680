"""Stream groups as they finish (asyncio), then read the filter's verdict.

    npx rollgym serve --policy oracle
    python3 python/examples/stream_async.py ws://127.0.0.1:8787
"""

from __future__ import annotations

import asyncio
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from rollgym_client import AsyncClient  # noqa: E402


async def main(url: str) -> None:
    async with AsyncClient(url, token=os.environ.get("ROLLGYM_TOKEN"), credit=8) as client:
        stream = client.stream(tags={"SimpleSokoban": 8, "FrozenLake": 8}, group_size=4, step=0)
        async for group in stream:  # in finishing order; each group exactly once, even across a resume
            print(f"group {group.group:2d} {group.tag:13s} seed {group.seed}: mean score {group.scores.mean():.2f}")
        batch = stream.batch
        print(f"kept {batch.kept}, dropped {batch.dropped}")
        print({k: round(v, 3) for k, v in batch.metrics.items() if k.endswith("/success")})


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else os.environ.get("ROLLGYM_URL", "ws://127.0.0.1:8787")))
