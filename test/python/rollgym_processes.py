"""rollgym's own processes for the check scripts: `rollgym serve` or `rollgym mock-engine`, each in
a session of its own (a test kills or stops it with its children), started from ROLLGYM_COMMAND
(a JSON argv, e.g. ["/path/node", "/repo/bin/rollgym.js"])."""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
from typing import Sequence, Tuple

COMMAND = json.loads(os.environ["ROLLGYM_COMMAND"])

SERVING = r"serving on (http://\S+)"
LISTENING = r"listening on (http://\S+)"


def start(argv: Sequence[str], pattern: str) -> Tuple[subprocess.Popen, str]:
    """Starts rollgym with `argv` and returns it with the URL its first line matching `pattern` gives."""
    process = subprocess.Popen(
        COMMAND + list(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )
    assert process.stdout is not None
    for line in process.stdout:
        match = re.search(pattern, line)
        if match:
            # Keep reading its output so it never blocks on a full pipe.
            threading.Thread(target=process.stdout.read, daemon=True).start()
            return process, match.group(1)
    raise AssertionError(f"rollgym {argv[0]} printed no URL (exit {process.wait()})")


def serve(*args: str) -> Tuple[subprocess.Popen, str]:
    """`rollgym serve` on a free port with `args` added."""
    return start(["serve", "--port", "0", *args], SERVING)


def mock_engine(*args: str) -> Tuple[subprocess.Popen, str]:
    """`rollgym mock-engine` on a free port, model "mock", with `args` added; its URL ends in /v1."""
    return start(["mock-engine", "--port", "0", "--model", "mock", *args], LISTENING)
