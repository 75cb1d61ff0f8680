"""The Python client against a real `rollgym serve` (started by python-client.test.ts).

Environment:
    ROLLGYM_URL        the server's URL (http://… or ws://…), built-in oracle policy
    ROLLGYM_TOKEN      its bearer token (optional)
    ROLLGYM_NOISY_URL  a second server whose oracle has noise and malformed answers (optional)
    ROLLGYM_OUT        where to write the JSON summary the vitest wrapper compares with
                       `rollgym rollout` (default: stdout)

Checks what only the client can see (auth errors, stream = batch, resume after a dropped
connection, env hosting replaying a rollout's responses) and exits non-zero with a message
when one fails; writes the batches' arrays and metrics as JSON for the comparison with the CLI.
"""

from __future__ import annotations

import json
import math
import os
import sys
import threading

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "python"))

from rollgym_client import AuthError, Batch, Client, ProtocolError, RollgymError  # noqa: E402
from json_checks import check, clean  # noqa: E402

URL = os.environ["ROLLGYM_URL"]
TOKEN = os.environ.get("ROLLGYM_TOKEN") or None
NOISY_URL = os.environ.get("ROLLGYM_NOISY_URL") or None
OUT = os.environ.get("ROLLGYM_OUT")


def summary(batch: Batch) -> dict:
    arrays = batch.arrays("kept")
    return clean({
        "kept": batch.kept,
        "dropped": batch.dropped,
        "failed_groups": batch.failed_groups,
        "metrics": batch.metrics,
        "episodes": batch.num_episodes,
        "failed": batch.failed,
        "arrays": {name: array.tolist() for name, array in arrays.items()},
        "dtypes": {name: str(array.dtype) for name, array in arrays.items()},
        "episode_env_ids": [e["env_id"] for e in batch.episodes],
        "group_scores": [g.score for g in batch.kept_groups] if batch.delivery == "batch" else None,
    })


def same_arrays(a: Batch, b: Batch, which_a: str = "kept", which_b: str = "kept") -> bool:
    x, y = a.arrays(which_a), b.arrays(which_b)
    return all(np.array_equal(x[k], y[k]) for k in x)


def env_replay(client: Client, batch: Batch, tag: str, groups: int, group_size: int, mode: str, **request) -> dict:
    """Host the same episodes and step them with the responses the rollout's policy gave:
    the records and metrics must come out as the rollout's."""
    env = client.open_envs(tag, groups=groups, group_size=group_size, mode=mode, **request)
    check(env.env_ids == list(range(groups * group_size)), f"env ids {env.env_ids}")
    by_id = {e["env_id"]: e for e in batch.all_episodes}
    check([e["seed"] for e in env.episodes] == [by_id[i]["seed"] for i in env.env_ids], "env seeds differ from the rollout's")
    first_user = env.episodes[0]["messages"][-1]["content"]
    check(batch.all_episodes[0]["turns"][0]["state"] in first_user, "first prompt does not show the rollout's first state")
    turn = 0
    while env.active:
        responses = {}
        for env_id in env.active:
            raw = by_id[env_id]["turns"][turn]["raw_response"]
            prefill = "<think>" if request.get("think", True) else "<answer>"
            responses[env_id] = raw[len(prefill):] if raw.startswith(prefill) else raw
        results = env.step(responses)
        for r in results:
            want = by_id[r.env_id]["turns"][turn]
            check(r.actions == want["actions"], f"env {r.env_id} turn {turn}: actions {r.actions} != {want['actions']}")
            check(r.reward == want["reward"], f"env {r.env_id} turn {turn}: reward {r.reward} != {want['reward']}")
            # The chat the client rebuilt from the server's deltas shows the rollout's next state,
            # after every earlier turn's response.
            turns = by_id[r.env_id]["turns"]
            if not r.done and turn + 1 < len(turns):
                chat = env.messages[r.env_id]
                check(chat[0]["role"] == "system" and turns[turn + 1]["state"] in chat[-1]["content"], f"env {r.env_id} turn {turn}: rebuilt chat lacks the next state")
                answers = [m["content"] for m in chat if m["role"] == "assistant"]
                check(len(answers) == turn + 1, f"env {r.env_id} turn {turn}: rebuilt chat has {len(answers)} answers")
        turn += 1
    episodes, metrics = env.close()
    for e in episodes:
        want = by_id[e["env_id"]]
        for key in ("score", "reward", "penalty", "success", "num_actions"):
            check(e[key] == want[key], f"env {e['env_id']}: {key} {e[key]} != rollout's {want[key]}")
    for key, value in metrics.items():
        if key in batch.metrics:
            a, b = value, batch.metrics[key]
            check(a == b or (isinstance(a, float) and math.isnan(a) and math.isnan(b)), f"metric {key}: env hosting {a} != rollout {b}")
    return clean(metrics)


