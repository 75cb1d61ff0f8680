"""Serves TextEnv classes as OpenEnv environments (docs/openenv.md), with the same models as
`rollgym serve`'s /openenv/TAG: action {"action": TEXT}; observation {text, actions, info};
state {episode_id, step_count, env, seed, done}.

Each env NAME answers at /NAME/ws (and at /ws when it is the only one), plus GET /health,
/NAME/health, /NAME/schema, /NAME/metadata and /NAME/state. One socket is one session with its
own env instance. The envs run in a pool of worker processes, a session pinned to the least busy
one, so a slow env only delays the sessions on its own worker, and a worker that dies ends its
sessions with SESSION_ERROR instead of hanging them.

Needs only `websockets` (Debian's python3-websockets 10.4 is enough); the HTTP routes are the GET
ones, answered at the upgrade (OpenEnv's POST /reset and /step build a throwaway env per call;
episodes live on /ws).
"""

import asyncio
import http
import json
import multiprocessing
import random
import uuid
import warnings
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Dict, List, Optional, Tuple

import websockets.exceptions as wsx

with warnings.catch_warnings():
    # websockets >= 14 made a new asyncio server the default, whose process_request takes other
    # arguments; this server is written for the legacy one (path, headers), as the client is.
    warnings.simplefilter("ignore", DeprecationWarning)
    from websockets.legacy.server import serve as ws_serve

from .env import TextEnv

MAX_SEED = 2**32 - 1
MESSAGE_TYPES = ("reset", "step", "state", "close")

EnvFactory = Callable[[], TextEnv]


# --------------------------------------------------------------------------- worker processes


def _worker_main(conn: Any, factories: Dict[str, EnvFactory]) -> None:
    """One worker: envs by session id, one request at a time, answers (ok, value)."""
    envs: Dict[str, TextEnv] = {}
    while True:
        try:
            request = conn.recv()
        except EOFError:
            return
        if request is None:
            return
        session, op, arg = request
        try:
            conn.send((True, _run(envs, factories, session, op, arg)))
        except Exception as error:  # the env's own failure: the session hears of it
            conn.send((False, f"{type(error).__name__}: {error}"))


def _run(envs: Dict[str, TextEnv], factories: Dict[str, EnvFactory], session: str, op: str, arg: Any) -> Any:
    if op == "open":
        envs[session] = factories[arg]()
        return None
    if op == "close":
        env = envs.pop(session, None)
        if env is not None:
            env.close()
        return None
    env = envs[session]
    if op == "reset":
        text = env.reset(arg)
        if not isinstance(text, str):
            raise TypeError(f"reset() returned {type(text).__name__}, not the observation text (str)")
        return text, _names(env)
    if op == "step":
        outcome = tuple(env.step(arg))
        if len(outcome) == 3:
            outcome = (*outcome, {})
        if len(outcome) != 4:
            raise TypeError(f"step() returned {len(outcome)} values, not (observation, reward, done, info)")
        text, reward, done, info = outcome
        if not isinstance(text, str):
            raise TypeError(f"step() returned observation of type {type(text).__name__}, not str")
        if isinstance(reward, bool) or not isinstance(reward, (int, float)):
            raise TypeError(f"step() returned reward {reward!r}, not a number")
        if not isinstance(info, dict):
            raise TypeError(f"step() returned info of type {type(info).__name__}, not dict")
        return text, float(reward), bool(done), info, _names(env)
    raise ValueError(f"unknown worker operation {op!r}")


def _names(env: TextEnv) -> Optional[List[str]]:
    names = env.action_names
    return None if names is None else [str(n) for n in names]


class WorkerDied(Exception):
    pass


