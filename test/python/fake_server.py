"""A small stand-in for `rollgym serve`, for unit tests of the Python client.

It implements the parts of protocol/PROTOCOL.md the client depends on, with the same
session semantics as src/server/session.ts: handshake and version check, bearer-token check
at the upgrade (HTTP 401), credit and acknowledgements, an ordered outbox where group frames
spend credit, resume within a grace period (unacknowledged groups resent in seq order, then
unconfirmed batch frames), cancel, `progress`, `closing` + 1001 on shutdown, env hosting
on a toy environment, and `tokens: true` (group frames with synthetic token logs in the wire
format, `token_log`/`token_fields`). Episodes are synthetic but deterministic in (seed, env id).

Test hooks: `drop_after_groups` (abort the TCP connection, no close frame, right after the
n-th group frame of a connection), `drop_on_frame` (abort when the client sends a frame of a
type), `group_delay` (seconds per group), and counters (`max_inflight`, `acks`, `credits`,
`client_frames`, `connections`).

Runs in its own thread with its own event loop, so synchronous clients can block the test's
thread while it serves: `with FakeServer() as server: Client(server.url)`.
"""

from __future__ import annotations

import asyncio
import collections
import http
import threading
import uuid
from typing import Any, Dict, List, Optional

import msgpack
import numpy as np
import websockets

PROTOCOL = 1
TAGS = ["Fake", "FakeB"]
ACTIONS = ["Up", "Down", "Left", "Right"]
#: Token ids of the synthetic token logs are in [0, VOCAB).
VOCAB = 64


def encode(frame: Dict[str, Any]) -> bytes:
    return msgpack.packb(frame, use_bin_type=True)


def i32(values) -> bytes:
    return np.asarray(values, dtype="<i4").tobytes()


def f32(values) -> bytes:
    return np.asarray(values, dtype="<f4").tobytes()


def u8(values) -> bytes:
    return np.asarray(values, dtype="<u1").tobytes()


def episode(env_id: int, group: int, tag: str, seed: int, cancelled: bool = False) -> Dict[str, Any]:
    """A deterministic synthetic episode record (docs/rollouts.md's fields)."""
    i = env_id
    # Every third seed plays the same reward in all episodes (zero variance: the train filter drops it).
    reward = 0.5 if seed % 3 == 0 else float((seed * 7 + i * 3) % 5) / 4.0
    penalty = -0.1 if (seed + i) % 4 == 0 else 0.0
    score = float(np.float32(reward) + np.float32(penalty))
    success = reward >= 0.75 and not cancelled
    return {
        "env_id": env_id,
        "group_id": group,
        "tag": tag,
        "seed": seed,
        "turns": [{"turn": 1, "state": f"state {seed}", "raw_response": "<think>x</think><answer>Up</answer>", "reward": reward}],
        "final_state": f"final {seed}",
        "num_actions": 1,
        "terminated": success,
        "truncated": False,
        "success": success,
        "reward": reward,
        "penalty": penalty,
        "score": score,
        "metrics": {f"{tag}/success": 1.0 if success else 0.0},
        "failure": "cancelled" if cancelled else None,
    }


def token_log(env_id: int, seed: int, reward: float) -> Dict[str, Any]:
    """A deterministic synthetic token log with the fields of the server's TokenRecord: the
    prompt, then per turn inserted ids (from the second turn on) and sampled ids, each turn's
    reward on its last sampled id. Env ids = 5 (mod 6) start with an empty turn, env ids
    = 4 (mod 6) have no turn at all (the context was full at once)."""
    rng = np.random.default_rng([seed, env_id])
    prompt = int(rng.integers(2, 7))
    ids = [int(t) for t in rng.integers(0, VOCAB, prompt)]
    mask, logprobs, rewards = [0] * prompt, [0.0] * prompt, [0.0] * prompt
    starts: List[int] = []
    ends: List[int] = []
    turns = 0 if env_id % 6 == 4 else int(rng.integers(1, 4))
    for k in range(turns):
        if k > 0:
            inserted = [int(t) for t in rng.integers(0, VOCAB, int(rng.integers(1, 4)))]
            ids += inserted
            mask += [0] * len(inserted)
            logprobs += [0.0] * len(inserted)
            rewards += [0.0] * len(inserted)
        n = 0 if (k == 0 and env_id % 6 == 5) else int(rng.integers(1, 6))
        starts.append(len(ids))
        ids += [int(t) for t in rng.integers(0, VOCAB, n)]
        mask += [1] * n
        logprobs += [float(-0.01 - 3 * x) for x in rng.random(n)]
        rewards += [0.0] * n
        ends.append(len(ids))
        if n:
            rewards[-1] = reward if k == turns - 1 else 0.25 * (k + 1)
    return {
        "ids": ids, "loss_mask": mask, "logprobs": logprobs, "rewards": rewards,
        "turn_starts": starts, "turn_ends": ends, "prompt_length": prompt,
    }


