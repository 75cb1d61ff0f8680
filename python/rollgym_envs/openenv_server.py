"""Serves TextEnv classes as OpenEnv environments (docs/openenv.md), with the same models as
`rollgym serve`'s /openenv/TAG: action {"action": TEXT}; observation {text, actions, info};
state {episode_id, step_count, env, seed, done}.

Each env NAME answers at /NAME/ws (and at /ws when it is the only one), plus GET /health,
/NAME/health, /NAME/schema, /NAME/metadata and /NAME/state. One socket is one session with its
own env instance. The envs run in a pool of worker processes, a session pinned to the least busy
one, so a slow env only delays the sessions on its own worker; a worker that dies is replaced at
once and each session whose env it held ends with SESSION_ERROR naming the death (workers.py).

A socket holds a session place (max_sessions) and an env instance only from its first reset:
until then it is pending, closed after hello_timeout_s, and the oldest pending socket is closed
when max_pending are waiting. So silent sockets cannot lock out clients that play, and a session
that stops playing is closed after idle_s (docs/openenv.md "Provider limits").

Needs only `websockets` (Debian's python3-websockets 10.4 is enough); the HTTP routes are the GET
ones, answered at the upgrade (OpenEnv's POST /reset and /step build a throwaway env per call;
episodes live on /ws).
"""

import argparse
import asyncio
import functools
import http
import json
import logging
import math
import multiprocessing
import random
import signal
import uuid
import warnings
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple

import websockets.exceptions as wsx

with warnings.catch_warnings():
    # websockets >= 14 made a new asyncio server the default, whose process_request takes other
    # arguments; this server is written for the legacy one (path, headers), as the client is.
    warnings.simplefilter("ignore", DeprecationWarning)
    from websockets.legacy.server import WebSocketServerProtocol
    from websockets.legacy.server import serve as ws_serve

from .messages import MAX_SEED, MODELS, check_message, error_frame, parse_frame
from .origin import OriginPolicy, normal_origin
from .workers import EnvFactory, EnvFailed, Worker, WorkerDied, stop_workers

# Frames websockets reads ahead of the handler per socket: with max_frame_bytes, what one
# socket may make the provider hold (OpenEnv clients send one request and wait for its answer).
MAX_QUEUE = 4

log = logging.getLogger("rollgym_envs")


# --------------------------------------------------------------------------- the server

DEFAULTS: Dict[str, Any] = {
    "workers": 2,
    "max_sessions": 256,
    "max_pending": 512,
    "hello_timeout_s": 10.0,
    "idle_s": 600.0,
    "max_frame_bytes": 1 << 20,
    "max_depth": 32,
}


class _Session:
    """One socket: pending until its first reset, then a session with a worker and an env."""

    def __init__(self, ws: Any, name: Optional[str]):
        self.ws = ws
        self.id = uuid.uuid4().hex
        self.worker: Optional[Worker] = None
        # Set when the session's worker died: the frame that tells the client, being sent.
        self.ending: Optional["asyncio.Future[None]"] = None
        self.state: Dict[str, Any] = {"episode_id": None, "step_count": 0, "env": name, "seed": None, "done": False}
        self.touched = 0.0


class _Protocol(WebSocketServerProtocol):
    """The legacy server's connection, with the provider's clock on the opening handshake and
    an OpenEnv error frame before the close websockets makes for a frame it refuses."""

    def __init__(self, *args: Any, provider: "OpenEnvProvider", **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.provider = provider
        self.connected_at = 0.0

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)
        self.connected_at = self.loop.time()
        self.provider._add_pending(self)

    def connection_lost(self, exc: Optional[Exception]) -> None:
        self.provider.pending.pop(self, None)
        super().connection_lost(exc)

    async def handshake(self, *args: Any, **kwargs: Any) -> str:
        try:
            return await asyncio.wait_for(super().handshake(*args, **kwargs), self.provider.hello_timeout_s)
        except asyncio.TimeoutError:
            # A ConnectionError ends the connection without a log line (websockets' handler).
            raise ConnectionAbortedError("no WebSocket upgrade within hello_timeout_s") from None

    def fail_connection(self, code: int = 1006, reason: str = "") -> None:
        why = {1009: f"frame over max_frame_bytes ({self.provider.max_frame_bytes} bytes)", 1007: "text frame that is not UTF-8"}.get(code)
        if why is not None and self.state.name == "OPEN":
            message = f"a {why}; the session is closed ({code})"
            self.write_frame_sync(True, 0x1, error_frame("SESSION_ERROR", message).encode())
            reason = reason or why.split(" (")[0]
        super().fail_connection(code, reason)