def resume_check(client: Client, request: dict, reference: Batch) -> dict:
    """Abort the TCP connection under a stream at 50 random points: the client resumes the
    session each time and the user still sees every group exactly once, with the same data."""
    aborted = threading.Event()

    def abort() -> None:
        ws = client.aio._ws
        if ws is not None:
            ws.transport.abort()
        aborted.set()

    # Kill the connection at 50 random points of the rollout (after random groups); a point that
    # comes while the previous kill is still being recovered is taken at the next group.
    import random
    points = set(random.Random(7).sample(range(len(reference.groups) - 20), 50))
    stream = client.stream(**request)
    seen = []
    pending = kills = 0
    for group in stream:
        seen.append(group.group)
        if len(seen) - 1 in points:
            pending += 1
        if pending and client.resumes == kills:
            aborted.clear()
            client.loop.call_soon_threadsafe(abort)
            aborted.wait(5)
            pending -= 1
            kills += 1
    check(kills == 50, f"expected 50 kills, made {kills}")
    check(client.resumes == 50, f"expected 50 resumes, got {client.resumes}")
    check(sorted(seen) == list(range(len(reference.groups))), f"groups seen after resume: {seen}")
    check(len(seen) == len(set(seen)), f"a group was handed out twice: {seen}")
    check(same_arrays(stream.batch, reference, "all", "all"), "arrays differ after resume")
    check(stream.batch.metrics == reference.metrics or json.dumps(clean(stream.batch.metrics)) == json.dumps(clean(reference.metrics)), "metrics differ after resume")
    return {"groups_seen": seen, "resumes": client.resumes}