def token_fields(logs: List[Dict[str, Any]]) -> Dict[str, bytes]:
    """The token arrays of a group frame (PROTOCOL.md "Token logs"), from per-episode logs."""
    offsets = [0]
    for log in logs:
        offsets.append(offsets[-1] + len(log["ids"]))

    def cat(key: str) -> List[Any]:
        return [v for log in logs for v in log[key]]

    return {
        "token_offsets_i32": i32(offsets),
        "token_ids_i32": i32(cat("ids")),
        "loss_mask_u8": u8(cat("loss_mask")),
        "logprobs_f32": f32(cat("logprobs")),
        "token_rewards_f32": f32(cat("rewards")),
        "prompt_lengths_i32": i32([log["prompt_length"] for log in logs]),
        "turn_counts_i32": i32([len(log["turn_starts"]) for log in logs]),
        "turn_starts_i32": i32(cat("turn_starts")),
        "turn_ends_i32": i32(cat("turn_ends")),
    }


def group_frame(rollout: str, group: int, episodes: List[Dict[str, Any]], kept, score, tokens: bool = False) -> Dict[str, Any]:
    """A group frame; with ``tokens``, the token arrays too (not for groups with a cancelled
    episode: like the server's, a group carries token logs only when every episode has one)."""
    frame = {
        "type": "group",
        "rollout": rollout,
        "group": group,
        "seq": 0,
        "tag": episodes[0]["tag"],
        "seed": episodes[0]["seed"],
        "kept": kept,
        "score": score,
        "episodes": episodes,
        "env_ids_i32": i32([e["env_id"] for e in episodes]),
        "scores_f32": f32([e["score"] for e in episodes]),
        "rewards_f32": f32([e["reward"] for e in episodes]),
        "penalties_f32": f32([e["penalty"] for e in episodes]),
        "success_u8": u8([1 if e["success"] else 0 for e in episodes]),
    }
    if tokens and all(e["failure"] is None for e in episodes):
        frame.update(token_fields([token_log(e["env_id"], e["seed"], e["reward"]) for e in episodes]))
    return frame


def expected_batch(tags, group_size: int, mode: str, seed: int):
    """What the fake server produces for a request: (episodes of all groups, kept ids, metrics)."""
    episodes, kept, dropped = [], [], []
    g = 0
    for tag, n in tags:
        for _ in range(n):
            eps = [episode(g * group_size + i, g, tag, seed + g) for i in range(group_size)]
            episodes.append(eps)
            (kept if keep(mode, eps) else dropped).append(g)
            g += 1
    return episodes, kept, dropped


def keep(mode: str, eps: List[Dict[str, Any]]) -> bool:
    """The fake filter: validation keeps everything; train keeps groups with reward variance."""
    if mode == "val":
        return True
    return float(np.var([e["reward"] for e in eps])) > 0