class OpenEnvProvider:
    """The server; `await provider.start(host, port)` then `provider.port`, `await provider.stop()`.

    Build it before the event loop runs (worker processes are forked at construction). The
    limits are docs/openenv.md's "Provider limits"; `allow_origins` and `allow_hosts` let
    browsers in by other names ("Origin and Host")."""

    def __init__(
        self,
        envs: Dict[str, EnvFactory],
        workers: int = DEFAULTS["workers"],
        max_sessions: int = DEFAULTS["max_sessions"],
        max_frame_bytes: int = DEFAULTS["max_frame_bytes"],
        *,
        max_pending: int = DEFAULTS["max_pending"],
        hello_timeout_s: float = DEFAULTS["hello_timeout_s"],
        idle_s: float = DEFAULTS["idle_s"],
        max_depth: int = DEFAULTS["max_depth"],
        allow_origins: Sequence[str] = (),
        allow_hosts: Sequence[str] = (),
    ):
        if not envs:
            raise ValueError("envs: give at least one name -> TextEnv class (or factory)")
        for name, value, low in (("workers", workers, 1), ("max_sessions", max_sessions, 1), ("max_pending", max_pending, 1), ("max_frame_bytes", max_frame_bytes, 1024), ("max_depth", max_depth, 3)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name}: {value!r} is not an integer >= {low}")
        for name, value in (("hello_timeout_s", hello_timeout_s), ("idle_s", idle_s)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
                raise ValueError(f"{name}: {value!r} is not a positive number of seconds")
        self.envs = dict(envs)
        self.max_sessions = max_sessions
        self.max_pending = max_pending
        self.max_frame_bytes = max_frame_bytes
        self.hello_timeout_s = float(hello_timeout_s)
        self.idle_s = float(idle_s)
        self.max_depth = max_depth
        self.origins = OriginPolicy(allow_origins, allow_hosts)
        self.active = 0
        # Connections without a session place yet, oldest first (dicts keep insertion order).
        self.pending: Dict[_Protocol, None] = {}
        self.closing: Set["asyncio.Future[None]"] = set()
        self.server: Any = None
        self.port = 0
        self.context = multiprocessing.get_context("fork")
        # The live workers; a dead one leaves the list and a new one takes its place.
        self.workers: List[Worker] = []
        for _ in range(workers):
            self.workers.append(self._spawn_worker())
        self.worker_count = workers
        self.worker_deaths = 0
        self.worker_restarts = 0
        self.stopping = False

    def _env_of(self, path: str) -> Tuple[Optional[str], str]:
        """(env name, route) of a path: route is "ws", "health", "schema", "metadata", "state" or ""."""
        parts = [p for p in path.split("?")[0].split("/") if p]
        if len(parts) == 1 and len(self.envs) == 1:
            return next(iter(self.envs)), parts[0]
        if len(parts) == 2 and parts[0] in self.envs:
            return parts[0], parts[1]
        return None, parts[0] if parts else ""

    async def _http(self, path: str, headers: Any) -> Any:
        try:
            return self._route(path, headers)
        except Exception as error:  # a bug of ours answers 500, never a traceback per request
            log.error("GET %s failed: %s: %s", path[:100], type(error).__name__, error)
            log.debug("the request's traceback", exc_info=True)
            return self._json(http.HTTPStatus.INTERNAL_SERVER_ERROR, {"detail": f"the provider failed on this request: {type(error).__name__}"})

    def _route(self, path: str, headers: Any) -> Any:
        """The HTTP answer to a request, or None to go on with the WebSocket upgrade."""
        refusal = self.origins.refusal(path, headers)
        if refusal is not None:
            return self._json(http.HTTPStatus.FORBIDDEN, {"detail": refusal})
        name, route = self._env_of(path)
        if route == "ws" and name is not None:
            return None
        if route == "health" and (name is not None or path.rstrip("/") == "/health"):
            return self._health()
        if name is None:
            known = ", ".join(self.envs)
            return self._json(http.HTTPStatus.NOT_FOUND, {"detail": f"no route {path[:100]}; envs: {known} (each at /NAME/ws, /NAME/schema, /NAME/metadata, /NAME/state)"})
        if route == "schema":
            return self._json(http.HTTPStatus.OK, MODELS)
        if route == "metadata":
            factory = self.envs[name]
            return self._json(http.HTTPStatus.OK, {"name": name, "description": getattr(factory, "description", "") or name})
        if route == "state":
            return self._json(http.HTTPStatus.OK, {"episode_id": None, "step_count": 0, "env": name, "seed": None, "done": False})
        return self._json(http.HTTPStatus.NOT_FOUND, {"detail": f"no route {path[:100]}; {name} answers at /{name}/ws, /{name}/schema, /{name}/metadata, /{name}/state"})

    def _health(self) -> Any:
        """OpenEnv's {"status"}: healthy with every worker alive, degraded with some, unhealthy
        (503) with none; and the workers' count, deaths and restarts."""
        for worker in list(self.workers):  # a death the loop has not heard of yet counts now
            if not worker.alive():
                self._worker_died(worker)
        alive = len(self.workers)
        status = "healthy" if alive >= self.worker_count else "degraded" if alive else "unhealthy"
        body = {
            "status": status,
            "workers": {"alive": alive, "configured": self.worker_count, "died": self.worker_deaths, "restarted": self.worker_restarts},
            "sessions": {"active": self.active, "max": self.max_sessions},
        }
        return self._json(http.HTTPStatus.OK if alive else http.HTTPStatus.SERVICE_UNAVAILABLE, body)

    @staticmethod
    def _json(status: http.HTTPStatus, body: Any) -> Any:
        return status, [("Content-Type", "application/json")], json.dumps(body).encode()

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> "OpenEnvProvider":
        if host:
            self.origins.add_host(host)
        self.server = await ws_serve(
            self._session,
            host,
            port,
            create_protocol=functools.partial(_Protocol, provider=self),
            process_request=self._http,
            max_size=self.max_frame_bytes,
            max_queue=MAX_QUEUE,
        )
        self.port = self.server.sockets[0].getsockname()[1]
        for worker in self.workers:
            self._watch(worker)
        return self

    def _watch(self, worker: Worker) -> None:
        """Hears a worker's end as it happens (its sentinel becomes readable), not at its next call."""
        loop = asyncio.get_running_loop()
        sentinel = worker.sentinel

        def ended() -> None:
            loop.remove_reader(sentinel)
            if not self.stopping:
                self._worker_died(worker)

        loop.add_reader(sentinel, ended)

    def _worker_died(self, worker: Worker) -> None:
        """Takes a dead worker out of the pool, starts one in its place, and ends each session
        whose env lived in it with a SESSION_ERROR naming the death (once per worker)."""
        if worker not in self.workers:
            return
        self.workers.remove(worker)
        self.worker_deaths += 1
        asyncio.get_running_loop().remove_reader(worker.sentinel)
        death = worker.bury()
        if self.stopping:
            for session in worker.sessions:
                self._tell_lost(session, "the provider is stopping")
            return
        replacement = self._restart(death)
        log.error("%s; %d session(s) lost their env; %s", death, len(worker.sessions), replacement)
        for session in worker.sessions:
            self._tell_lost(session, death)

    @staticmethod
    def _tell_lost(session: _Session, why: str) -> None:
        """Ends a session whose env ended with its worker: SESSION_ERROR saying why, then 1000."""
        if session.ending is None:
            message = f"{why}, and this session's env with it; the episode cannot go on"
            session.ending = asyncio.ensure_future(_end(session.ws, "SESSION_ERROR", message, "worker died"))

    def _restart(self, death: str) -> str:
        try:
            worker = self._spawn_worker()
        except (OSError, ValueError) as error:  # no fork to be had: the pool serves with one less
            return f"no worker could take its place ({type(error).__name__}: {error}); {len(self.workers)} of {self.worker_count} left"
        self.workers.append(worker)
        self.worker_restarts += 1
        self._watch(worker)
        return f"worker process {worker.pid} started in its place"

    def _spawn_worker(self) -> Worker:
        # Once serving, a fork from the loop's thread while the other workers' threads wait on their
        # pipes: they hold no lock the child needs (it runs only the worker loop).
        return Worker(self.context, self.envs, self._descriptors())

    def _descriptors(self) -> List[int]:
        """The provider's own file descriptors a new worker must not keep: pipes, sockets."""
        fds = [fd for worker in self.workers for fd in worker.fds()]
        if self.server is None:
            return fds
        fds += [sock.fileno() for sock in self.server.sockets]
        for connection in {*self.server.websockets, *self.pending}:
            sock = connection.transport.get_extra_info("socket") if connection.transport is not None else None
            if sock is not None and sock.fileno() >= 0:
                fds.append(sock.fileno())
        return fds

    async def stop(self) -> None:
        self.stopping = True
        loop = asyncio.get_running_loop()
        workers = list(self.workers)
        for worker in workers:
            loop.remove_reader(worker.sentinel)
        # The workers first: an env in the middle of a step would hold its session's handler, and
        # so the server's close, until it returned. Their sessions hear why.
        stop_workers(workers)
        for worker in workers:
            self._worker_died(worker)
        if self.server is not None:
            # websockets would wait out the handshake of a connection that sends no request, and
            # trips over one that answered HTTP but is not unregistered yet: both end first.
            ending = [c for c in self.server.websockets if c.state.name != "OPEN"]
            for connection in ending:
                if connection.state.name == "CONNECTING":
                    connection.transport.abort()
            if ending:
                await asyncio.wait([c.handler_task for c in ending])
            self.server.close()
            await self.server.wait_closed()

    def _add_pending(self, connection: _Protocol) -> None:
        self.pending[connection] = None
        while len(self.pending) > self.max_pending:
            oldest = next(iter(self.pending))
            del self.pending[oldest]
            if oldest.state.name == "OPEN":
                message = f"closed for a newer connection: {self.max_pending} sockets (max_pending) were waiting for their first reset"
                closing = asyncio.ensure_future(_end(oldest, "SESSION_ERROR", message, "too many pending"))
                self.closing.add(closing)  # the loop holds tasks weakly
                closing.add_done_callback(self.closing.discard)
            else:  # still in its opening handshake
                oldest.transport.abort()

    async def _session(self, ws: Any) -> None:
        name, _ = self._env_of(ws.path)
        if self.active >= self.max_sessions:  # OpenEnv's behaviour: accept, say so, close
            await self._refuse_full(ws)
            return
        session = _Session(ws, name)
        try:
            await self._serve(session)
        except wsx.ConnectionClosed:
            pass
        except WorkerDied:
            worker = session.worker
            assert worker is not None  # _open handles a death before the session has a worker
            self._worker_died(worker)  # ends the sessions it held; this one too, unless it came late
            self._tell_lost(session, worker.bury())
        except Exception as error:  # a bug of ours fails this session, never the provider
            log.error("session %s of %s failed: %s: %s", session.id[:8], name, type(error).__name__, error)
            log.debug("the session's traceback", exc_info=True)
            await _end(ws, "SESSION_ERROR", f"the provider failed on this session: {type(error).__name__}", "internal error")
        finally:
            self.pending.pop(ws, None)
            worker = session.worker
            if worker is not None:
                self.active -= 1
                worker.sessions.discard(session)
                try:
                    await worker.call(session.id, "close")
                except WorkerDied:
                    pass
                except EnvFailed as error:
                    self._log_env_failure(session, "close", error)
            if session.ending is not None:
                await session.ending  # the worker's death, told before the close
            await ws.close()

    async def _refuse_full(self, ws: Any) -> None:
        message = f"Server at capacity: {self.active}/{self.max_sessions} sessions active. Cannot accept new connections."
        await _end(ws, "CAPACITY_REACHED", message, "at capacity", active_sessions=self.active, max_sessions=self.max_sessions)

    async def _serve(self, session: _Session) -> None:
        ws = session.ws
        loop = asyncio.get_running_loop()
        while True:
            if session.worker is None:
                deadline = ws.connected_at + self.hello_timeout_s
                silence = f"no reset within {self.hello_timeout_s:g} s of connecting (hello_timeout_s)"
            else:
                deadline = session.touched + self.idle_s
                silence = f"no reset or step for {self.idle_s:g} s (idle_s)"
            try:
                frame = await asyncio.wait_for(ws.recv(), max(0.0, deadline - loop.time()))
            except asyncio.TimeoutError:
                await _end(ws, "SESSION_ERROR", f"{silence}; session closed", "idle")
                return
            value, problem = parse_frame(frame, self.max_depth)
            message = None
            if problem is None:
                message, problem = check_message(value)
            if problem is not None:
                await ws.send(problem)
                continue
            kind = message["type"]
            if kind == "close":
                return
            if kind == "reset" and session.worker is None and not await self._open(session):
                return
            await ws.send(await self._answer(message, session))
            if kind in ("reset", "step"):
                session.touched = loop.time()

    async def _open(self, session: _Session) -> bool:
        """Gives a pending socket its session place and env at its first reset; False if it closed."""
        self.pending.pop(session.ws, None)
        if self.active >= self.max_sessions:  # others took the places since this socket connected
            await self._refuse_full(session.ws)
            return False
        self.active += 1  # before any wait, so that sockets opening together count each other
        if not await self._pin(session):
            self.active -= 1
            return False
        return True

    async def _pin(self, session: _Session) -> bool:
        """Opens the session's env in the least busy live worker; False once the socket is ended."""
        name = session.state["env"]
        while True:
            worker = self._least_busy()
            if worker is None:
                message = f"no worker process is alive: {self.worker_deaths} died and none could take their place"
                await _end(session.ws, "SESSION_ERROR", message, "no worker")
                return False
            worker.sessions.add(session)  # counted at once, so concurrent opens spread out
            try:
                await worker.call(session.id, "open", name)
            except WorkerDied:  # died before this session had an env in it: another one takes it
                worker.sessions.discard(session)
                self._worker_died(worker)
                if session.ending is None:
                    continue
            except EnvFailed as error:
                worker.sessions.discard(session)
                self._log_env_failure(session, "open", error)
                await _end(session.ws, "FACTORY_ERROR", f"Environment factory '{name}' failed to create instance: {error.reason}", "factory failed", factory_name=name)
                return False
            if session.ending is not None:  # its worker died while the env opened: told so
                worker.sessions.discard(session)
                return False
            session.worker = worker
            return True

    def _least_busy(self) -> Optional[Worker]:
        """The live worker with the fewest sessions (a dead one found here leaves the pool first)."""
        for worker in list(self.workers):
            if not worker.alive():
                self._worker_died(worker)
        return min(self.workers, key=lambda w: len(w.sessions), default=None)

    def _log_env_failure(self, session: _Session, op: str, error: EnvFailed) -> None:
        log.warning("env %s (session %s) failed in %s: %s\n%s", session.state["env"], session.id[:8], op, error.reason, error.trace.rstrip())

    async def _answer(self, message: Dict[str, Any], session: _Session) -> str:
        """The reply to one valid message other than close."""
        state, kind = session.state, message["type"]
        if kind == "state":
            return json.dumps({"type": "state", "data": state})
        if kind == "step" and state["episode_id"] is None:
            return error_frame("EXECUTION_ERROR", "no episode yet: send reset first")
        worker = session.worker
        assert worker is not None  # a reset opened the session; a step before one is answered above
        if kind == "reset":
            seed = message["seed"] if message["seed"] is not None else random.randint(0, MAX_SEED)
            try:
                text, names = await worker.call(session.id, "reset", seed)
            except EnvFailed as error:
                self._log_env_failure(session, "reset", error)
                return error_frame("EXECUTION_ERROR", error.reason)
            state.update(episode_id=message["episode_id"] or uuid.uuid4().hex, step_count=0, seed=seed, done=False)
            return json.dumps({"type": "observation", "data": {"observation": {"text": text, "actions": names, "info": {}}, "reward": None, "done": False}})
        if state["done"]:
            return error_frame("EXECUTION_ERROR", "the episode is over (done); send reset for a new one")
        try:
            text, reward, done, info, names = await worker.call(session.id, "step", message["action"])
        except EnvFailed as error:
            self._log_env_failure(session, "step", error)
            return error_frame("EXECUTION_ERROR", error.reason)
        state.update(step_count=state["step_count"] + 1, done=done)
        try:
            observation = json.dumps({"text": text, "actions": names, "info": info}, allow_nan=False)
        except (TypeError, ValueError) as error:
            return error_frame("EXECUTION_ERROR", f"step() returned info that is not JSON: {error}")
        return '{"type": "observation", "data": {"observation": %s, "reward": %s, "done": %s}}' % (observation, json.dumps(reward), json.dumps(done))


async def _end(ws: Any, code: str, message: str, reason: str, **extra: Any) -> None:
    """An OpenEnv error frame, then the close (as OpenEnv ends a session it cannot go on with)."""
    try:
        await ws.send(error_frame(code, message, **extra))
        await ws.close(1000, reason)
    except wsx.ConnectionClosed:
        pass


# --------------------------------------------------------------------------- serving from a script


def provider_parser(description: str, prog: Optional[str] = None) -> argparse.ArgumentParser:
    """The provider's command-line options (`python3 -m rollgym_envs --help`), for scripts that
    serve their own envs: `serve_openenv(envs, **provider_options(parser.parse_args()))`."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    d = DEFAULTS
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8010, help="port; 0 picks a free one (default: 8010)")
    parser.add_argument("--workers", metavar="N", type=_at_least(1), default=d["workers"], help=f"worker processes the envs run in (default: {d['workers']})")
    parser.add_argument("--max-sessions", metavar="N", type=_at_least(1), default=d["max_sessions"], help=f"sessions (sockets past their first reset) at once; one more gets CAPACITY_REACHED (default: {d['max_sessions']})")
    parser.add_argument("--max-pending", metavar="N", type=_at_least(1), default=d["max_pending"], help=f"sockets waiting for their first reset; one more closes the oldest (default: {d['max_pending']})")
    parser.add_argument("--hello-timeout-s", type=_seconds, default=d["hello_timeout_s"], metavar="S", help=f"a socket with no reset this long after connecting is closed (default: {d['hello_timeout_s']:g})")
    parser.add_argument("--idle-s", type=_seconds, default=d["idle_s"], metavar="S", help=f"a session with no reset or step for this long is closed (default: {d['idle_s']:g})")
    parser.add_argument("--max-frame-bytes", metavar="BYTES", type=_at_least(1024), default=d["max_frame_bytes"], help=f"largest frame a client may send; larger closes the session with 1009 (default: {d['max_frame_bytes']})")
    parser.add_argument("--max-depth", metavar="N", type=_at_least(3), default=d["max_depth"], help=f"nesting of arrays and objects a frame may have; deeper gets INVALID_JSON (default: {d['max_depth']})")
    parser.add_argument("--allow-origin", action="append", default=[], metavar="ORIGIN", type=_origin, help="a browser origin (https://lab.example:8443) that may use the provider besides its own page; repeatable")
    parser.add_argument("--allow-host", action="append", default=[], metavar="NAME", help="a host name browsers may reach the provider by besides IP addresses, localhost and this machine's name; repeatable")
    parser.add_argument("--log-level", choices=("debug", "info", "warning", "error"), default="info", help="warning keeps env failures (with their tracebacks) and worker deaths (default: info)")
    return parser


def provider_options(args: argparse.Namespace) -> Dict[str, Any]:
    """serve_openenv's keyword arguments from provider_parser's options."""
    names = ("host", "port", "workers", "max_sessions", "max_pending", "hello_timeout_s", "idle_s", "max_frame_bytes", "max_depth", "log_level")
    return {**{n: getattr(args, n) for n in names}, "allow_origins": args.allow_origin, "allow_hosts": args.allow_host}


def _at_least(low: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = low - 1
        if value < low:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer >= {low}")
        return value

    return parse


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of seconds")
    return value


def _origin(text: str) -> str:
    try:
        return normal_origin(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error).replace("allow_origins: ", "")) from None


def serve_openenv(envs: Dict[str, EnvFactory], host: str = "127.0.0.1", port: int = 8010, log_level: str = "info", **options: Any) -> None:
    """Serves `envs` (name -> TextEnv class or factory) until interrupted; prints the base URLs.
    `options` are OpenEnvProvider's (workers, max_sessions, idle_s, allow_origins, ...)."""
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("websockets").setLevel(logging.WARNING)  # a line per connection otherwise
    provider = OpenEnvProvider(envs, **options)

    async def main() -> None:
        # SIGTERM, SIGINT and SIGHUP all stop the provider the same way, its workers with it.
        loop = asyncio.get_running_loop()
        stopped: "asyncio.Future[str]" = loop.create_future()
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            loop.add_signal_handler(sig, lambda name=sig.name: stopped.done() or stopped.set_result(name))
        try:
            await provider.start(host, port)
            for name in envs:
                print(f"serving {name} as an OpenEnv environment at http://{host}:{provider.port}/{name}", flush=True)
            log.info("stopping on %s", await stopped)
        finally:
            await provider.stop()

    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
