"""rollgym shards on a local Ray instance (run by python-ray.test.ts under a Python with Ray).

Environment:
    ROLLGYM_COMMAND  JSON argv that runs rollgym, e.g. ["/path/node", "/repo/bin/rollgym.js"]

For 1, 2 and 3 shards placed by a ShardGroup: every shard answers /healthz with status ok on
its own URL, plays the same request into the same batch as every other shard and as a shard
started outside Ray (a group is a pure function of its request and index, which is what makes
sharding sound), and stops cleanly on SIGTERM (exit code 0, then /healthz down). Prints one
JSON summary line; exits non-zero with a message when a check fails.
"""

from __future__ import annotations

import json
import math
import os
import sys
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON_DIR = os.path.join(os.path.dirname(os.path.dirname(HERE)), "python")
sys.path.insert(0, PYTHON_DIR)

import ray  # noqa: E402

from rollgym_client import Batch, Client  # noqa: E402
from rollgym_client.ray import RollgymShard, ShardGroup  # noqa: E402

COMMAND = json.loads(os.environ["ROLLGYM_COMMAND"])
SHARD_COUNTS = (1, 2, 3)
# The request every shard plays: a train batch of two tags, so seeds, tags and group ids vary.
REQUEST = dict(tags={"CoordSokoban": 2, "FrozenLake": 2}, group_size=4, mode="train", seed=41, max_turn=3)


def check(condition: bool, message: str) -> None:
    if not condition:
        raise AssertionError(message)


def clean(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [clean(v) for v in value]
    return value


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


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/healthz", timeout=5):
            return True
    except OSError:
        return False


def main() -> None:
    reference_shard = RollgymShard(COMMAND)
    reference_shard.start()
    try:
        reference = played(reference_shard.url())
    finally:
        check(reference_shard.stop() == 0, f"the reference shard did not exit 0:\n{reference_shard.output()}")
    check(len(reference["episodes"]) == 16, f"expected 16 episodes, got {len(reference['episodes'])}")

    # The actors import rollgym_client from this checkout (an installed client needs nothing).
    runtime_env = {"env_vars": {"PYTHONPATH": PYTHON_DIR}}
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, runtime_env=runtime_env)
    checked = []
    try:
        for count in SHARD_COUNTS:
            group = ShardGroup(count, num_cpus=0.25, command=COMMAND)
            try:
                urls = group.urls
                check(len(set(urls)) == count, f"{count} shards: expected distinct URLs, got {urls}")
                health = group.health()
                check(all(h.get("status") == "ok" for h in health), f"{count} shards: /healthz {health}")
                for url in urls:
                    check(played(url) == reference, f"{count} shards: {url} played another batch than the reference")
            finally:
                codes = group.stop()
            check(codes == [0] * count, f"{count} shards: exit codes {codes}, expected 0 each")
            for url in urls:
                check(not answers(url), f"{count} shards: {url} still answers /healthz after stop()")
            checked.append({"shards": count, "urls": len(urls)})
    finally:
        ray.shutdown()
    print(json.dumps({"ok": True, "checked": checked, "episodes": len(reference["episodes"])}))


if __name__ == "__main__":
    main()
