"""Engine-side fairness across shards (issue 34 item 5, run by python-stale-shards.test.ts): two
plain `rollgym serve` shards share one mock engine with fewer slots than the shards together
keep in flight, so the engine is the bottleneck and its FIFO queue decides who is served. A
sharded rollout gives both the same number of groups; the engine's own records
(GET /mock/generations: each request's X-Session-ID "<batch>:<env id>" and the order it began
decoding in) say which shard each request came from (env id → group → share). While both shards
still had requests to send, each must have been served within a factor of the other.

Environment:
    ROLLGYM_COMMAND   JSON argv that runs rollgym, e.g. ["/path/node", "/repo/bin/rollgym.js"]
    FAIR_CONCURRENCY  each shard's rollgym.llm.concurrency, comma-separated (default "4,4"; "8,1"
                      shows a shard allowed fewer requests in flight getting a smaller share)

Prints one JSON summary line; exits non-zero with a message when a check fails.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.request
from typing import Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "python"))
sys.path.insert(0, HERE)

from rollgym_client.sharded import ShardedClient, shard_ranges  # noqa: E402
from json_checks import check  # noqa: E402
from rollgym_processes import mock_engine, serve  # noqa: E402

CONCURRENCY = [int(c) for c in os.environ.get("FAIR_CONCURRENCY", "4,4").split(",")]
ENGINE_SLOTS = 4
ROLLOUT = dict(tag="CoordSokoban", groups=8, group_size=4, seed=21, max_turn=4)
# Requests served to the shard served less, at least this share of the other's (while both sent).
FLOOR = 2 / 3


def generations(engine_url: str) -> List[Dict]:
    root = engine_url.removesuffix("/v1")
    with urllib.request.urlopen(root + "/mock/generations", timeout=30) as answer:
        kept = json.loads(answer.read())
    check(kept["dropped"] == 0, f"the engine dropped {kept['dropped']} of its records")
    return kept["generations"]


def main() -> None:
    processes = []
    try:
        engine, engine_url = mock_engine("--ttft-ms", "20", "--tpot-ms", "1", "--max-concurrency", str(ENGINE_SLOTS))
        processes.append(engine)
        urls = []
        for c in CONCURRENCY:
            server, url = serve("--llm", engine_url, "--model", "mock", f"rollgym.llm.concurrency={c}")
            processes.append(server)
            urls.append(url)
        with ShardedClient(urls) as sharded:
            batch = sharded.rollout(delivery="stream", **ROLLOUT)
        check(len(batch.groups) == ROLLOUT["groups"], f"{len(batch.groups)} groups played")
        ranges = shard_ranges(ROLLOUT["groups"], len(urls))
        records = generations(engine_url)
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
            process.wait(30)

    def shard_of(session: str) -> int:
        group = int(session.split(":")[1]) // ROLLOUT["group_size"]
        return next(i for i, (first, count) in enumerate(ranges) if first <= group < first + count)

    check(all(r["session"] for r in records), "a generation request without X-Session-ID")
    order = sorted(records, key=lambda r: r["started"])
    shards = [shard_of(r["session"]) for r in order]
    totals = [shards.count(i) for i in range(len(urls))]
    # From the first request of the shard that began last to the last one of the shard that
    # finished first, both were competing (a share's start can lag by a connection's set-up).
    began = max(shards.index(i) for i in range(len(urls)))
    ended = min(max(n for n, s in enumerate(shards) if s == i) for i in range(len(urls))) + 1
    served = [shards[began:ended].count(i) for i in range(len(urls))]
    share = min(served) / max(served)
    summary = {"concurrency": CONCURRENCY, "requests": totals, "while_both_sent": served, "share": round(share, 3)}
    check(share >= FLOOR, f"one shard starved the other of the shared engine: {summary}")
    print(json.dumps({"ok": True, **summary}))


if __name__ == "__main__":
    main()
