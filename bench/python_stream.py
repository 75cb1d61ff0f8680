#!/usr/bin/env python3
"""Receive-and-decode throughput of the Python client, for bench/python-stream.ts.

Connects the real client to URL (bench/python-stream.ts's replay server) and plays stream
rollouts back to back, ``for group in client.stream(...)``: the client's own WebSocket reader,
msgpack decode, ``Group.from_frame`` (numpy views of the typed arrays; in token mode the token
logs' checks and one ``TokenLog`` per episode), acknowledgements and credit, then the verdict
into a ``Batch``. Each group is touched the way a trainer would (its token logs' lengths, the
scores). Stops once TARGET_MB of frame bytes have arrived (BYTES_PER_ROLLOUT per rollout: the
group frames plus the verdict, as recorded) and prints one line of JSON.

Usage: /usr/bin/python3 bench/python_stream.py URL tokens|chat TARGET_MB BYTES_PER_ROLLOUT sync|async REQUEST_JSON [CLIENT_DIR]

CLIENT_DIR: the directory holding the ``rollgym_client`` package to measure (default: this
repository's python/), e.g. an older version for a before/after comparison.
"""
import asyncio
import json
import os
import sys
import time

CLIENT_DIR = sys.argv[7] if len(sys.argv) > 7 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python")
sys.path.insert(0, CLIENT_DIR)
from rollgym_client import AsyncClient, Client  # noqa: E402

WARM_UP_ROLLOUTS = 3


class Tally:
    def __init__(self):
        self.frames = 0
        self.episodes = 0
        self.token_ids = 0
        self.score_sum = 0.0

    def group(self, g, tokens):
        if tokens and g.tokens is None:
            raise SystemExit(f"group {g.group} arrived without token logs")
        self.frames += 1
        self.episodes += len(g)
        if g.tokens is not None:
            self.token_ids += sum(len(log) for log in g.tokens)
        self.score_sum += float(g.scores.sum())


def rollout_id(i):
    return f"replay-{i:08d}"  # the recording's id has this length: the replay patches it in place


def run_sync(url, request, tokens, rollouts):
    tally = Tally()
    with Client(url) as client:
        for i in range(WARM_UP_ROLLOUTS):
            client.stream(rollout_id=rollout_id(i), tokens=tokens or None, **request).collect()
        start, cpu = time.perf_counter(), time.process_time()
        for i in range(rollouts):
            stream = client.stream(rollout_id=rollout_id(WARM_UP_ROLLOUTS + i), tokens=tokens or None, **request)
            for g in stream:
                tally.group(g, tokens)
            if stream.batch is None or len(stream.batch.groups) != request["groups"]:
                raise SystemExit("a rollout ended without its verdict or groups")
        return tally, time.perf_counter() - start, time.process_time() - cpu


async def run_async(url, request, tokens, rollouts):
    tally = Tally()
    async with AsyncClient(url) as client:
        for i in range(WARM_UP_ROLLOUTS):
            await client.stream(rollout_id=rollout_id(i), tokens=tokens or None, **request).collect()
        start, cpu = time.perf_counter(), time.process_time()
        for i in range(rollouts):
            stream = client.stream(rollout_id=rollout_id(WARM_UP_ROLLOUTS + i), tokens=tokens or None, **request)
            async for g in stream:
                tally.group(g, tokens)
            if stream.batch is None or len(stream.batch.groups) != request["groups"]:
                raise SystemExit("a rollout ended without its verdict or groups")
        return tally, time.perf_counter() - start, time.process_time() - cpu


def main():
    url, mode, target_mb, per_rollout, api, request = sys.argv[1:7]
    request = json.loads(request)
    tokens = mode == "tokens"
    per_rollout = int(per_rollout)
    rollouts = max(1, -(-int(target_mb) * 10**6 // per_rollout))
    if api == "sync":
        tally, seconds, cpu = run_sync(url, request, tokens, rollouts)
    else:
        tally, seconds, cpu = asyncio.run(run_async(url, request, tokens, rollouts))
    total = rollouts * per_rollout
    print(
        json.dumps(
            {
                "rollouts": rollouts,
                "frames": tally.frames,
                "episodes": tally.episodes,
                "token_ids": tally.token_ids,
                "bytes": total,
                "seconds": seconds,
                "cpu_seconds": cpu,
                "mb_per_s": total / seconds / 1e6,
                "frames_per_s": tally.frames / seconds,
                "episodes_per_s": tally.episodes / seconds,
            }
        )
    )


if __name__ == "__main__":
    main()