class _Worker:
    """A worker process and the one thread that talks to it (requests to one worker go in turn)."""

    def __init__(self, context: Any, factories: Dict[str, EnvFactory]):
        self.conn, child = context.Pipe()
        self.process = context.Process(target=_worker_main, args=(child, factories), daemon=True)
        self.process.start()
        child.close()
        self.thread = ThreadPoolExecutor(max_workers=1)
        self.sessions = 0

    def _roundtrip(self, request: Tuple[str, str, Any]) -> Tuple[bool, Any]:
        try:
            self.conn.send(request)
            return self.conn.recv()
        except (EOFError, OSError) as error:
            raise WorkerDied(f"worker process {self.process.pid} died (exit code {self.process.exitcode})") from error

    async def call(self, session: str, op: str, arg: Any = None) -> Tuple[bool, Any]:
        return await asyncio.get_running_loop().run_in_executor(self.thread, self._roundtrip, (session, op, arg))

    def stop(self) -> None:
        try:
            self.conn.send(None)
        except (EOFError, OSError):
            pass
        self.process.join(timeout=5)
        if self.process.is_alive():
            self.process.kill()
        self.thread.shutdown(wait=False)


# --------------------------------------------------------------------------- messages


def _error(code: str, message: str, **extra: Any) -> str:
    return json.dumps({"type": "error", "data": {"message": message, "code": code, **extra}})


def _invalid(loc: List[Any], msg: str, value: Any, kind: str) -> str:
    where = ".".join(str(p) for p in loc)
    errors = [{"type": kind, "loc": loc, "msg": msg, "input": value}]
    return _error("VALIDATION_ERROR", f"Invalid message: {where + ': ' if where else ''}{msg}", errors=errors)


def _extra(value: Dict[str, Any], allowed: Tuple[str, ...], loc: List[Any]) -> Optional[str]:
    for key in value:
        if key not in allowed:
            return _invalid([*loc, key], f"is not a field here; allowed: {', '.join(allowed)}", value[key], "extra_forbidden")
    return None


def check_message(value: Any) -> Tuple[Optional[Dict[str, Any]], Optional[str]]:
    """(message, None) for a valid message, (None, error frame) otherwise."""
    if not isinstance(value, dict) or not isinstance(value.get("type"), str):
        return None, _invalid([], f'a message must be a JSON object with a string "type" ({", ".join(MESSAGE_TYPES)})', value, "model_type")
    kind = value["type"]
    if kind not in MESSAGE_TYPES:
        return None, _error("UNKNOWN_TYPE", f"Unknown message type: {kind}; allowed: {', '.join(MESSAGE_TYPES)}")
    problem = _extra(value, ("type", "data") if kind in ("reset", "step") else ("type",), [])
    if problem:
        return None, problem
    if kind == "reset":
        data = value.get("data") or {}
        if not isinstance(data, dict):
            return None, _invalid(["data"], "must be an object of reset parameters", data, "dict_type")
        problem = _extra(data, ("seed", "episode_id"), ["data"])
        if problem:
            return None, problem
        seed = data.get("seed")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED):
            return None, _invalid(["data", "seed"], f"{json.dumps(seed)} is not an integer in [0, {MAX_SEED}]", seed, "int_type")
        episode = data.get("episode_id")
        if episode is not None and (not isinstance(episode, str) or len(episode) > 255):
            return None, _invalid(["data", "episode_id"], "must be a string of at most 255 characters", episode, "string_type")
        return {"type": "reset", "seed": seed, "episode_id": episode}, None
    if kind == "step":
        if "data" not in value:
            return None, _invalid(["data"], 'is required: the action, e.g. {"action": "..."}', value, "missing")
        data = value["data"]
        if not isinstance(data, dict):
            return None, _invalid(["data"], 'must be an action object like {"action": "..."}', data, "dict_type")
        problem = _extra(data, ("action", "metadata"), ["data"])
        if problem:
            return None, problem
        if not isinstance(data.get("action"), str):
            return None, _invalid(["data", "action"], "is required: the action as text", data.get("action"), "string_type")
        return {"type": "step", "action": data["action"]}, None
    return {"type": kind}, None


