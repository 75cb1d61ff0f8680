#!/usr/bin/env python3
"""End-to-end delivery throughput: `rollgym serve` (built-in oracle policy, so inference costs
nothing) -> WebSocket -> the Python client -> numpy arrays and episode records.

Usage: start `npx rollgym serve --port 8787`, then
    /usr/bin/python3 bench/python_client.py [URL] [GROUPS] [GROUP_SIZE]
"""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from rollgym_client import Client  # noqa: E402

url = sys.argv[1] if len(sys.argv) > 1 else "ws://127.0.0.1:8787"
groups = int(sys.argv[2]) if len(sys.argv) > 2 else 64
group_size = int(sys.argv[3]) if len(sys.argv) > 3 else 16

with Client(url, credit=64) as client:
    client.rollout(tag="CoordSokoban", groups=8, group_size=16)  # warm-up
    print(f"CoordSokoban train batch, {groups} groups x {group_size}")
    for delivery in ("batch", "stream"):
        start = time.perf_counter()
        batch = client.rollout(tag="CoordSokoban", groups=groups, group_size=group_size, delivery=delivery)
        seconds = time.perf_counter() - start
        episodes = len(batch.all_episodes)
        print(f"{delivery:6s}: {episodes} episodes in {seconds:.2f} s = {episodes / seconds:.0f} episodes/s, "
              f"{groups / seconds:.0f} groups/s")
