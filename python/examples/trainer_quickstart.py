"""A trainer's loop against an endless stream, as python/README.md shows it (this whole file).

    npx rollgym mock-engine --port 8000 &                      # or your vLLM server
    npx rollgym serve --llm http://127.0.0.1:8000/v1 --model mock
    PYTHONPATH=python python3 python/examples/trainer_quickstart.py [URL] [UPDATES]
"""

import sys

from rollgym_client import Client, pack_batch

URL = sys.argv[1] if len(sys.argv) > 1 else "ws://127.0.0.1:8787"
UPDATES = int(sys.argv[2]) if len(sys.argv) > 2 else 3


def train_on(arrays):  # your optimizer step: input_ids, loss_mask, old_logprobs, advantages, ages …
    sampled = arrays["loss_mask"] == 1
    print(f"  {sampled.sum()} sampled tokens, ages {sorted(set(arrays['ages'][sampled].tolist()))}")


def push_weights():  # NCCL, disk, vLLM's weight-transfer routes
    pass


client = Client(URL, trainer=True)  # trainer_token=… when the server reserves the role
start = version = client.version["ordinal"]  # the version in force: 0 on a fresh server
stream = client.stream(tag="SimpleSokoban", groups=4, group_size=2, endless=True, tokens=True,
                       in_flight=8, max_staleness=1)  # groups_per_step: the 4 groups
buffer = []
for group in stream:  # endless: each group once, group k on seed + k
    buffer.append(group)
    if len(buffer) < 4:
        continue
    train_on(pack_batch(buffer, current_version=version))  # ages = version − the token's version
    buffer = []
    with client.update(f"step-{version + 1}", version + 1) as begun:  # refused here if not ahead
        push_weights()
    version = client.version["ordinal"]
    print(f"update {begun['id']}: the engines run version {version}")
    if version == start + UPDATES:
        break
stream.close()  # cancels the endless rollout
client.close()
