"""rollgym shards on a local Ray instance (run by python-ray.test.ts under a Python with Ray).

Environment:
    ROLLGYM_COMMAND  JSON argv that runs rollgym, e.g. ["/path/node", "/repo/bin/rollgym.js"]

For 1, 2 and 3 shards placed by a ShardGroup: every shard answers /healthz with status ok on
its own URL, plays the same request into the same batch as every other shard and as a shard
started outside Ray (a group is a pure function of its request and index, which is what makes
sharding sound), and stops cleanly on SIGTERM (exit code 0, then /healthz down); and
ShardedClient.rollout over the shards gives one server's batch (but PER_PROCESS) for SHARDED with
the built-in random policy and MOCK_SHARDED against the mock engine, and ShardedClient.stream
the first windows of one server's endless stream (groups and window verdicts).

With the argument ``shard-failure`` it checks instead that 3 shards go on when one's server is
killed (SIGKILL) mid-way through an endless stream (shard_failure.py). Prints one JSON summary
line; exits non-zero with a message when a check fails.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON_DIR = os.path.join(os.path.dirname(os.path.dirname(HERE)), "python")
sys.path.insert(0, PYTHON_DIR)

import ray  # noqa: E402

from rollgym_client import Batch, Client  # noqa: E402
from rollgym_client.ray import RollgymShard, ShardActor, ShardGroup  # noqa: E402
from rollgym_client.sharded import ShardedClient  # noqa: E402
from json_checks import PER_PROCESS, check, clean, comparable_group, diff  # noqa: E402
from shard_failure import killed_shard_stream  # noqa: E402

COMMAND = json.loads(os.environ["ROLLGYM_COMMAND"])
SHARD_COUNTS = (1, 2, 3)
# The request every shard plays: a train batch of two tags, so seeds, tags and group ids vary.
REQUEST = dict(tags={"CoordSokoban": 2, "FrozenLake": 2}, group_size=4, mode="train", seed=41, max_turn=3)
# The built-in random policy, so scores vary and the filter has something to rank.
SERVE_ARGS = ["--policy", "random"]
# Rollouts played sharded and by one server: 5 groups (shares of 5, 3 + 2, 2 + 2 + 1), a filter
# that drops some (top_k keeps int(0.6 x 5) = 3), each delivery, a val batch and a step schedule.
SHARDED = {
    "train-filtered-batch": dict(tags={"CoordSokoban": 2, "FrozenLake": 3}, group_size=4, seed=7, max_turn=3, filter={"strategy": "top_k", "value": 0.6}),
    "train-filtered-stream": dict(tags={"CoordSokoban": 2, "FrozenLake": 3}, group_size=4, seed=7, max_turn=3, filter={"strategy": "top_k", "value": 0.6}, delivery="stream"),
    "train-step": dict(tag="FrozenLake", groups=5, group_size=3, step=2),
    "val": dict(tag="CoordSokoban", groups=5, group_size=2, mode="val", max_turn=2),
}
# The same against the mock engine (a remote engine: chat requests, token counts, sampling seeds).
MOCK_SHARDED = {
    "mock-train-filtered": dict(tags={"CoordSokoban": 2, "FrozenLake": 2}, group_size=3, seed=5, max_turn=3, filter={"strategy": "top_k", "value": 0.5}),
    "mock-val-stream": dict(tag="FrozenLake", groups=3, group_size=2, mode="val", max_turn=2, delivery="stream"),
}
# An endless stream (windows of 5 groups, 3 kept of each), compared over its first windows.
STREAM = dict(tags={"CoordSokoban": 2, "FrozenLake": 3}, group_size=3, seed=21, max_turn=3, filter={"strategy": "top_k", "value": 0.6})
STREAM_WINDOWS = 2
def played(url: str) -> dict:
    """What a batch holds, as comparable JSON."""
    with Client(url) as client:
        batch: Batch = client.rollout(**REQUEST)
    return clean({
        "kept": batch.kept,
        "dropped": batch.dropped,
        "metrics": batch.metrics,
        "episodes": batch.all_episodes,
        "scores": batch.scores.tolist(),
        "seeds": [g.seed for g in batch.groups],
    })


def comparable(batch: Batch) -> dict:
    """Everything a trainer reads of a batch but PER_PROCESS."""
    groups = [comparable_group(g) for g in batch.groups]
    verdict = {k: v for k, v in batch.verdict.items() if k not in PER_PROCESS}
    return clean({
        "groups": groups, "verdict": verdict, "kept": batch.kept, "dropped": batch.dropped,
        "failed_groups": batch.failed_groups, "metrics": batch.metrics, "episodes": batch.num_episodes,
        "failed": batch.failed, "arrays": {k: v.tolist() for k, v in batch.arrays("kept").items()},
    })


def first_windows(stream) -> dict:
    """The groups and window verdicts of an endless stream's first STREAM_WINDOWS windows, then
    cancels it. A group's kept flag is left out: the window verdicts say it (one server's client
    sets it only on groups it still holds when the verdict comes)."""
    per_window = sum(STREAM["tags"].values())
    groups = []
    for g in stream:
        if g.window < STREAM_WINDOWS:
            groups.append({k: v for k, v in comparable_group(g).items() if k not in ("kept", "failed")})
        # A window's verdict can come before its groups are iterated (they wait in the client).
        if len(groups) == STREAM_WINDOWS * per_window and all(w in stream.windows for w in range(STREAM_WINDOWS)):
            break
    stream.close()
    windows = [{k: v for k, v in stream.windows[w].items() if k not in PER_PROCESS} for w in range(STREAM_WINDOWS)]
    return clean({"groups": sorted(groups, key=lambda g: g["group"]), "windows": windows})


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/healthz", timeout=5):
            return True
    except OSError:
        return False


def start_mock_engine() -> "tuple[subprocess.Popen, str]":
    """`rollgym mock-engine` without latency: with a request seed its answer depends only on the
    seed and the prompt (docs/mock-engine.md), so every shard gets the answers one server gets."""
    engine = subprocess.Popen(
        COMMAND + ["mock-engine", "--port", "0", "--latency-model", "none", "--model", "mock"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )
    assert engine.stdout is not None
    for line in engine.stdout:
        match = re.search(r"listening on (http://\S+)", line)
        if match:
            # Keep reading its output so it never blocks on a full pipe.
            threading.Thread(target=engine.stdout.read, daemon=True).start()
            return engine, match.group(1)
    raise AssertionError(f"the mock engine printed no URL (exit {engine.wait()})")


def one_server_of(options: dict, requests: dict) -> dict:
    shard = RollgymShard(COMMAND, **options)
    shard.start()
    try:
        with Client(shard.url()) as client:
            alone = {name: comparable(client.rollout(**request)) for name, request in requests.items()}
            if options.get("args") == SERVE_ARGS:
                alone["endless-stream"] = first_windows(client.stream(**STREAM, endless=True))
            return alone
    finally:
        check(shard.stop() == 0, f"the reference shard did not exit 0:\n{shard.output()}")


def sharded_equals(count: int, options: dict, requests: dict, alone: dict, per_shard=None) -> None:
    """`count` shards of a ShardGroup play every request sharded into one server's batch."""
    group = ShardGroup(count, num_cpus=0.25, command=COMMAND, **options)
    try:
        urls = group.urls
        check(len(set(urls)) == count, f"{count} shards: expected distinct URLs, got {urls}")
        health = group.health()
        check(all(h.get("status") == "ok" for h in health), f"{count} shards: /healthz {health}")
        if per_shard is not None:
            for url in urls:
                per_shard(url)
        with ShardedClient(urls) as sharded:
            for name, request in requests.items():
                merged = comparable(sharded.rollout(**request))
                check(merged == alone[name], f"{count} shards, {name}: the merged batch differs from one server's:\n{diff(merged, alone[name])}")
            if "endless-stream" in alone:
                merged = first_windows(sharded.stream(**STREAM))
                check(merged == alone["endless-stream"], f"{count} shards: the endless stream differs from one server's:\n{diff(merged, alone['endless-stream'])}")
    finally:
        codes = group.stop()
    check(codes == [0] * count, f"{count} shards: exit codes {codes}, expected 0 each")
    for url in urls:
        check(not answers(url), f"{count} shards: {url} still answers /healthz after stop()")


