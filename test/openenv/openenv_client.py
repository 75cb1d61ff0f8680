"""An OpenEnv-style client, written here for tests: it speaks OpenEnv's /ws protocol the way
OpenEnv's own EnvClient does (docs/openenv.md "The client"), with Debian's python3-websockets.

    async with OpenEnvClient("http://127.0.0.1:8000/openenv/CoordSokoban") as env:
        result = await env.reset(seed=7)
        result = await env.step({"action": "Up"})
"""

import asyncio
import json
import warnings
from dataclasses import dataclass
from typing import Any, Dict, Optional

with warnings.catch_warnings():
    # The legacy client (extra_headers) on websockets 10 to 17, as rollgym_client's.
    warnings.simplefilter("ignore", DeprecationWarning)
    from websockets.legacy.client import connect as ws_connect


def ws_url(base_url: str) -> str:
    """OpenEnv's URL rule: http -> ws, https -> wss, no scheme -> ws, no trailing /, then /ws."""
    url = base_url.rstrip("/")
    if url.startswith("http://"):
        url = "ws://" + url[len("http://"):]
    elif url.startswith("https://"):
        url = "wss://" + url[len("https://"):]
    elif not url.startswith(("ws://", "wss://")):
        url = "ws://" + url
    return url + "/ws"


@dataclass
class StepResult:
    observation: Dict[str, Any]
    reward: Optional[float]
    done: bool


class ServerError(RuntimeError):
    """An error answer; the message reads like EnvClient's RuntimeError."""

    def __init__(self, data: Dict[str, Any]):
        self.code = data.get("code", "UNKNOWN")
        self.data = data
        super().__init__(f"Server error: {data.get('message', 'Unknown error')} (code: {self.code})")


class OpenEnvClient:
    def __init__(self, base_url: str, message_timeout_s: float = 60.0, headers: Optional[Dict[str, str]] = None):
        self.url = ws_url(base_url)
        self.timeout = message_timeout_s
        self.headers = headers or {}
        self.ws = None

    async def connect(self) -> "OpenEnvClient":
        self.ws = await ws_connect(self.url, max_size=100 * 1024 * 1024, extra_headers=self.headers)
        return self

    async def send(self, message: Dict[str, Any]) -> Dict[str, Any]:
        """One request, one answer; an error answer raises ServerError."""
        await self.ws.send(json.dumps(message))
        answer = json.loads(await asyncio.wait_for(self.ws.recv(), timeout=self.timeout))
        if answer.get("type") == "error":
            raise ServerError(answer.get("data", {}))
        return answer

    async def reset(self, **kwargs: Any) -> StepResult:
        return self.result((await self.send({"type": "reset", "data": kwargs}))["data"])

    async def step(self, action: Dict[str, Any]) -> StepResult:
        return self.result((await self.send({"type": "step", "data": action}))["data"])

    async def state(self) -> Dict[str, Any]:
        return (await self.send({"type": "state"}))["data"]

    async def close(self) -> None:
        if self.ws is not None:
            try:
                await self.ws.send(json.dumps({"type": "close"}))
            except Exception:
                pass
            await self.ws.close()
            self.ws = None

    @staticmethod
    def result(data: Dict[str, Any]) -> StepResult:
        return StepResult(observation=data.get("observation", {}), reward=data.get("reward"), done=data.get("done", False))

    async def __aenter__(self) -> "OpenEnvClient":
        return await self.connect()

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()
