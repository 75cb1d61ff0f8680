"""Plays episodes of a rollgym tag over OpenEnv's /ws, all at once (one session each), and prints
one JSON object: per episode its reset observation, every step as `rollgym envs play` prints it,
and the session's final state.

usage: play_over_ws.py BASE_URL EPISODES_JSON
EPISODES_JSON: [{"seed": 3, "actions": ["Up", "Left"]}, ...]
"""

import asyncio
import json
import sys

from openenv_client import OpenEnvClient


async def play(base_url: str, seed: int, actions: list) -> dict:
    async with OpenEnvClient(base_url) as env:
        first = await env.reset(seed=seed, episode_id=f"seed-{seed}")
        steps = []
        for name in actions:
            result = await env.step({"action": name})
            info = result.observation["info"]
            steps.append(
                {
                    "action": name,
                    "reward": result.reward,
                    "done": result.done,
                    "success": info["success"],
                    "effective": info["action_is_effective"],
                    "observation": result.observation["text"],
                }
            )
            if result.done:
                break
        return {"seed": seed, "reset": first.observation["text"], "steps": steps, "state": await env.state()}


async def main() -> None:
    base_url, episodes = sys.argv[1], json.loads(sys.argv[2])
    played = await asyncio.gather(*(play(base_url, e["seed"], e["actions"]) for e in episodes))
    print(json.dumps(played))


asyncio.run(main())
