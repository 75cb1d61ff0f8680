"""Shards lost under a sharded client, with plain `rollgym serve` processes (no Ray; run by
python-shard-failure.test.ts; shard_failure.py checks): an endless stream over two, one killed
(SIGKILL) mid-stream; a batch rollout over two more, one stopped (SIGSTOP); a batch rollout
over two more, both killed.

Environment:
    ROLLGYM_COMMAND  JSON argv that runs rollgym, e.g. ["/path/node", "/repo/bin/rollgym.js"]

Prints one JSON summary line; exits non-zero with a message when a check fails.
"""

from __future__ import annotations

import json
import os
import signal
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "python"))

from rollgym_processes import serve  # noqa: E402
from shard_failure import killed_shard_stream, no_shard_left, stopped_shard_batch  # noqa: E402


def main() -> None:
    servers = []
    try:
        for _ in range(6):
            servers.append(serve("--policy", "random"))
        urls = [url for _, url in servers]
        killed = killed_shard_stream(urls[:2], 1, lambda: os.killpg(servers[1][0].pid, signal.SIGKILL))
        # The stopped one is shard 0, the one that judges: the verdict moves too.
        stopped = stopped_shard_batch(urls[2:4], 0, lambda: os.killpg(servers[2][0].pid, signal.SIGSTOP))
        none_left = no_shard_left(urls[4:], lambda: [os.killpg(server.pid, signal.SIGKILL) for server, _ in servers[4:]])
    finally:
        for server, _ in servers:
            if server.poll() is None:
                os.killpg(server.pid, signal.SIGKILL)
            server.wait(30)
    print(json.dumps({"ok": True, "killed_stream": killed, "stopped_batch": stopped, "none_left": none_left}))


if __name__ == "__main__":
    main()
