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

With the argument ``update``: a weight update through ShardedClient over 3 shards sharing 2 mock
engines instead (update_across_shards).
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

from rollgym_client import Batch, Client, RollgymError  # noqa: E402
from rollgym_client.ray import RollgymShard, ShardActor, ShardGroup  # noqa: E402
from rollgym_client.sharded import ShardedClient  # noqa: E402
from json_checks import PER_PROCESS, check, clean, comparable_group, diff  # noqa: E402
from rollgym_processes import COMMAND, mock_engine  # noqa: E402
from shard_failure import killed_shard_stream  # noqa: E402

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


def start_mock_engine(extra: "tuple[str, ...]" = ()) -> "tuple[subprocess.Popen, str]":
    """`rollgym mock-engine` without latency (but `extra` flags): with a request seed its answer
    depends only on the seed and the prompt (docs/mock-engine.md), so every shard gets the
    answers one server gets."""
    return mock_engine("--latency-model", "none", *extra)



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
def engine_get(engine_url: str, path: str):
    """GET `path` at a mock engine's root (its URL ends in /v1): JSON, or the /metrics text."""
    root = re.sub(r"/v1$", "", engine_url)
    with urllib.request.urlopen(root + path, timeout=30) as answer:
        body = answer.read().decode()
    return body if path == "/metrics" else json.loads(body)


def engine_post(engine_url: str, path: str, body: dict) -> None:
    root = re.sub(r"/v1$", "", engine_url)
    request = urllib.request.Request(root + path, json.dumps(body).encode(), {"content-type": "application/json"})
    urllib.request.urlopen(request, timeout=30).read()


def sample(metrics: str, name: str, labels: str = "") -> float:
    """One sample of the Prometheus text: `name{...labels...}`, labels a substring of its braces."""
    for line in metrics.splitlines():
        match = re.match(rf"^{re.escape(name)}\{{([^}}]*)\}} (\S+)$", line)
        if match and labels in match.group(1):
            return float(match.group(2))
    raise AssertionError(f"no sample {name}{{{labels}}} in the engine's /metrics")


def ordinal_of(weights: str) -> int:
    """The mock's loaded-weights names: "default" at start, then the step-N this check loads."""
    return 0 if weights == "default" else int(weights.removeprefix("step-"))


# A rollout over 3 shards that share 2 mock engines (10 ms a token, so turns are in flight when
# the update comes): 6 groups, 2 per shard.
UPDATE_SHARDS = 3
UPDATE_ROLLOUT = dict(tag="CoordSokoban", groups=6, group_size=2, seed=9, max_turn=3, delivery="stream")


def refused_updates_reopen(sharded: ShardedClient) -> None:
    """A follower refuses begin_update (shard 2 is already at the announced ordinal): shard 1,
    which had begun, ends at the version in force and plays again; then the lead refuses, and
    both followers do the same. Nothing is paused (the caller's pause counts stay one per
    replica)."""
    # Shard 2 alone moves on, asking the engines nothing (so the pause counts stay the update's).
    last = sharded.clients[-1]
    last.begin_update("ahead", label="step-2", ordinal=2, engines="held_elsewhere")
    last.end_update("ahead", "step-2", 2)
    try:
        sharded.begin_update("refused", label="step-2", ordinal=2)
    except RollgymError as error:
        check(error.field == "version.ordinal", f"shard 2's refusal names {error.field}: {error}")
    else:
        raise AssertionError("begin_update announcing an ordinal shard 2 has reached was not refused")
    check(sharded.clients[1].version == {"label": "step-1", "ordinal": 1}, f"shard 1's version {sharded.clients[1].version}")
    check(sharded.version == {"label": "step-1", "ordinal": 1}, f"the lead's version {sharded.version}")
    plays_again(sharded.clients[1], "shard 1, after shard 2 refused")

    # The lead refuses (it alone moved to ordinal 3): both followers, which had begun, end at
    # the version each had.
    lead = sharded.clients[0]
    lead.begin_update("lead-ahead", label="step-3", ordinal=3, engines="held_elsewhere")
    lead.end_update("lead-ahead", "step-3", 3)
    try:
        sharded.begin_update("refused-by-lead", label="step-3", ordinal=3)
    except RollgymError as error:
        check(error.field == "version.ordinal", f"the lead's refusal names {error.field}: {error}")
    else:
        raise AssertionError("begin_update announcing an ordinal the lead has reached was not refused")
    versions = [c.version["ordinal"] for c in sharded.clients]
    check(versions == [3, 1, 2], f"versions after the lead refused: {versions}, expected [3, 1, 2]")
    for shard in (1, 2):
        plays_again(sharded.clients[shard], f"shard {shard}, after the lead refused")


def plays_again(client: Client, who: str) -> None:
    """`client`'s shard admits groups: no update holds it."""
    replay = client.rollout(tag="CoordSokoban", groups=1, group_size=1, seed=1, max_turn=1, timeout=60)
    check(replay.num_episodes == 1, f"{who}: a rollout played {replay.num_episodes} episodes")


