"""A sharded endless stream whose consumer stops taking groups (issue 34; run by
python-sharded-backpressure.test.ts): two plain `rollgym serve` shards with a small buffer bound
(--max-buffered-groups) and a ShardedClient with a small credit. The consumer takes a few groups,
then none for a while: the shards must pause, as one server pauses for a slow client, instead of
playing on into the client's memory. Then it takes groups again until windows are judged.

Environment:
    ROLLGYM_COMMAND  JSON argv that runs rollgym, e.g. ["/path/node", "/repo/bin/rollgym.js"]

Prints one JSON summary line; exits non-zero with a message when a check fails.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import urllib.request
from typing import List

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "python"))

from json_checks import check  # noqa: E402
from rollgym_client.sharded import ShardedClient  # noqa: E402
from rollgym_processes import serve  # noqa: E402

BUFFERED, CREDIT, GROUP_SIZE, SHARDS = 4, 2, 2, 2
# Groups finished on a shard and not yet taken by the consumer, at most: the shard's buffer
# (started or finished, not acknowledged), then in the client what its reader fetched at once
# (acknowledged, up to the credit) and what waits for the consumer (ShardedStream.hold).
PER_SHARD = BUFFERED + CREDIT + CREDIT
TAKEN_FIRST = 6
# The servers' count must stay still this long to be called settled (their groups take ms).
STILL_S = 2.0


def finished_groups(urls: List[str]) -> int:
    """Groups the shards have finished, from their episode counters."""
    episodes = 0.0
    for url in urls:
        with urllib.request.urlopen(url + "/metrics", timeout=30) as answer:
            for line in answer.read().decode().splitlines():
                if line.startswith("rollgym_episodes_total"):
                    episodes += float(line.rpartition(" ")[2])
    return int(episodes) // GROUP_SIZE


def settled(urls: List[str], most: int) -> int:
    """The shards' finished groups once the count stays still for STILL_S, or as soon as it passes
    ``most`` (then there is no bound to wait for)."""
    last, since = finished_groups(urls), time.monotonic()
    while time.monotonic() - since < STILL_S:
        time.sleep(0.2)
        now = finished_groups(urls)
        if now > most:
            return now
        if now != last:
            last, since = now, time.monotonic()
    return last


def main() -> None:
    servers = [serve("--policy", "random", "--max-buffered-groups", str(BUFFERED)) for _ in range(SHARDS)]
    urls = [url.rstrip("/") for _, url in servers]
    try:
        with ShardedClient(urls, credit=CREDIT) as client:
            stream = client.stream(tag="FrozenLake", groups=4, group_size=GROUP_SIZE, seed=11, max_turn=2)
            taken = [next(stream) for _ in range(TAKEN_FIRST)]
            most = TAKEN_FIRST + SHARDS * PER_SHARD
            paused_at = settled(urls, most)
            check(
                paused_at <= most,
                f"with the consumer idle after {TAKEN_FIRST} groups the shards finished {paused_at} groups; "
                f"backpressure allows at most {most} ({SHARDS} shards × {PER_SHARD} ahead)",
            )
            # Taking again resumes every share, and windows are judged as before.
            while len(stream.windows) < 4:
                taken.append(next(stream))
            stream.close()
            ids = [g.group for g in taken]
            check(len(ids) == len(set(ids)), "a group was handed out twice")
            print(json.dumps({"ok": True, "paused_at": paused_at, "most": most, "hold": stream.hold, "taken": len(taken), "windows": sorted(stream.windows)}))
    finally:
        for server, _ in servers:
            if server.poll() is None:
                os.killpg(server.pid, signal.SIGKILL)
            server.wait(30)


if __name__ == "__main__":
    main()