def metrics_of(mode: str, all_eps: List[List[Dict[str, Any]]], kept: List[int]) -> Dict[str, float]:
    prefix = "val-env" if mode == "val" else "train"
    out: Dict[str, float] = {}
    tags = sorted({e["tag"] for eps in all_eps for e in eps})
    for tag in tags:
        flat = [e for eps in all_eps for e in eps if e["tag"] == tag and e["failure"] is None]
        out[f"{prefix}/{tag}/success"] = float(np.mean([e["success"] for e in flat])) if flat else float("nan")
    if mode == "train":
        out["rollout/filter_kept_ratio"] = len(kept) / max(1, len(all_eps))
    out["rollgym/failed_episodes"] = float(sum(1 for eps in all_eps for e in eps if e["failure"] is not None))
    return out


class _Rollout:
    def __init__(self, rid: str):
        self.id = rid
        self.buffered = 0
        self.batch: Optional[Dict[str, Any]] = None
        self.cancelled = False
        self.room = asyncio.Event()
        self.task: Optional[asyncio.Task] = None


class _Session:
    def __init__(self, server: "FakeServer"):
        self.server = server
        self.id = str(uuid.uuid4())
        self.ws = None
        self.credit = 0
        self.seq = 0
        self.outbox: collections.deque = collections.deque()
        self.inflight: Dict[str, Dict[str, Any]] = {}
        self.rollouts: Dict[str, _Rollout] = {}
        self.grace: Optional[asyncio.TimerHandle] = None
        self.sent_groups = 0  # on the current connection

    def attach(self, ws, resumed: bool) -> None:
        if self.grace is not None:
            self.grace.cancel()
            self.grace = None
        self.ws = ws
        self.credit = 0
        self.sent_groups = 0
        if resumed:
            again = sorted(self.inflight.values(), key=lambda e: e["seq"])
            self.inflight.clear()
            queued = {id(f) for f in self.outbox if "entry" not in f}
            batches = [{"frame": r.batch} for r in self.rollouts.values() if r.batch is not None and id(r.batch) not in queued]
            for item in reversed(again + batches):
                self.outbox.appendleft(item if "entry" in item else item["frame"])
        self.pump()

    def detach(self) -> None:
        self.ws = None
        grace = self.server.grace_s
        self.grace = asyncio.get_running_loop().call_later(grace, self.end)

    def end(self) -> None:
        for r in self.rollouts.values():
            r.cancelled = True
            r.room.set()
        self.server.sessions.pop(self.id, None)

    def enqueue_group(self, rid: str, group: int, frame: Dict[str, Any]) -> None:
        self.seq += 1
        frame = dict(frame, seq=self.seq)
        self.outbox.append({"entry": True, "rollout": rid, "group": group, "seq": self.seq, "frame": frame})
        self.pump()

    def enqueue(self, frame: Dict[str, Any]) -> None:
        self.outbox.append(frame)
        self.pump()

    def send_now(self, frame: Dict[str, Any]) -> None:
        if self.ws is not None:
            asyncio.ensure_future(self._send(self.ws, encode(frame)))

    async def _send(self, ws, data: bytes) -> None:
        try:
            await ws.send(data)
        except websockets.ConnectionClosed:
            pass

    def grant(self, n: int) -> None:
        self.credit += n
        self.server.credits += n
        self.pump()

    def ack(self, rid: str, groups: List[int], batch: bool) -> List[int]:
        unknown = []
        r = self.rollouts.get(rid)
        for g in groups:
            if self.inflight.pop(f"{rid}/{g}", None) is None:
                unknown.append(g)
                continue
            self.server.acks.append((rid, g))
            if r is not None:
                r.buffered -= 1
                r.room.set()
        if batch and r is not None and r.batch is not None:
            del self.rollouts[rid]
            self.server.batch_acks.append(rid)
        return unknown

    def pump(self) -> None:
        ws = self.ws
        if ws is None:
            return
        while self.outbox:
            head = self.outbox[0]
            if "entry" in head:
                if self.credit <= 0:
                    return
                self.credit -= 1
                self.outbox.popleft()
                self.inflight[f"{head['rollout']}/{head['group']}"] = head
                self.server.max_inflight = max(self.server.max_inflight, len(self.inflight))
                self.server.group_frames_sent += 1
                self.sent_groups += 1
                asyncio.ensure_future(self._send(ws, encode(head["frame"])))
                drop = self.server.drop_after_groups
                if drop is not None and self.sent_groups >= drop:
                    self.server.drop_after_groups = None
                    self.server.drops += 1
                    self.ws = None
                    asyncio.get_running_loop().call_soon(ws.transport.abort)
                    return
            else:
                self.outbox.popleft()
                asyncio.ensure_future(self._send(ws, encode(head)))


