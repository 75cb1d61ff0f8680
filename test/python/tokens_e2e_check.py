"""Token mode end to end: a real `rollgym serve --llm <mock engine>`, the Python client with
tokens=True, and pack_batch, compared with `rollgym rollout --tokens --out FILE` (started by
python-tokens-e2e.test.ts).

Environment: ROLLGYM_URL (the server), ROLLGYM_EPISODES (the CLI's episode file, same seed).
Exits non-zero with a message when a check fails; prints one JSON summary line.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "python"))

from rollgym_client import Client, pack_batch  # noqa: E402


def check(condition: bool, message: str) -> None:
    if not condition:
        raise AssertionError(message)


with open(os.environ["ROLLGYM_EPISODES"], encoding="utf-8") as handle:
    lines = [json.loads(line) for line in handle if line.strip()]
cli = {e["env_id"]: e for e in lines if e.get("type") == "episode"}

with Client(os.environ["ROLLGYM_URL"]) as client:
    batch = client.rollout(tag="SimpleSokoban", groups=2, group_size=4, seed=10000, tokens=True)

logs = batch.tokens
check(logs is not None and len(logs) == len(batch.episodes) == 8, "every kept episode has a token log")
for episode, log in zip(batch.episodes, logs):
    want = cli[episode["env_id"]]["tokens"]
    check(log.ids.tolist() == want["ids"], f"env {episode['env_id']}: ids differ from the CLI's episode file")
    check(log.loss_mask.tolist() == want["loss_mask"], f"env {episode['env_id']}: loss mask differs")
    check(np.allclose(log.logprobs, np.array(want["logprobs"], dtype=np.float32)), "logprobs differ")
    check(log.prompt_length == want["prompt_length"], "prompt length differs")
    check(not log.ids.flags.writeable, "token ids are read-only views of the frame, not copies")

packed = pack_batch(batch)
mask = packed["loss_mask"] == 1
sampled = np.concatenate([log.ids[log.loss_mask == 1] for log in logs])
check(np.array_equal(packed["input_ids"][mask], sampled), "input_ids[loss_mask == 1] are the sampled ids")
old = np.concatenate([log.logprobs[log.loss_mask == 1] for log in logs])
check(np.allclose(packed["old_logprobs"][mask], old), "old logprobs sit at the sampled positions")
check(packed["input_ids"].shape[0] == 8, "one row per episode")
print(json.dumps({"episodes": len(logs), "tokens": int(sum(len(log) for log in logs)), "sampled": int(sampled.size)}))
