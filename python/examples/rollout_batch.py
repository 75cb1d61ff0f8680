"""A training step's data from rollgym: one batch → GRPO advantages with numpy.

    npx rollgym serve --policy oracle          # or --llm URL --model M
    python3 python/examples/rollout_batch.py ws://127.0.0.1:8787
"""

from __future__ import annotations

import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from rollgym_client import Client, grpo_advantages  # noqa: E402

# grpo_advantages(scores, group_ids): (score − group mean) / (group std + 1e-6) per episode,
# vectorised, as verl computes GRPO's outcome advantage (sample std; a group of one keeps its score).


def main(url: str) -> None:
    with Client(url, token=os.environ.get("ROLLGYM_TOKEN")) as client:
        for step in range(2):
            batch = client.rollout(tag="CoordSokoban", groups=8, group_size=16, step=step)
            adv = grpo_advantages(batch.scores, batch.group_ids)
            print(
                f"step {step}: kept {len(batch.kept)}/{len(batch.kept) + len(batch.dropped)} groups, "
                f"{len(batch)} episodes, success {batch.metrics['train/CoordSokoban/success']:.3f}, "
                f"mean |advantage| {np.abs(adv).mean():.3f}"
            )
            # batch.episodes[i] is the record behind row i of every array:
            first = batch.episodes[0]
            print(f"  env {first['env_id']} (seed {first['seed']}): {len(first['turns'])} turns, score {batch.scores[0]:.2f}")
        val = client.rollout(tag="CoordSokoban", groups=32, group_size=1, mode="val")
        print(f"val success {val.metrics['val-env/CoordSokoban/success']:.3f}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.environ.get("ROLLGYM_URL", "ws://127.0.0.1:8787"))
