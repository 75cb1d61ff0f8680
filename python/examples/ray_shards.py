"""rollgym shards on Ray and one rollout over them (docs/ray.md shows this whole file).

    python3 python/examples/ray_shards.py [SHARDS]

Needs Ray (pip install ray) and, on every node, Node 24 with rollgym: `rollgym` on PATH, or
ROLLGYM_COMMAND='["node", "/opt/rollgym/bin/rollgym.js"]' for a checkout.
"""

import json
import os
import sys

import ray

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # a checkout's client

import rollgym_client  # noqa: E402
from rollgym_client.ray import ShardGroup  # noqa: E402
from rollgym_client.sharded import ShardedClient  # noqa: E402

shards = int(sys.argv[1]) if len(sys.argv) > 1 else 3
command = json.loads(os.environ["ROLLGYM_COMMAND"]) if "ROLLGYM_COMMAND" in os.environ else None

# A local Ray here; on a cluster, ray.init(address="auto"). py_modules ships this client to the
# workers (not needed where rollgym_client is installed on every node).
ray.init(num_cpus=2, include_dashboard=False, runtime_env={"py_modules": [rollgym_client]})
try:
    # One `rollgym serve` per shard, spread over the nodes, all with the same settings.
    with ShardGroup(shards, num_cpus=0.5, command=command, args=["--policy", "random"]) as group:
        print("shards:", [h["status"] for h in group.health()])
        # trainer=True: this client also brackets weight updates on every shard.
        with ShardedClient(group.urls, trainer=True) as client:
            # The groups are split over the shards; the filter and metrics are the whole batch's.
            batch = client.rollout(
                tag="CoordSokoban", groups=6, group_size=4, seed=100, filter={"strategy": "top_k", "value": 0.5}
            )
            print(f"kept groups {batch.kept} of 6, {len(batch)} episodes, scores {[round(float(s), 2) for s in batch.scores]}")
            print(f"success {batch.metrics['train/CoordSokoban/success']:.3f}")
            # A weight update: the other shards close their admission first, the first shard
            # pauses each engine replica once (the built-in policy has none), and ends last.
            with client.update("step-1", 1) as begun:
                pass  # the trainer moves its weights here
            print("version", client.version["label"], [b.get("engines", "pause") for b in begun["shards"]])
finally:
    ray.shutdown()