def update_across_shards() -> dict:
    """ShardedClient.update during a rollout over 3 shards sharing 2 replicas: each replica is
    paused once and resumed once (the mock's own counters), and every turn's version stamp
    holds the ordinals of the weights that made its tokens, as the engine recorded them,
    including turns of follower shards that the update froze half-way. Then an update a
    follower refuses pauses nothing and leaves every shard playing."""
    engines = [start_mock_engine(("--tpot-ms", "10")) for _ in range(2)]
    urls_of_engines = [url for _, url in engines]
    try:
        group = ShardGroup(UPDATE_SHARDS, num_cpus=0.25, command=COMMAND, llm=urls_of_engines, model="mock")
        try:
            with ShardedClient(group.urls, trainer=True) as sharded:
                check(sharded.version == {"label": "initial", "ordinal": 0}, f"version before {sharded.version}")
                done: dict = {}
                player = threading.Thread(target=lambda: done.update(batch=sharded.rollout(**UPDATE_ROLLOUT)))
                player.start()
                # Turns of several shards decoding on both replicas.
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline:
                    running = [engine_get(u, "/mock/stats")["running"] for u in urls_of_engines]
                    if min(running) > 0 and sum(running) >= 6:
                        break
                    time.sleep(0.01)
                with sharded.update("step-1", 1, mode="keep") as begun:
                    paused = [engine_get(u, "/is_paused")["is_paused"] for u in urls_of_engines]
                    check(paused == [True, True], f"replicas paused during the update: {paused}")
                    for u in urls_of_engines:
                        engine_post(u, "/mock/load_weights", {"version": "step-1"})
                lead, *followers = begun["shards"]
                check(lead["paused"] == 2 and "engines" not in lead, f"the lead's update_begun {lead}")
                check(all(f["engines"] == "held_elsewhere" and f["paused"] == 0 for f in followers), f"followers' update_begun {followers}")
                check(sharded.version == {"label": "step-1", "ordinal": 1}, f"version after {sharded.version}")
                player.join(120)
                batch = done.get("batch")
                check(batch is not None and batch.failed == 0, f"the rollout's batch {batch and batch.verdict}")
                records = [r for u in urls_of_engines for r in engine_get(u, "/mock/generations")["generations"]]
                refused_updates_reopen(sharded)
        finally:
            group.stop()
        counts = []
        for u in urls_of_engines:
            metrics = engine_get(u, "/metrics")
            counts.append({
                "pauses": sample(metrics, "mock_engine:pauses_total"),
                "resumes": sample(metrics, "mock_engine:resumes_total"),
                "/pause": sample(metrics, "mock_engine:http_requests_total", 'route="/pause"'),
                "/resume": sample(metrics, "mock_engine:http_requests_total", 'route="/resume"'),
            })
        check(all(c == {"pauses": 1, "resumes": 1, "/pause": 1, "/resume": 1} for c in counts), f"each replica paused and resumed once: {counts}")
    finally:
        for engine, _ in engines:
            os.killpg(engine.pid, signal.SIGTERM)
            engine.wait(30)

    # Each turn is one engine request (a keep pause interrupts none), an episode's requests in
    # the order of their prompts' lengths (each turn's prompt holds the ones before); the session
    # header ends with the episode's env id.
    first_follower_group = UPDATE_ROLLOUT["groups"] // UPDATE_SHARDS  # shard 0 plays groups 0, 1
    turns = spanning = follower_spanning = 0
    for g in batch.groups:
        for e in g.episodes:
            mine = sorted((r for r in records if (r.get("session") or "").endswith(f":{e['env_id']}")), key=lambda r: len(r["prompt_ids"]))
            check(len(mine) == len(e["turns"]), f"env {e['env_id']}: {len(mine)} engine requests for {len(e['turns'])} turns")
            for turn, record in zip(e["turns"], mine):
                stamp = turn["version"]
                made = {ordinal_of(w) for w in record["versions"]}
                check(all(stamp["dispatch"] <= o <= stamp["completion"] for o in made), f"env {e['env_id']}: stamp {stamp}, the engine's {sorted(made)}")
                turns += 1
                if made == {0, 1}:
                    check(stamp == {"dispatch": 0, "completion": 1}, f"env {e['env_id']}: a spanning turn stamped {stamp}")
                    spanning += 1
                    follower_spanning += g.group >= first_follower_group
    check(follower_spanning > 0, f"no follower shard's turn spanned the update ({spanning} of {turns} did), so their stamps were not checked")
    return {"ok": True, "replicas": counts, "turns": turns, "spanning": spanning, "follower_spanning": follower_spanning}


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
    if sys.argv[1:] == ["update"]:
        runtime_env = {"env_vars": {"PYTHONPATH": PYTHON_DIR}}
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, runtime_env=runtime_env)
        try:
            print(json.dumps(update_across_shards()))
        finally:
            ray.shutdown()
    else:
        main()