def killed_actor_stops_its_server() -> None:
    """An actor Ray kills gets no chance to call stop(): its server goes anyway (Ray ends a
    dead worker's child processes, even one in a session of its own)."""
    actor = ShardActor.options(num_cpus=0.25).remote(COMMAND, args=SERVE_ARGS)
    url = ray.get(actor.start.remote())
    check(answers(url), f"the shard at {url} does not answer")
    ray.kill(actor)
    deadline = time.monotonic() + 60
    while answers(url) and time.monotonic() < deadline:
        time.sleep(0.2)
    check(not answers(url), f"a shard actor killed by Ray left its server at {url} running")


def shard_failure() -> None:
    """3 shards, the first (the one that judges) killed mid-stream."""
    runtime_env = {"env_vars": {"PYTHONPATH": PYTHON_DIR}}
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, runtime_env=runtime_env)
    try:
        group = ShardGroup(3, num_cpus=0.25, command=COMMAND, args=SERVE_ARGS)
        try:
            victim = 0
            pid = ray.get(group.actors[victim].pid.remote())
            summary = killed_shard_stream(group.urls, victim, lambda: os.killpg(pid, signal.SIGKILL))
        finally:
            codes = group.stop()
    finally:
        ray.shutdown()
    check(codes[victim] == -signal.SIGKILL and codes[1:] == [0, 0], f"exit codes {codes}: expected the killed shard's -9, then 0 each")
    print(json.dumps({"ok": True, "shards": 3, **summary}))


