"""An asynchronous-RL trainer: the trainer role, an endless token stream, weight updates, and
per-token ages (PROTOCOL.md "Weight updates", python/README.md "Asynchronous RL").

    npx rollgym mock-engine --port 8000 &                      # or your vLLM server
    npx rollgym serve --llm http://127.0.0.1:8000/v1 --model mock [--trainer-token-file FILE]
    python3 python/examples/async_trainer.py ws://127.0.0.1:8787 --updates 3 [--trainer-token-file FILE]

It says `hello {role: "trainer"}` (with the server's trainer token when it reserves the role),
counts versions on from the one the server has in force (an earlier trainer may have moved it),
packs each step's groups with `pack_batch(current_version=…)`, keeps the tokens no older than
`--max-age` versions in the loss, and brackets each weight push with `client.update(…)`, which
announces the new version at begin_update. The "training" is a stand-in (the masked mean
advantage); put your optimizer step in `train_step`. One JSON line per update on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections import Counter
from typing import Dict, List

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from rollgym_client import AsyncClient, Group, pack_batch  # noqa: E402


def train_step(arrays: Dict[str, np.ndarray], max_age: int) -> float:
    """Your optimizer step. Here: the mean advantage over the tokens young enough to train on."""
    mask = (arrays["loss_mask"] == 1) & (arrays["ages"] <= max_age)
    return float(arrays["advantages"][mask].mean()) if mask.any() else 0.0


def step_report(groups: List[Group], arrays: Dict[str, np.ndarray], version: int) -> dict:
    """What one step trained on: each group's versions and age, the tokens' ages."""
    sampled = arrays["loss_mask"] == 1
    ages = arrays["ages"][sampled]
    return {
        "version": version,
        "groups": [
            {"group": g.group, "min_version": g.min_version, "max_version": g.max_version, "age": g.age(version)}
            for g in groups
        ],
        "token_ages": {str(age): count for age, count in sorted(Counter(ages.tolist()).items())},
        "token_versions": sorted(set(arrays["versions"][sampled].tolist())),
    }


async def train(args: argparse.Namespace, token: str | None) -> None:
    async with AsyncClient(args.url, trainer=True, trainer_token=token) as client:
        start = version = client.version["ordinal"]  # the version in force, not 0: count on from it
        stream = client.stream(
            tag=args.tag,
            groups=args.groups,
            group_size=args.group_size,
            endless=True,
            tokens=True,
            in_flight=2 * args.groups,
            max_staleness=args.max_staleness,
        )
        step: List[Group] = []
        async for group in stream:
            step.append(group)
            if len(step) < args.groups:
                continue
            arrays = pack_batch(step, current_version=version)
            report = step_report(step, arrays, version)
            report["objective"] = train_step(arrays, args.max_age)
            step = []
            new = version + 1
            async with client.update(f"step-{new}", new, mode=args.mode) as begun:
                pass  # push the weights here: NCCL, disk, vLLM's weight-transfer routes
            version = client.version["ordinal"]
            report.update(update=begun["id"], paused=begun["paused"], now=client.version)
            print(json.dumps(report), flush=True)
            if version - start == args.updates:
                break
        await stream.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("url", nargs="?", default=os.environ.get("ROLLGYM_URL", "ws://127.0.0.1:8787"))
    parser.add_argument("--trainer-token-file", help="the server's trainer token (default $ROLLGYM_TRAINER_TOKEN)")
    parser.add_argument("--tag", default="SimpleSokoban")
    parser.add_argument("--groups", type=int, default=4, help="groups per training step (one window)")
    parser.add_argument("--group-size", type=int, default=2)
    parser.add_argument("--updates", type=int, default=3, help="weight updates before stopping")
    parser.add_argument("--max-staleness", type=int, default=1)
    parser.add_argument("--max-age", type=int, default=2, help="tokens older than this many versions leave the loss")
    parser.add_argument("--mode", choices=("keep", "wait", "abort"), default=None, help="how the engines pause")
    args = parser.parse_args()
    if args.trainer_token_file:
        with open(args.trainer_token_file, encoding="utf-8") as f:
            token = f.read().strip()
    else:
        token = os.environ.get("ROLLGYM_TRAINER_TOKEN")
    asyncio.run(train(args, token))


if __name__ == "__main__":
    main()
