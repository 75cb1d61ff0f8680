"""A trainer that counts from 0 against a server an earlier trainer moved on (test/python/
trainer-examples.test.ts starts it at version ROLLGYM_EXPECT_VERSION): its first update is refused
at begin_update, before any engine pauses and before the body runs, with an error naming the
field, the version in force and what is allowed. Prints one JSON line and exits 0 when every check
holds.

Environment:
    ROLLGYM_URL               the server's URL
    ROLLGYM_EXPECT_VERSION    the ordinal the server has in force
"""

from __future__ import annotations

import json
import os

import engine_checking  # first: puts python/ on the path
from engine_checking import check
from rollgym_client import Client, RollgymError  # noqa: E402

URL = os.environ["ROLLGYM_URL"]
CURRENT = int(os.environ["ROLLGYM_EXPECT_VERSION"])


def main() -> int:
    with Client(URL, trainer=True) as client:
        check(client.version == {"label": f"step-{CURRENT}", "ordinal": CURRENT}, f"version {client.version}")
        ran = []
        step = 0  # the stale start: counting from 0, not from client.version
        try:
            with client.update(f"step-{step + 1}", step + 1):
                ran.append("body")  # the weights would be pushed here
            raise AssertionError("a stale update was taken")
        except RollgymError as error:
            refused = error
        check(not ran, "the body ran: begin_update accepted a stale version")
        check(refused.code == "update" and refused.field == "version.ordinal", f"refused: {refused!r}")
        message = str(refused)
        check(f'got 1, must be greater than the current {CURRENT} ("step-{CURRENT}")' in message, message)
        check("is refused before any engine paused" in message, message)
        check(client.version["ordinal"] == CURRENT, f"version after {client.version}")
    print(json.dumps({"message": message}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