def openrlhf_check(batch: Batch) -> dict:
    """examples/openrlhf_agent.py replaying the oracle's answers for validation episode 0:
    the agent's final reward is the rollout's score for that episode."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "python", "examples"))
    import asyncio

    import openrlhf_agent

    openrlhf_agent.ROLLGYM_URL = URL
    openrlhf_agent.ROLLGYM_TOKEN = TOKEN
    record = batch.episodes[0]

    async def play() -> float:
        agent = openrlhf_agent.AgentInstance()
        state = await agent.reset({"label": json.dumps({"tag": record["tag"], "seed": record["seed"], "mode": "val"})})
        check(record["turns"][0]["state"] in state["observation"], "the agent's first prompt lacks the first state")
        out: dict = {}
        for turn in record["turns"]:
            action = turn["raw_response"][len("<think>"):] + openrlhf_agent.END_OF_TURN
            out = await agent.step({"action_text": action})
        check(out.get("done") is True, "the agent's episode did not end with the rollout's")
        for client in openrlhf_agent._clients.values():
            await client.close()
        return float(out["rewards"])

    reward = asyncio.run(play())
    check(abs(reward - record["score"]) < 1e-6, f"agent reward {reward} != rollout score {record['score']}")
    return {"reward": reward}


def main() -> int:
    out: dict = {}
    if TOKEN is not None:
        for bad in (None, TOKEN + "-wrong"):
            try:
                Client(URL, token=bad).close()
            except AuthError as error:
                check("401" in str(error), f"AuthError without the status: {error}")
            else:
                raise AssertionError(f"connecting with token {bad!r} should fail with AuthError")
        out["auth"] = "refused without the right token"
    try:
        Client(URL, token=TOKEN, protocol_version=99).close()
    except ProtocolError as error:
        check(error.code == "protocol_version" and "99" in str(error), f"bad version error: {error}")
    else:
        raise AssertionError("protocol 99 should be refused")

    with Client(URL, token=TOKEN, credit=4) as client:
        check("CoordSokoban" in client.envs, f"envs: {client.envs}")
        check(client.server.startswith("rollgym/"), f"server: {client.server}")

        val = client.rollout(tag="CoordSokoban", groups=16, group_size=1, mode="val")
        out["val"] = summary(val)

        train = client.rollout(tag="CoordSokoban", groups=4, group_size=4, mode="train", step=3)
        out["train"] = summary(train)

        # stream delivery of the same request: the same groups, arrays and metrics
        stream = client.stream(tag="CoordSokoban", groups=4, group_size=4, mode="train", step=3)
        ids = [g.group for g in stream]
        check(sorted(ids) == [0, 1, 2, 3], f"stream groups {ids}")
        check(stream.batch.kept == train.kept, "stream verdict differs from batch verdict")
        check(same_arrays(stream.batch, train), "stream arrays differ from batch arrays")
        check(stream.batch.metrics == train.metrics, "stream metrics differ from batch metrics")
        out["stream_groups"] = ids

        # several tags, explicit seed
        multi = client.rollout(tags={"SimpleSokoban": 2, "FrozenLake": 3}, group_size=2, mode="val", seed=500)
        check([g.tag for g in multi.groups] == ["SimpleSokoban"] * 2 + ["FrozenLake"] * 3, "tag order")
        check([g.seed for g in multi.groups] == [500, 501, 502, 503, 504], f"seeds {[g.seed for g in multi.groups]}")
        check(multi.group_ids.tolist() == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4], "group ids")

        try:
            client.rollout(tag="NoSuchEnv", groups=1, group_size=1, rollout_id="bad-tag")
        except RollgymError as error:
            check((error.code, error.rollout, error.field) == ("unknown_tag", "bad-tag", "tags"), f"unknown tag error: {error!r}")
        else:
            raise AssertionError("an unknown tag should be refused")

        out["env_metrics"] = env_replay(client, val, "CoordSokoban", 16, 1, "val")
        out["openrlhf"] = openrlhf_check(val)

    with Client(URL, token=TOKEN, credit=2, reconnect_backoff=0.05) as client:
        request = dict(tag="SimpleSokoban", groups=200, group_size=2, mode="train", step=1)
        reference = client.rollout(delivery="stream", **request)
        out["resume"] = resume_check(client, request, reference)

    if NOISY_URL is not None:
        with Client(NOISY_URL) as client:
            noisy = client.rollout(
                tag="SimpleSokoban", groups=8, group_size=4, mode="train", step=1,
                filter={"strategy": "top_p", "value": 0.5},
            )
            check(len(noisy.dropped) > 0, f"the filter dropped nothing: kept {noisy.kept}")
            out["noisy_train"] = summary(noisy)
            streamed = client.rollout(
                tag="SimpleSokoban", groups=8, group_size=4, mode="train", step=1,
                filter={"strategy": "top_p", "value": 0.5}, delivery="stream",
            )
            check(streamed.kept == noisy.kept and same_arrays(streamed, noisy), "stream and batch verdicts differ")
            check(len(streamed.groups) == 8, "stream delivery should hand out every group")
            out["noisy_env_metrics"] = env_replay(client, streamed, "SimpleSokoban", 8, 4, "train", step=1)

    text = json.dumps(out, allow_nan=False)
    if OUT:
        with open(OUT, "w") as f:
            f.write(text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except AssertionError as error:
        print(f"real_server_check: FAILED: {error}", file=sys.stderr)
        sys.exit(1)
