"""A shard killed mid-stream (issue 34): what ray_check.py (Ray shards) and
shard_failure_check.py (plain `rollgym serve` processes) both check.

:func:`killed_shard_stream` iterates a sharded endless stream, kills one shard's server once the
first window is judged, and goes on until WINDOWS_AFTER windows past the one its share was
played again from are judged; then every group of those windows must have been handed out
exactly once, and the groups and window verdicts must equal a lone server's for the same seed
(all but PER_PROCESS). :func:`stopped_shard_batch` stops one shard's server (SIGSTOP: it keeps
its sockets but answers nothing) and checks a batch rollout still equals a lone server's;
:func:`no_shard_left` kills them all and checks the error names each one.
"""

from __future__ import annotations

from typing import Callable, Dict, List, Sequence

from json_checks import PER_PROCESS, check, clean, comparable_group, diff
from rollgym_client import Client, ConnectionLost
from rollgym_client.sharded import ShardedClient

# Windows of 5 groups (3 kept of each by top_k) from the built-in random policy, so verdicts vary.
STREAM = dict(tags={"CoordSokoban": 2, "FrozenLake": 3}, group_size=3, seed=33, max_turn=3, filter={"strategy": "top_k", "value": 0.6})
PER_WINDOW = sum(STREAM["tags"].values())
# A filtered batch of 6 groups (shares of 3 + 3, or 2 + 2 + 2).
BATCH = dict(tags={"CoordSokoban": 3, "FrozenLake": 3}, group_size=3, seed=12, max_turn=3, filter={"strategy": "top_k", "value": 0.5})
# Windows compared past the first one the lost share was played again from.
WINDOWS_AFTER = 3
# Seconds a dropped shard is given up after (short, so the check does not wait long).
GIVE_UP_AFTER = 2.0


def _group_json(g) -> dict:
    # kept and failed are the window verdicts' to say (see ray_check.first_windows).
    return {k: v for k, v in comparable_group(g).items() if k not in ("kept", "failed")}


def _window_json(verdict: dict) -> dict:
    return clean({k: v for k, v in verdict.items() if k not in PER_PROCESS})


def lone_windows(url: str, windows: int) -> dict:
    """The groups and verdicts of a lone server's first ``windows`` windows of STREAM."""
    groups: Dict[int, dict] = {}
    with Client(url) as client:
        stream = client.stream(**STREAM, endless=True)
        for g in stream:
            if g.window < windows:
                groups[g.group] = _group_json(g)
            if len(groups) == windows * PER_WINDOW and all(w in stream.windows for w in range(windows)):
                break
        stream.close()
        verdicts = [_window_json(stream.windows[w]) for w in range(windows)]
    return {"groups": [groups[k] for k in sorted(groups)], "windows": verdicts}


def killed_shard_stream(urls: Sequence[str], victim: int, kill: Callable[[], None]) -> dict:
    """Kills shard ``victim`` (``kill()``, e.g. SIGKILL to its server) mid-stream; checks that
    no group is lost or handed out twice and that the windows equal a lone server's (the first
    shard still alive plays them afterwards)."""
    handed: List[int] = []
    groups: Dict[int, dict] = {}
    with ShardedClient(urls, give_up_after=GIVE_UP_AFTER) as sharded:
        stream = sharded.stream(**STREAM)
        killed = False
        windows = None  # how many windows to compare, once the share has moved
        for g in stream:
            check(g.group not in groups, f"group {g.group} was handed out twice")
            check(g.window == g.group // PER_WINDOW, f"group {g.group} came as window {g.window}'s")
            handed.append(g.group)
            groups[g.group] = _group_json(g)
            if not killed and 0 in stream.windows:
                kill()
                killed = True
            if windows is None and stream.replayed:
                windows = stream.replayed[0]["from_window"] + WINDOWS_AFTER
            if windows is not None and all(w in stream.windows for w in range(windows)):
                if all(k in groups for k in range(windows * PER_WINDOW)):
                    break
        stream.close()
        replayed, duplicates, dead = stream.replayed, stream.duplicates, dict(sharded.dead)
        verdicts = [_window_json(stream.windows[w]) for w in range(windows)]
    check(list(dead) == [victim], f"expected shard {victim} given up, got {dead}")
    check(len(replayed) == 1 and replayed[0]["shard"] == victim and replayed[0]["on"] != victim, f"expected shard {victim}'s share played again once on another shard: {replayed}")
    expected = set(range(windows * PER_WINDOW))
    check(expected <= set(handed), f"groups lost: {sorted(expected - set(handed))}")
    merged = {"groups": [groups[k] for k in sorted(expected)], "windows": verdicts}
    survivor = urls[min(i for i in range(len(urls)) if i != victim)]
    alone = lone_windows(survivor, windows)
    check(merged == alone, f"the windows after shard {victim} was killed differ from a lone server's:\n{diff(merged, alone)}")
    check(all(w["dropped"] for w in alone["windows"]), "a window dropped nothing, so its ranking was not compared")
    return {"victim": victim, "windows": windows, "from_window": replayed[0]["from_window"], "handed": len(handed), "duplicates": duplicates}


def _batch_json(batch) -> dict:
    verdict = {k: v for k, v in batch.verdict.items() if k not in PER_PROCESS}
    return clean({"groups": [comparable_group(g) for g in batch.groups], "verdict": verdict})


def stopped_shard_batch(urls: Sequence[str], victim: int, stop: Callable[[], None]) -> dict:
    """Stops shard ``victim`` (``stop()``) before a batch rollout: found by the WebSocket ping,
    given up GIVE_UP_AFTER s after its connection dropped, its share played on another shard;
    the batch equals a lone server's."""
    with ShardedClient(urls, give_up_after=GIVE_UP_AFTER) as sharded:
        stop()
        merged = _batch_json(sharded.rollout(**BATCH))
        replayed, dead = sharded.replayed, dict(sharded.dead)
    check(list(dead) == [victim], f"expected shard {victim} given up, got {dead}")
    check(len(replayed) == 1 and replayed[0]["shard"] == victim and replayed[0]["on"] != victim, f"expected shard {victim}'s share played again once on another shard: {replayed}")
    survivor = urls[min(i for i in range(len(urls)) if i != victim)]
    with Client(survivor) as client:
        alone = _batch_json(client.rollout(**BATCH))
    check(merged == alone, f"the batch with shard {victim} stopped differs from a lone server's:\n{diff(merged, alone)}")
    check(bool(alone["verdict"]["dropped"]), "the filter dropped nothing, so its ranking was not compared")
    return {"victim": victim, "groups": replayed[0]["groups"]}


def no_shard_left(urls: Sequence[str], kill_all: Callable[[], None]) -> dict:
    """Every shard killed before a batch rollout: ConnectionLost ``no_shards`` naming each."""
    with ShardedClient(urls, give_up_after=GIVE_UP_AFTER) as sharded:
        kill_all()
        try:
            sharded.rollout(**BATCH)
        except ConnectionLost as error:
            raised = error
        else:
            raise AssertionError("a rollout with every shard killed did not fail")
    check(raised.code == "no_shards", f"expected code no_shards, got {raised!r}")
    for i, url in enumerate(urls):
        check(f"shard {i} (" in raised.message and url.split("//")[1] in raised.message, f"the error does not name shard {i} ({url}): {raised.message}")
    return {"code": raised.code, "shards": len(urls)}
