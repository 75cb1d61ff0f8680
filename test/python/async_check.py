"""rollgym_client's asynchronous-RL surface against a real server (test/python/python-async.test.ts
starts it on 127.0.0.1:0 with a policy that has weight updates): a trainer session, an endless
stream paced by max_staleness, the update bracket as a context manager (sync and asyncio), the
errors of misuse, and pack_batch's per-token versions and ages. Prints one JSON line and exits 0
when every check holds.

Environment:
    ROLLGYM_URL    the server's URL
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))
sys.path.insert(0, os.path.dirname(__file__))

import fake_server  # noqa: E402
from rollgym_client import AsyncClient, Client, Group, RollgymError, pack_batch  # noqa: E402
from rollgym_client.codec import decode, encode  # noqa: E402

URL = os.environ["ROLLGYM_URL"]


def check(condition: bool, message: str) -> None:
    if not condition:
        raise AssertionError(message)


def raises(code: str, call) -> str:
    try:
        call()
    except RollgymError as error:
        check(error.code == code, f"expected {code}, got {error.code}: {error}")
        return str(error)
    raise AssertionError(f"expected RollgymError {code}")


def sync_trainer() -> dict:
    """An endless stream consumed by a trainer that updates every groups_per_step groups."""
    S, B, UPDATES = 1, 2, 4
    with Client(URL, trainer=True, credit=16) as client:
        start = client.version
        check(start is not None and start["ordinal"] >= 0, f"a trainer's welcome names the version: {start}")
        ordinal = start["ordinal"]
        stream = client.stream(
            tag="SimpleSokoban", groups=2, group_size=2, seed=100, endless=True, in_flight=6, max_staleness=S, groups_per_step=B
        )
        seen = []
        updates = 0
        for group in stream:
            check(group.group not in seen, f"group {group.group} handed out twice")
            seen.append(group.group)
            check(group.seed == 100 + group.group, f"group {group.group} plays seed {group.seed}")
            check(group.window == group.group // 2, f"group {group.group} in window {group.window}")
            a = group.admitted
            check(a is not None and a["accepted"] + a["running"] <= a["capacity"] == (S + a["version"] + 1) * B, f"admitted {a}")
            if len(seen) % B == 0 and updates < UPDATES:
                ordinal += 1
                with client.update(f"step-{ordinal}", ordinal) as begun:
                    check(begun["type"] == "update_begun", f"begun: {begun}")
                check(client.version == {"label": f"step-{ordinal}", "ordinal": ordinal}, f"version after: {client.version}")
                updates += 1
                if updates == UPDATES:
                    stream.cancel()
        batch = stream.batch
        check(batch is not None and batch.verdict.get("windows") == len(stream.windows), f"verdict {batch and batch.verdict}")
        check(len(stream.windows) >= UPDATES * B // 2, f"windows {sorted(stream.windows)}")
        # Every started group was handed out exactly once.
        started = set()
        for w in stream.windows.values():
            not_started = set(w.get("not_started", []))
            started |= {g for g in w["kept"] + w["dropped"] + w["failed_groups"] if g not in not_started}
        check(sorted(seen) == sorted(started), f"handed out {sorted(seen)}, started {sorted(started)}")

        # Misuse: a second begin while one is open, an ordinal that does not increase.
        begun = client.begin_update()
        message = raises("update", lambda: client.begin_update())
        check("still open" in message, message)
        message = raises("update", lambda: client.end_update(begun["id"], "same", ordinal))
        check("must be greater" in message, message)
        check(f'update "{begun["id"]}" stays open' in message, message)
        ended = client.end_update(begun["id"], f"step-{ordinal + 1}", ordinal + 1)
        check(ended["version"]["ordinal"] == ordinal + 1, f"ended {ended}")
        ordinal += 1

        # The bracket announces its version: a stale one is refused at begin_update, the body
        # never runs, nothing stays open; end_update must name the announced version.
        ran = []

        def stale_bracket() -> None:
            with client.update("step-1", 1):
                ran.append(True)

        message = raises("update", stale_bracket)
        check(not ran and f"must be greater than the current {ordinal}" in message and "begin_update" in message, message)
        check(client.version["ordinal"] == ordinal, f"version after a refused begin {client.version}")
        begun = client.begin_update(label=f"step-{ordinal + 1}", ordinal=ordinal + 1)
        message = raises("update", lambda: client.end_update(begun["id"], "other", ordinal + 1))
        check("is not the one its begin_update announced" in message and f'update "{begun["id"]}" stays open' in message, message)
        client.end_update(begun["id"], f"step-{ordinal + 1}", ordinal + 1)
        ordinal += 1

        # A body that raises leaves the update open and its error names the update.
        try:
            with client.update(f"step-{ordinal + 1}", ordinal + 1) as begun:
                raise RuntimeError("weights failed to load")
        except RuntimeError as error:
            notes = " ".join(getattr(error, "__notes__", []))
            check(sys.version_info < (3, 11) or f"update {begun['id']!r} stays open" in notes, f"notes: {notes}")
        client.end_update(begun["id"], f"step-{ordinal + 1}", ordinal + 1)
        return {"groups": len(seen), "windows": len(stream.windows), "updates": updates + 1}


def not_a_trainer() -> str:
    with Client(URL) as client:
        return raises("not_trainer", lambda: client.begin_update())


async def async_trainer() -> dict:
    async with AsyncClient(URL, trainer=True) as client:
        ordinal = client.version["ordinal"]
        stream = client.stream(tag="SimpleSokoban", groups=2, group_size=2, seed=7, endless=True, in_flight=2)
        groups = []
        async for group in stream:
            groups.append(group.group)
            if len(groups) == 3:
                async with client.update(f"a-{ordinal + 1}", ordinal + 1):
                    pass
                await stream.cancel()
        check(len(set(groups)) == len(groups), f"duplicates in {groups}")
        check(client.version["ordinal"] == ordinal + 1, f"version {client.version}")
        return {"groups": len(groups)}


def pack_versions() -> dict:
    """pack_batch's versions and ages from a frame carrying token_versions_i32."""
    eps = [fake_server.episode(i, 0, "Fake", 3) for i in range(2)]
    frame = fake_server.group_frame("r", 0, eps, True, 0.0, tokens=True)
    ids = np.frombuffer(frame["token_ids_i32"], dtype="<i4")
    mask = np.frombuffer(frame["loss_mask_u8"], dtype="<u1")
    versions = np.where(mask == 1, 3, -1).astype("<i4")
    versions[np.flatnonzero(mask == 1)[-1]] = 4  # the last sampled id after an update
    frame["token_versions_i32"] = versions.tobytes()
    frame["min_version"], frame["max_version"] = 3, 4
    group = Group.from_frame(decode(encode(frame)))
    check(group.min_version == 3 and group.max_version == 4 and group.age(6) == 3, f"group versions {group.min_version}")
    # A current version older than the group's: the ordinals count from another start.
    for call in (lambda: group.age(3), lambda: pack_batch(group, current_version=3)):
        try:
            call()
            raise AssertionError("a current version older than the group's was taken")
        except ValueError as error:
            check("3 is older than group 0's max_version 4" in str(error), str(error))
    check(int(pack_batch(group, current_version=4)["ages"].min()) == 0, "current = the newest version: ages from 0")
    check(all(log.versions is not None and len(log.versions) == len(log) for log in group.tokens), "token logs carry versions")
    packed = pack_batch(group, current_version=6)
    loss = packed["loss_mask"] == 1
    check((packed["versions"][loss] >= 3).all() and (packed["versions"][~loss] == -1).all(), "versions only at sampled ids")
    check((packed["ages"][loss] == 6 - packed["versions"][loss]).all() and (packed["ages"][~loss] == 0).all(), "ages")
    check(int(packed["ages"][loss].min()) == 2 and list(packed["min_versions"]) == [3, 3], f"min_versions {packed['min_versions']}")
    # A group played before any update carries no versions: ordinal 0 at its sampled ids, also
    # beside one that has them (a trainer's first batches).
    plain = Group.from_frame(decode(encode(fake_server.group_frame("r", 0, eps, True, 0.0, tokens=True))))
    check(plain.min_version == 0 and plain.max_version == 0 and plain.age(2) == 2, f"before any update: {plain.min_version}")
    # Token versions newer than current, in a frame that names no group versions.
    unnamed = dict(frame)
    del unnamed["min_version"], unnamed["max_version"]
    try:
        pack_batch(Group.from_frame(decode(encode(unnamed))), current_version=3)
        raise AssertionError("tokens sampled at a version newer than current were taken")
    except ValueError as error:
        check("current_version=3 is older than version 4 that sampled tokens of row 1" in str(error), str(error))
    check("versions" not in pack_batch(plain), "no versions key without versions")
    mixed = pack_batch([plain, group], current_version=6)
    first = mixed["loss_mask"][:2] == 1
    check((mixed["versions"][:2][first] == 0).all() and (mixed["versions"][:2][~first] == -1).all(), "unstamped logs are ordinal 0")
    check((mixed["ages"][:2][first] == 6).all() and list(mixed["min_versions"]) == [0, 0, 3, 3], f"mixed {mixed['min_versions']}")
    return {"tokens": int(ids.shape[0])}


def main() -> int:
    result = {
        "sync": sync_trainer(),
        "not_trainer": not_a_trainer(),
        "async": asyncio.run(async_trainer()),
        "pack": pack_versions(),
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