class FakeServer:
    def __init__(
        self,
        token: Optional[str] = None,
        grace_s: float = 60.0,
        max_frame_bytes: int = 1 << 20,
        max_buffered_groups: int = 64,
        group_delay: float = 0.0,
        protocol: int = PROTOCOL,
    ):
        self.token = token
        self.grace_s = grace_s
        self.max_frame_bytes = max_frame_bytes
        self.max_buffered_groups = max_buffered_groups
        self.group_delay = group_delay
        self.protocol = protocol
        self.sessions: Dict[str, _Session] = {}
        # hooks
        self.drop_after_groups: Optional[int] = None
        self.drop_on_frame: Optional[str] = None
        # counters
        self.max_inflight = 0
        self.credits = 0
        self.acks: List[tuple] = []
        self.batch_acks: List[str] = []
        self.client_frames: List[Dict[str, Any]] = []
        self.connections = 0
        self.drops = 0
        self.group_frames_sent = 0
        self.headers_seen: List[Dict[str, str]] = []
        self.errors_sent: List[Dict[str, Any]] = []
        self.stepped_sent: List[Dict[str, Any]] = []
        self.closing = False
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._thread: Optional[threading.Thread] = None
        self._server = None
        self._sockets: set = set()
        self.url = ""

    # -------------------------------------------------------------- lifecycle

    def __enter__(self) -> "FakeServer":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> str:
        ready = threading.Event()

        def main() -> None:
            self._loop = asyncio.new_event_loop()
            asyncio.set_event_loop(self._loop)
            self._loop.run_until_complete(self._serve())
            ready.set()
            self._loop.run_forever()
            self._loop.run_until_complete(self._loop.shutdown_asyncgens())
            self._loop.close()

        self._thread = threading.Thread(target=main, name="fake-rollgym", daemon=True)
        self._thread.start()
        ready.wait(10)
        return self.url

    async def _serve(self) -> None:
        self._server = await websockets.serve(
            self._handle,
            "127.0.0.1",
            0,
            process_request=self._process_request,
            compression=None,
            max_size=self.max_frame_bytes,
            ping_interval=None,
        )
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"ws://127.0.0.1:{port}/v1/rollouts"

    def call(self, fn, *args):
        """Run fn(*args) on the server's loop and wait for it (fn may be a coroutine function)."""
        async def run():
            result = fn(*args)
            if asyncio.iscoroutine(result):
                result = await result
            return result

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(30)

    def stop(self) -> None:
        if self._loop is None or self._loop.is_closed():
            return

        async def close() -> None:
            for s in list(self.sessions.values()):
                for r in s.rollouts.values():
                    if r.task is not None:
                        r.task.cancel()
            for ws in list(self._sockets):
                ws.transport.abort()
            self._server.close()
            try:
                await asyncio.wait_for(self._server.wait_closed(), 5)
            except asyncio.TimeoutError:
                pass
            others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in others:
                task.cancel()
            await asyncio.gather(*others, return_exceptions=True)

        try:
            self.call(close)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)

    def drop_all(self) -> None:
        """Abort every connection now (no close frame)."""

        def go() -> None:
            for ws in list(self._sockets):
                ws.transport.abort()

        self.call(go)

    def shutdown(self, reason: str = "fake server shutting down") -> None:
        """Like SIGTERM: `closing`, let rollouts finish, send their batches, close with 1001."""

        async def go() -> None:
            self.closing = True
            for ws in list(self._sockets):
                await ws.send(encode({"type": "closing", "reason": reason, "deadline_ms": 5000}))
            tasks = [r.task for s in self.sessions.values() for r in s.rollouts.values() if r.task is not None]
            await asyncio.gather(*tasks, return_exceptions=True)
            await asyncio.sleep(0.05)
            for ws in list(self._sockets):
                await ws.close(1001, reason)

        self.call(go)

    def expire_sessions(self) -> None:
        def go() -> None:
            for s in list(self.sessions.values()):
                s.end()

        self.call(go)

    # -------------------------------------------------------------- protocol

    async def _process_request(self, path: str, headers):
        self.headers_seen.append(dict(headers.raw_items()))
        if not path.startswith("/v1/rollouts"):
            return http.HTTPStatus.NOT_FOUND, [], b"no WebSocket route here; use /v1/rollouts\n"
        if self.closing:
            return http.HTTPStatus.SERVICE_UNAVAILABLE, [], b"shutting down\n"
        if self.token is not None and headers.get("Authorization") != f"Bearer {self.token}":
            return http.HTTPStatus.UNAUTHORIZED, [], b'{"error":{"code":401,"message":"a valid bearer token is required"}}'
        return None

    async def _handle(self, ws, path: Optional[str] = None) -> None:
        self.connections += 1
        self._sockets.add(ws)
        session: Optional[_Session] = None
        try:
            async for data in ws:
                if isinstance(data, str):
                    await ws.close(1002, "text frames are not part of the protocol")
                    return
                frame = msgpack.unpackb(data, raw=False)
                self.client_frames.append(frame)
                if self.drop_on_frame is not None and frame.get("type") == self.drop_on_frame:
                    self.drop_on_frame = None
                    self.drops += 1
                    ws.transport.abort()
                    return
                if session is None:
                    session = await self._handshake(ws, frame)
                    if session is None:
                        return
                    continue
                await self._dispatch(ws, session, frame)
        except websockets.ConnectionClosed:
            pass
        finally:
            self._sockets.discard(ws)
            if session is not None and session.ws is ws:
                session.detach()
            elif session is not None and session.ws is None and session.id in self.sessions and session.grace is None:
                session.detach()

    async def _handshake(self, ws, frame) -> Optional[_Session]:
        if frame.get("type") != "hello":
            await ws.close(4000, "the first frame must be hello")
            return None
        if frame.get("protocol") != self.protocol:
            await ws.send(encode({
                "type": "error",
                "code": "protocol_version",
                "message": f"client speaks protocol {frame.get('protocol')}, server speaks {self.protocol}",
            }))
            await ws.close(4001, "protocol version mismatch")
            return None
        resumed = False
        if "resume" in frame:
            session = self.sessions.get(frame["resume"])
            if session is None:
                await ws.send(encode({"type": "error", "code": "unknown_session", "message": f"session {frame['resume']} is unknown or expired"}))
                await ws.close(4002, "resume refused")
                return None
            resumed = True
        else:
            session = _Session(self)
            self.sessions[session.id] = session
        await ws.send(encode({
            "type": "welcome",
            "protocol": self.protocol,
            "server": "fake-rollgym/0.0.1",
            "session": session.id,
            "resumed": resumed,
            "envs": TAGS,
            "limits": {
                "max_frame_bytes": self.max_frame_bytes,
                "max_rollouts_per_connection": 16,
                "max_groups_per_rollout": 4096,
                "max_episodes_in_flight": 65536,
                "max_buffered_groups": self.max_buffered_groups,
                "resume_grace_s": self.grace_s,
            },
        }))
        session.attach(ws, resumed)
        return session

    async def _dispatch(self, ws, session: _Session, frame: Dict[str, Any]) -> None:
        kind = frame.get("type")

        def fail(code: str, message: str, **extra) -> None:
            self.errors_sent.append({"code": code, "message": message, **extra})
            session.send_now({"type": "error", "code": code, "message": message, **extra})

        if kind == "credit":
            session.grant(int(frame["groups"]))
        elif kind == "ack":
            unknown = session.ack(frame["rollout"], frame.get("groups", []), frame.get("batch") is True)
            if unknown:
                fail("unknown_group", f"groups {unknown} of rollout {frame['rollout']} are not awaiting acknowledgement", rollout=frame["rollout"])
        elif kind == "cancel":
            r = session.rollouts.get(frame["rollout"])
            if r is None:
                fail("unknown_rollout", f"no rollout {frame['rollout']!r} in this session", rollout=frame["rollout"])
            else:
                r.cancelled = True
                r.room.set()
        elif kind == "rollout":
            rid = frame.get("id")
            if not isinstance(frame.get("group_size"), int) or frame.get("mode") not in ("train", "val"):
                fail("bad_frame", "group_size or mode is wrong", field="group_size")  # no rollout id, like the real server
                return
            if self.closing:
                fail("shutting_down", "the server is shutting down", rollout=rid)
                return
            if rid in session.rollouts:
                fail("duplicate_id", f"rollout id {rid!r} is already in use in this session", rollout=rid)
                return
            unknown = [t["tag"] for t in frame["tags"] if t["tag"] not in TAGS]
            if unknown:
                fail("unknown_tag", f"unknown tag {unknown[0]!r}; known: {', '.join(TAGS)}", rollout=rid, field="tags")
                return
            r = _Rollout(rid)
            session.rollouts[rid] = r
            r.task = asyncio.ensure_future(self._run_rollout(session, r, frame))
        elif kind == "env_open":
            if frame["tag"] not in TAGS:
                fail("unknown_tag", f"unknown tag {frame['tag']!r}", field="tag")
                return
            env = _FakeEnvs(frame)
            session.envs = getattr(session, "envs", {})
            session.envs[frame["id"]] = env
            await ws.send(encode({"type": "env_opened", "id": frame["id"], "episodes": env.opened()}))
        elif kind == "env_step":
            env = getattr(session, "envs", {}).get(frame["id"])
            if env is None:
                fail("unknown_env", f"no env session {frame['id']!r} is open on this connection")
                return
            try:
                results = env.step(frame["responses"])
            except _EnvError as error:
                fail(error.code, str(error), field="responses")
                return
            stepped = {"type": "env_stepped", "id": frame["id"], "results": results}
            self.stepped_sent.append(stepped)
            await ws.send(encode(stepped))
        elif kind == "env_close":
            env = getattr(session, "envs", {}).pop(frame["id"], None)
            if env is None:
                fail("unknown_env", f"no env session {frame['id']!r} is open on this connection")
                return
            await ws.send(encode({"type": "env_closed", "id": frame["id"], **env.close()}))
        else:
            fail("unknown_type", f"unknown message type {kind!r}", field="type")

    async def _run_rollout(self, session: _Session, r: _Rollout, frame: Dict[str, Any]) -> None:
        tags = [(t["tag"], t["groups"]) for t in frame["tags"]]
        n = frame["group_size"]
        mode = frame["mode"]
        total_groups = sum(g for _, g in tags)
        seed = frame.get("seed", 123 if mode == "val" else 10000 + frame.get("step", 0) * total_groups)
        stream = frame["delivery"] == "stream"
        tokens = frame.get("tokens") is True
        all_eps: List[List[Dict[str, Any]]] = []
        kept: List[int] = []
        dropped: List[int] = []
        failed: List[int] = []
        g = 0
        done_eps = 0
        for tag, count in tags:
            for _ in range(count):
                if stream:
                    while r.buffered >= self.max_buffered_groups and not r.cancelled:
                        r.room.clear()
                        await r.room.wait()
                if self.group_delay and not r.cancelled:
                    await asyncio.sleep(self.group_delay)
                cancelled = r.cancelled
                eps = [episode(g * n + i, g, tag, seed + g, cancelled) for i in range(n)]
                all_eps.append(eps)
                if cancelled:
                    failed.append(g)
                    verdict = None
                else:
                    verdict = keep(mode, eps)
                    (kept if verdict else dropped).append(g)
                done_eps += n
                session.send_now({
                    "type": "progress", "rollout": r.id, "episodes_done": done_eps,
                    "episodes_total": total_groups * n, "groups_done": g + 1, "failed": len(failed) * n,
                })
                if stream:
                    r.buffered += 1
                    session.enqueue_group(r.id, g, group_frame(r.id, g, eps, None, None, tokens))
                g += 1
        if not stream:
            for gid in kept:
                r.buffered += 1
                eps = all_eps[gid]
                session.enqueue_group(r.id, gid, group_frame(r.id, gid, eps, True, float(np.var([e["reward"] for e in eps])), tokens))
        r.batch = {
            "type": "batch",
            "rollout": r.id,
            "kept": kept,
            "dropped": dropped,
            "failed_groups": failed,
            "metrics": metrics_of(mode, all_eps, kept),
            "episodes": total_groups * n,
            "failed": len(failed) * n,
        }
        session.enqueue(r.batch)