SCHEMAS = {
    "action": {
        "type": "object",
        "properties": {"action": {"type": "string"}, "metadata": {"type": "object"}},
        "required": ["action"],
        "additionalProperties": False,
    },
    "observation": {
        "type": "object",
        "properties": {
            "text": {"type": "string"},
            "actions": {"type": ["array", "null"], "items": {"type": "string"}},
            "info": {"type": "object"},
        },
        "required": ["text", "info"],
    },
    "state": {
        "type": "object",
        "properties": {
            "episode_id": {"type": ["string", "null"]},
            "step_count": {"type": "integer", "minimum": 0},
            "env": {"type": "string"},
            "seed": {"type": ["integer", "null"]},
            "done": {"type": "boolean"},
        },
    },
}


# --------------------------------------------------------------------------- the server


class OpenEnvProvider:
    """The server; `await provider.start(host, port)` then `provider.port`, `await provider.stop()`.

    Build it before the event loop runs (worker processes are forked at construction)."""

    def __init__(self, envs: Dict[str, EnvFactory], workers: int = 2, max_sessions: int = 256, max_frame_bytes: int = 1 << 20):
        if not envs:
            raise ValueError("envs: give at least one name -> TextEnv class (or factory)")
        if workers < 1:
            raise ValueError(f"workers: {workers} is not a positive integer")
        if max_sessions < 1:
            raise ValueError(f"max_sessions: {max_sessions} is not a positive integer")
        self.envs = dict(envs)
        self.max_sessions = max_sessions
        self.max_frame_bytes = max_frame_bytes
        context = multiprocessing.get_context("fork")
        self.workers = [_Worker(context, self.envs) for _ in range(workers)]
        self.active = 0
        self.server: Any = None
        self.port = 0

    def _env_of(self, path: str) -> Tuple[Optional[str], str]:
        """(env name, route) of a path: route is "ws", "health", "schema", "metadata", "state" or ""."""
        parts = [p for p in path.split("?")[0].split("/") if p]
        if len(parts) == 1 and len(self.envs) == 1:
            return next(iter(self.envs)), parts[0]
        if len(parts) == 2 and parts[0] in self.envs:
            return parts[0], parts[1]
        return None, parts[0] if parts else ""

    async def _http(self, path: str, headers: Any) -> Any:
        name, route = self._env_of(path)
        if route == "ws" and name is not None:
            return None
        if route == "health" and (name is not None or path.rstrip("/") == "/health"):
            return self._json(http.HTTPStatus.OK, {"status": "healthy"})
        if name is None:
            known = ", ".join(self.envs)
            return self._json(http.HTTPStatus.NOT_FOUND, {"detail": f"no route {path}; envs: {known} (each at /NAME/ws, /NAME/schema, /NAME/metadata, /NAME/state)"})
        if route == "schema":
            return self._json(http.HTTPStatus.OK, SCHEMAS)
        if route == "metadata":
            factory = self.envs[name]
            return self._json(http.HTTPStatus.OK, {"name": name, "description": getattr(factory, "description", "") or name})
        if route == "state":
            return self._json(http.HTTPStatus.OK, {"episode_id": None, "step_count": 0, "env": name, "seed": None, "done": False})
        return self._json(http.HTTPStatus.NOT_FOUND, {"detail": f"no route {path}; {name} answers at /{name}/ws, /{name}/schema, /{name}/metadata, /{name}/state"})

    @staticmethod
    def _json(status: http.HTTPStatus, body: Any) -> Any:
        return status, [("Content-Type", "application/json")], json.dumps(body).encode()

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> "OpenEnvProvider":
        self.server = await ws_serve(self._session, host, port, process_request=self._http, max_size=self.max_frame_bytes)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()
        for worker in self.workers:
            worker.stop()

    async def _session(self, ws: Any, path: Optional[str] = None) -> None:
        name, _ = self._env_of(path if path is not None else ws.path)
        if self.active >= self.max_sessions:
            await ws.send(_error("CAPACITY_REACHED", f"Server at capacity: {self.active}/{self.max_sessions} sessions active. Cannot accept new connections.", active_sessions=self.active, max_sessions=self.max_sessions))
            await ws.close(1000, "at capacity")
            return
        self.active += 1
        worker = min(self.workers, key=lambda w: w.sessions)
        worker.sessions += 1
        session = uuid.uuid4().hex
        state: Dict[str, Any] = {"episode_id": None, "step_count": 0, "env": name, "seed": None, "done": False}
        try:
            ok, value = await worker.call(session, "open", name)
            if not ok:
                await ws.send(_error("FACTORY_ERROR", f"Environment factory '{name}' failed to create instance: {value}", factory_name=name))
                return
            async for frame in ws:
                reply = await self._answer(frame, worker, session, state)
                if reply is None:
                    break
                await ws.send(reply)
        except WorkerDied as error:
            await ws.send(_error("SESSION_ERROR", str(error)))
        except wsx.ConnectionClosed:
            pass
        finally:
            self.active -= 1
            worker.sessions -= 1
            try:
                await worker.call(session, "close")
            except WorkerDied:
                pass
            await ws.close()

    async def _answer(self, frame: Any, worker: _Worker, session: str, state: Dict[str, Any]) -> Optional[str]:
        """The reply to one frame; None when the client closed the session."""
        if isinstance(frame, bytes):
            return _error("INVALID_JSON", "Invalid JSON: binary frame; OpenEnv messages are JSON text frames")
        try:
            value = json.loads(frame)
        except ValueError as error:
            return _error("INVALID_JSON", f"Invalid JSON: {error}")
        message, problem = check_message(value)
        if problem is not None:
            return problem
        kind = message["type"]
        if kind == "close":
            return None
        if kind == "state":
            return json.dumps({"type": "state", "data": state})
        if kind == "reset":
            seed = message["seed"] if message["seed"] is not None else random.randint(0, MAX_SEED)
            ok, value = await worker.call(session, "reset", seed)
            if not ok:
                return _error("EXECUTION_ERROR", value)
            text, names = value
            state.update(episode_id=message["episode_id"] or uuid.uuid4().hex, step_count=0, seed=seed, done=False)
            return json.dumps({"type": "observation", "data": {"observation": {"text": text, "actions": names, "info": {}}, "reward": None, "done": False}})
        if state["episode_id"] is None:
            return _error("EXECUTION_ERROR", "no episode yet: send reset first")
        if state["done"]:
            return _error("EXECUTION_ERROR", "the episode is over (done); send reset for a new one")
        ok, value = await worker.call(session, "step", message["action"])
        if not ok:
            return _error("EXECUTION_ERROR", value)
        text, reward, done, info, names = value
        state.update(step_count=state["step_count"] + 1, done=done)
        try:
            observation = json.dumps({"text": text, "actions": names, "info": info})
        except (TypeError, ValueError) as error:
            return _error("EXECUTION_ERROR", f"step() returned info that is not JSON: {error}")
        return '{"type": "observation", "data": {"observation": %s, "reward": %s, "done": %s}}' % (observation, json.dumps(reward), json.dumps(done))


def serve_openenv(envs: Dict[str, EnvFactory], host: str = "127.0.0.1", port: int = 8010, workers: int = 2, max_sessions: int = 256) -> None:
    """Serves `envs` (name -> TextEnv class or factory) until interrupted; prints the base URLs."""
    provider = OpenEnvProvider(envs, workers=workers, max_sessions=max_sessions)

    async def main() -> None:
        await provider.start(host, port)
        for name in envs:
            print(f"serving {name} as an OpenEnv environment at http://{host}:{provider.port}/{name}", flush=True)
        try:
            await asyncio.Future()
        finally:
            await provider.stop()

    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
