"""max_staleness over a sharded endless stream (issue 34, run by python-stale-shards.test.ts): two
plain `rollgym serve` shards on one mock engine, and a trainer that updates the weights across
them (ShardedClient.update) each time every group the staleness rule lets in has arrived, after
a pause that would let a shard running ahead show it. The same schedule against one server
alone. Both must admit exactly (S + v + 1) × B groups by version v (counted on the group frames'
`admitted.version`), no more ever arrive, and no group arrives older than S.

Environment:
    ROLLGYM_COMMAND  JSON argv that runs rollgym, e.g. ["/path/node", "/repo/bin/rollgym.js"]

Prints one JSON summary line; exits non-zero with a message when a check fails.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from typing import Any, Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "python"))

from rollgym_client import Client  # noqa: E402
from json_checks import check  # noqa: E402
from rollgym_client.sharded import ShardedClient  # noqa: E402
from rollgym_processes import mock_engine, serve  # noqa: E402

S, B, UPDATES = 1, 3, 3
# Windows of 4 groups split 2 + 2; B = 3 splits 1 + 2, so the shares' bounds differ from their groups.
STREAM = dict(tag="FrozenLake", groups=4, group_size=2, seed=7, max_turn=2, max_staleness=S, groups_per_step=B)
# Seconds the trainer waits once the bound is reached: a shard admitting past it would deliver meanwhile.
SETTLE = 0.6


def paced_run(client: Any, stream: Any, capacity_of: Any) -> Dict[str, Any]:
    """Consumes ``stream`` on a thread; updates ``client`` once the groups the rule admits by the
    version in force have all arrived. Returns how many were admitted by each version."""
    arrived: List[Dict[str, Any]] = []
    lock = threading.Lock()

    def consume() -> None:
        for g in stream:
            current = client.version["ordinal"]
            oldest = g.min_version or 0  # no version fields before the first update: ordinal 0
            with lock:
                arrived.append({"group": g.group, "admitted": dict(g.admitted or {}), "age": current - oldest, "capacity": capacity_of(g)})

    reader = threading.Thread(target=consume, daemon=True)
    reader.start()
    ordinal = client.version["ordinal"]
    seen_at_update = []
    for v in range(UPDATES + 1):
        bound = (S + v + 1) * B
        deadline = time.monotonic() + 120
        while len(arrived) < bound:
            check(time.monotonic() < deadline, f"version {v}: {len(arrived)} groups arrived of the {bound} admitted")
            time.sleep(0.02)
        time.sleep(SETTLE)
        seen_at_update.append(len(arrived))
        check(len(arrived) == bound, f"version {v}: {len(arrived)} groups arrived, the bound is (S + v + 1) × B = {bound}")
        if v < UPDATES:
            ordinal += 1
            with client.update(f"step-{ordinal}", ordinal):
                pass
    stream.close()
    reader.join(60)
    with lock:
        groups = list(arrived)
    for g in groups:
        a = g["admitted"]
        check(set(a) == {"version", "accepted", "running", "capacity"}, f"group {g['group']}: admitted {a}")
        check(a["capacity"] == g["capacity"](a["version"]), f"group {g['group']}: capacity {a} is not its pace's")
        check(a["accepted"] + a["running"] <= a["capacity"], f"group {g['group']}: admitted past its capacity: {a}")
        check(g["age"] <= S, f"group {g['group']} arrived {g['age']} versions old, max_staleness is {S}")
    by_version = [sum(1 for g in groups if g["admitted"]["version"] <= v) for v in range(UPDATES + 1)]
    return {"admitted_by_version": by_version, "arrived_at_updates": seen_at_update, "groups": len(groups)}


def main() -> None:
    processes = []
    try:
        engine, engine_url = mock_engine("--latency-model", "none")
        processes.append(engine)
        urls = []
        for _ in range(2):
            server, url = serve("--llm", engine_url, "--model", "mock")
            processes.append(server)
            urls.append(url)
        expected = [(S + v + 1) * B for v in range(UPDATES + 1)]
        with ShardedClient(urls, trainer=True) as sharded:
            stream = sharded.stream(**STREAM)
            paces = {p["group_range"]["first"]: p for p in stream.paces.values()}
            check([p["groups_per_step"] for p in paces.values()] == [1, 2], f"B split over the shares: {stream.paces}")
            ranges = sorted(paces)

            def share_capacity(g):
                first = max(f for f in ranges if f <= g.group % 4)
                return lambda v: (S + v + 1) * paces[first]["groups_per_step"]

            shards = paced_run(sharded, stream, share_capacity)
        with Client(urls[0], trainer=True) as lone:
            alone = paced_run(lone, lone.stream(endless=True, **STREAM), lambda g: lambda v: (S + v + 1) * B)
        check(shards["admitted_by_version"] == alone["admitted_by_version"] == expected, f"admitted by version: shards {shards}, one server {alone}, bound {expected}")
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
            process.wait(30)
    print(json.dumps({"ok": True, "bound": expected, "shards": shards, "alone": alone}))


if __name__ == "__main__":
    main()