class _EnvError(Exception):
    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


class _FakeEnvs:
    """A toy env: the right answer is ACTIONS[seed % 4]; reward 1 and done when given,
    otherwise reward 0; at most `max_turn` (3) turns."""

    def __init__(self, frame: Dict[str, Any]):
        self.tag = frame["tag"]
        self.n = frame["group_size"]
        self.max_turn = frame.get("max_turn", 3)
        # Like rollgym: "new" (default) sends what changed since the previous chat, after `keep`.
        self.delta = frame.get("messages", "new") == "new"
        seed = frame.get("seed", 123 if frame.get("mode") == "val" else 10000)
        self.eps = []
        for g in range(frame["groups"]):
            for i in range(self.n):
                self.eps.append({
                    "env_id": g * self.n + i, "group": g, "seed": seed + g, "turn": 0, "done": False,
                    "success": False, "reward": 0.0,
                    "messages": [
                        {"role": "system", "content": "Guess the direction."},
                        {"role": "user", "content": f"Turn 1: seed {seed + g}"},
                    ],
                })

    def opened(self):
        return [{"env_id": e["env_id"], "group": e["group"], "seed": e["seed"], "messages": list(e["messages"])} for e in self.eps]

    def step(self, responses):
        for item in responses:
            if item["env_id"] >= len(self.eps):
                raise _EnvError("unknown_env", f"env_id {item['env_id']} is not open here")
            if self.eps[item["env_id"]]["done"]:
                raise _EnvError("episode_done", f"env_id {item['env_id']} is done; it takes no more responses")
        out = []
        for item in responses:
            e = self.eps[item["env_id"]]
            text = item["text"]
            parsed = [a for a in ACTIONS if f"<answer>{a}</answer>" in text]
            right = ACTIONS[e["seed"] % 4]
            reward = 1.0 if parsed == [right] else 0.0
            e["turn"] += 1
            e["reward"] += reward
            e["success"] = reward > 0
            e["done"] = e["success"] or e["turn"] >= self.max_turn
            # The last user message is rewritten, so `keep` is shorter than the previous chat
            # (as when a limited context window drops turns): the client must cut, then append.
            keep = len(e["messages"]) - 1
            e["messages"] = e["messages"][:keep] + [
                {"role": "user", "content": e["messages"][keep]["content"] + " (answered)"},
                {"role": "assistant", "content": "<think>" + text},
                {"role": "user", "content": f"Reward:\n{reward:g}\n\nTurn {e['turn'] + 1}"},
            ]
            result = {
                "env_id": e["env_id"], "parsed": parsed, "actions": parsed, "reward": reward,
                "reward_text": f"{reward:g}", "format_penalty": not parsed, "done": e["done"],
                "success": e["success"], "messages": None if e["done"] else e["messages"],
            }
            if self.delta and not e["done"]:
                result["messages"] = e["messages"][keep:]
                result["keep"] = keep
            out.append(result)
        return out

    def close(self):
        episodes = [{"env_id": e["env_id"], "group_id": e["group"], "tag": self.tag, "seed": e["seed"],
                     "success": e["success"], "reward": e["reward"], "penalty": 0.0, "score": e["reward"],
                     "num_actions": e["turn"], "failure": None} for e in self.eps]
        return {"episodes": episodes, "metrics": {f"train/{self.tag}/success": float(np.mean([e["success"] for e in self.eps]))}}
