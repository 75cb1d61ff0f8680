"""rollgym environments behind OpenRLHF's multi-turn agent interface.

OpenRLHF runs one ``AgentInstance`` per sample: ``reset(states)`` returns the first prompt,
then ``step(states)`` gets the model's ``action_text`` and returns the reward, the text to
append before the next generation (``environment_feedback``) and ``done``. Here both are
backed by rollgym's env hosting (``env_open``/``env_step``/``env_close``): rollgym plays
RAGEN's env manager and context manager — prompts, response parsing, format penalty, rewards
— while OpenRLHF owns inference, so tokens are never re-tokenized.

Use with OpenRLHF (token-in-token-out agent mode):

    export ROLLGYM_URL=ws://rollgym-host:8787 ROLLGYM_TOKEN=...   # where `rollgym serve` runs
    python -m openrlhf.cli.train_ppo_ray ... --agent_func_path python/examples/openrlhf_agent.py

Each prompt's ``label`` picks the episode: JSON such as ``{"tag": "CoordSokoban", "seed": 10007}``
(``mode``, ``think``, ``max_turn`` too); a missing label plays ``DEFAULT_TAG`` with a seed
derived from the prompt. The episode's RAGEN score (Σ turn rewards + format penalties) is the
reward of the last step; earlier steps get 0.

Without OpenRLHF installed the classes still work (the base classes are plain ``object``);
``python openrlhf_agent.py ws://127.0.0.1:8787`` plays a few episodes with a scripted "model".
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import zlib
from typing import Any, Dict, List, Optional

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from rollgym_client import AsyncClient, EnvSession  # noqa: E402

try:  # OpenRLHF's base classes when it is installed
    from openrlhf.utils.agent import AgentExecutorBase, AgentInstanceBase
except ImportError:  # pragma: no cover - exercised without OpenRLHF
    AgentInstanceBase = object
    AgentExecutorBase = None

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None

ROLLGYM_URL = os.environ.get("ROLLGYM_URL", "ws://127.0.0.1:8787")
ROLLGYM_TOKEN = os.environ.get("ROLLGYM_TOKEN") or None
DEFAULT_TAG = os.environ.get("ROLLGYM_TAG", "CoordSokoban")

#: The chat template's end-of-turn marker (ChatML, as Qwen uses). Adapt render_messages and
#: END_OF_TURN to your model's template, or build them from its tokenizer's chat template.
END_OF_TURN = "<|im_end|>"


def render_messages(messages: List[Dict[str, str]]) -> str:
    """ChatML text of chat messages (no generation prompt)."""
    return "".join(f"<|im_start|>{m['role']}\n{m['content']}{END_OF_TURN}\n" for m in messages)


def generation_prompt(prefill: str) -> str:
    """What precedes the model's text: the assistant header and RAGEN's prefill (``<think>``)."""
    return f"<|im_start|>assistant\n{prefill}"


# One connection per process and event loop, shared by every AgentInstance.
_clients: Dict[int, AsyncClient] = {}


async def shared_client() -> AsyncClient:
    loop = asyncio.get_running_loop()
    client = _clients.get(id(loop))
    if client is None:
        client = AsyncClient(ROLLGYM_URL, token=ROLLGYM_TOKEN, client_name="openrlhf-agent")
        _clients[id(loop)] = client
    if not client.connected:
        await client.connect()
    return client


def _label(states: Dict[str, Any]) -> Dict[str, Any]:
    label = states.get("label")
    if isinstance(label, str) and label.strip().startswith("{"):
        label = json.loads(label)
    if isinstance(label, dict):
        return label
    prompt = str(states.get("observation", ""))
    return {"tag": DEFAULT_TAG, "seed": zlib.crc32(prompt.encode()) % 1_000_000}


def _scalar(value: float):
    return torch.tensor(value, dtype=torch.float32) if torch is not None else value


class AgentInstance(AgentInstanceBase):
    """One episode, hosted by rollgym, driven by OpenRLHF's generations."""

    def __init__(self, *args, **kwargs):
        self.env: Optional[EnvSession] = None
        self.prefill = "<think>"
        self.turns = 0

    async def reset(self, states: Dict[str, Any], **kwargs) -> Dict[str, Any]:
        label = _label(states)
        think = bool(label.get("think", True))
        self.prefill = "<think>" if think else "<answer>"
        client = await shared_client()
        self.env = await client.open_envs(
            label.get("tag", DEFAULT_TAG),
            groups=1,
            group_size=1,
            seed=label.get("seed"),
            mode=label.get("mode", "train"),
            think=think,
            max_turn=label.get("max_turn"),
        )
        self.turns = 0
        messages = self.env.episodes[0]["messages"]
        return {"observation": render_messages(messages) + generation_prompt(self.prefill)}

    async def step(self, states: Dict[str, Any], **kwargs) -> Dict[str, Any]:
        assert self.env is not None, "reset() first"
        action_text: str = states.get("action_text", "")
        generated = action_text.split(END_OF_TURN)[0]  # what the model wrote after the prefill
        (result,) = await self.env.step({0: generated})
        self.turns += 1
        extra = {"turn_reward": _scalar(result.reward), "format_penalty": _scalar(float(result.format_penalty))}
        if result.done:
            episodes, metrics = await self.env.close()
            episode = episodes[0]
            reward = float(episode["score"])
            extra["success"] = _scalar(float(episode["success"]))
            feedback = ""
        else:
            reward = 0.0
            messages = result.messages or []
            # RAGEN's default context mode ("full") appends to the chat; this relies on it.
            last_assistant = max((i for i, m in enumerate(messages) if m["role"] == "assistant"), default=-1)
            # The model's own tokens stay as generated; only the new turn is appended.
            close = "" if action_text.rstrip().endswith(END_OF_TURN) else END_OF_TURN
            feedback = close + "\n" + render_messages(messages[last_assistant + 1:]) + generation_prompt(self.prefill)
        return {
            "rewards": _scalar(reward),
            "scores": _scalar(reward),
            "environment_feedback": feedback,
            "done": result.done,
            "sampling_params": states.get("sampling_params"),
            "extra_logs": extra,
        }


if AgentExecutorBase is not None:  # pragma: no cover - needs OpenRLHF

    class AgentExecutor(AgentExecutorBase):
        def __init__(self, max_steps, max_length, llm_engine, hf_tokenizer, result_queue):
            super().__init__(AgentInstance, max_steps, max_length, llm_engine, hf_tokenizer, result_queue)


async def demo(episodes: int = 3, tag: str = DEFAULT_TAG) -> List[float]:
    """Play a few episodes the way OpenRLHF would, with a scripted "model"."""
    scripted = ["Thinking.</think><answer>Up || Left</answer>", "Hm.</think><answer>Down</answer>", "garbage"]
    rewards = []
    for seed in range(episodes):
        agent = AgentInstance()
        state = await agent.reset({"label": json.dumps({"tag": tag, "seed": seed})})
        prompt = state["observation"]
        done, turn, out = False, 0, {}
        while not done:
            action = scripted[turn % len(scripted)] + END_OF_TURN
            out = await agent.step({"observation": prompt, "action_text": action})
            prompt += action + out["environment_feedback"]
            done, turn = out["done"], turn + 1
        rewards.append(float(out["rewards"]))
        print(f"seed {seed}: {turn} turns, reward {float(out['rewards']):.2f}")
    for client in _clients.values():
        await client.close()
    _clients.clear()
    return rewards


if __name__ == "__main__":
    if len(sys.argv) > 1:
        ROLLGYM_URL = sys.argv[1]
    asyncio.run(demo())
