"""rollgym_client against a server that reserves the trainer role and bounds updates
(test/python/python-async.test.ts starts it on 127.0.0.1:0 with a trainer token and a short
max_update_s): a trainer hello without the token or with another is refused, one with it is the
trainer, clients that are not the trainer need none, ordinals past the maximum are refused before
they are sent, and an update left open past max_update_s is ended by the server (the trainer told,
a bystander's rollout completes). Prints one JSON line and exits 0 when every check holds.

Environment:
    ROLLGYM_URL              the server's URL
    ROLLGYM_TRAINER_TOKEN    the server's trainer token
"""

from __future__ import annotations

import json
import os
import time

import engine_checking  # first: puts python/ on the path
from engine_checking import check
from rollgym_client import MAX_VERSION_ORDINAL, Client, RollgymError  # noqa: E402

URL = os.environ["ROLLGYM_URL"]
TOKEN = os.environ["ROLLGYM_TRAINER_TOKEN"]


def refused(make) -> RollgymError:
    try:
        make().close()
    except RollgymError as error:
        return error
    raise AssertionError("expected the trainer hello to be refused")


def until(condition, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        check(time.monotonic() < deadline, f"never happened: {what}")
        time.sleep(0.01)


def main() -> int:
    missing = refused(lambda: Client(URL, trainer=True, resume=False))
    check(missing.code == "not_trainer" and missing.field == "trainer_token", f"missing: {missing!r}")
    check("reserves the trainer role" in str(missing), str(missing))
    wrong = refused(lambda: Client(URL, trainer=True, trainer_token=TOKEN + "x", resume=False))
    check(wrong.code == "not_trainer" and "is not this server's trainer token" in str(wrong), f"wrong: {wrong!r}")
    try:
        Client(URL, trainer_token=TOKEN, connect=False)
        raise AssertionError("a trainer_token without trainer=True was taken")
    except ValueError as error:
        check("trainer=True" in str(error), str(error))

    with Client(URL, trainer=True, trainer_token=TOKEN) as trainer, Client(URL) as bystander:
        check(trainer.version == {"label": "initial", "ordinal": 0}, f"version {trainer.version}")
        max_update_s = trainer.limits.get("max_update_s")
        check(isinstance(max_update_s, (int, float)) and max_update_s > 0, f"limits {trainer.limits}")
        check("max_update_s" not in bystander.limits, f"bystander limits {bystander.limits}")
        with trainer.update("step-1", 1):
            pass
        try:
            trainer.end_update("none", "huge", 2**53 - 1)
            raise AssertionError("an ordinal past the maximum was sent")
        except ValueError as error:
            check(str(MAX_VERSION_ORDINAL) in str(error), str(error))

        # An update left open: the server ends it at the old version after max_update_s, the
        # bystander's rollout (held by the closed admission) completes, and the trainer is told.
        begun = trainer.begin_update()
        batch = bystander.rollout(tag="SimpleSokoban", groups=2, group_size=2, seed=3)
        check(sorted(set(batch.group_ids.tolist())) == [0, 1], f"bystander's batch {batch.group_ids}")
        until(lambda: any(e.field == "max_update_s" for e in trainer.unattributed_errors), "the expiry notice")
        notice = next(e for e in trainer.unattributed_errors if e.field == "max_update_s")
        check(notice.code == "update" and f'update "{begun["id"]}" expired' in str(notice), str(notice))
        try:
            trainer.end_update(begun["id"], "step-2", 2)
            raise AssertionError("an expired update was ended")
        except RollgymError as error:
            check(error.code == "update" and error.field == "max_update_s", f"late end: {error!r}")
        with trainer.update("step-2", 2):
            pass
        check(trainer.version == {"label": "step-2", "ordinal": 2}, f"version {trainer.version}")
        result = {
            "max_update_s": max_update_s,
            "refused": [missing.message, wrong.message],
            "late": notice.message,
            "checks": engine_checking.made,
        }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
