"""rollgym_client's rollout held by a weight update whose trainer is gone
(test/python/python-update-held.test.ts opens the update and kills its trainer first): the
client logs the server's notice, and the rollout's timeout error names the update as the cause.
Prints one JSON line and exits 0 when every check holds.

Environment:
    ROLLGYM_URL    the server's URL
"""

from __future__ import annotations

import json
import os

import engine_checking  # first: puts python/ on the path
from engine_checking import check
from rollgym_client import Client, RollgymError  # noqa: E402

URL = os.environ["ROLLGYM_URL"]


def main() -> int:
    with Client(URL, resume=False) as client:
        try:
            client.rollout(tag="SimpleSokoban", groups=1, group_size=1, rollout_id="held", timeout=3)
            raise AssertionError("the rollout finished while the update held it")
        except RollgymError as error:
            check(error.code == "timeout", f"not a timeout: {error!r}")
            timeout = str(error)
        notices = [n["message"] for n in client.held_notices if n["rollout"] == "held"]
        check(not client.unattributed_errors, f"errors not tied to a request: {client.unattributed_errors}")
    print(json.dumps({"timeout": timeout, "notices": notices}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