def main() -> None:
    if sys.argv[1:] == ["shard-failure"]:
        shard_failure()
        return
    reference_shard = RollgymShard(COMMAND, args=SERVE_ARGS)
    reference_shard.start()
    try:
        reference = played(reference_shard.url())
    finally:
        check(reference_shard.stop() == 0, f"the reference shard did not exit 0:\n{reference_shard.output()}")
    check(len(reference["episodes"]) == 16, f"expected 16 episodes, got {len(reference['episodes'])}")

    def same_as_reference(url: str) -> None:
        check(played(url) == reference, f"{url} played another batch than the reference")

    engine, engine_url = start_mock_engine()
    try:
        builtin = {"args": SERVE_ARGS}
        mock = {"llm": engine_url, "model": "mock"}
        alone = one_server_of(builtin, SHARDED)
        alone_mock = one_server_of(mock, MOCK_SHARDED)
        # The actors import rollgym_client from this checkout (an installed client needs nothing).
        runtime_env = {"env_vars": {"PYTHONPATH": PYTHON_DIR}}
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, runtime_env=runtime_env)
        checked = []
        try:
            for count in SHARD_COUNTS:
                sharded_equals(count, builtin, SHARDED, alone, same_as_reference)
                sharded_equals(count, mock, MOCK_SHARDED, alone_mock)
                checked.append({"shards": count, "urls": count})
            killed_actor_stops_its_server()
        finally:
            ray.shutdown()
    finally:
        os.killpg(engine.pid, signal.SIGTERM)
        engine.wait(30)
    stream_windows = alone.pop("endless-stream")["windows"]
    check(all(w["dropped"] for w in stream_windows), f"a stream window dropped nothing, so its ranking was not compared: {stream_windows}")
    dropped = {name: len(batch["dropped"]) for name, batch in {**alone, **alone_mock}.items()}
    for name in ("train-filtered-batch", "mock-train-filtered"):
        check(dropped[name] > 0, f"the filter dropped nothing in {name}, so its ranking was not compared: {dropped}")
    print(json.dumps({
        "ok": True, "checked": checked, "episodes": len(reference["episodes"]),
        "sharded": sorted(SHARDED), "mock_sharded": sorted(MOCK_SHARDED), "dropped": dropped,
        "stream_windows": len(stream_windows),
    }))


if __name__ == "__main__":
    main()
