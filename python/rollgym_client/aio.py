"""The asyncio client: :class:`AsyncClient`, :class:`RolloutStream`, :class:`EnvSession`.

One WebSocket per client (``ws://HOST:PORT/v1/rollouts``), binary msgpack frames, protocol 1
(``protocol/PROTOCOL.md``). A background reader task dispatches server frames; requests
wait on futures. Credit, acknowledgements, resume and duplicate suppression are automatic.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import logging
import operator
import time
import urllib.parse
import uuid
import warnings
from typing import Any, AsyncIterator, Callable, Deque, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import websockets
import websockets.exceptions as wsx

with warnings.catch_warnings():
    # websockets >= 14 made a new asyncio client the default and deprecated this one, which the
    # client is written for (extra_headers, InvalidStatusCode); it exists from 10 to 17 at least.
    warnings.simplefilter("ignore", DeprecationWarning)
    from websockets.legacy.client import connect as ws_connect

from . import codec
from .batch import Batch, Group, StepResult
from .errors import AuthError, ConnectionLost, ProtocolError, RollgymError

PROTOCOL_VERSION = 1
log = logging.getLogger("rollgym_client")

#: Close codes after which resuming is pointless (PROTOCOL.md, "Close codes").
_FATAL_CLOSES = {
    1001: "the server is shutting down",
    1002: "the server could not decode a frame from this client",
    1009: "a frame from this client was larger than the server's max_frame_bytes",
    4000: "the first frame was not hello",
    4001: "protocol version mismatch",
    4002: "resume refused (unknown or expired session)",
    4003: "another trainer session is connected (one trainer at a time)",
    4004: "the server reserves the trainer role and did not accept this client's trainer_token",
}

#: Error codes about weight updates (PROTOCOL.md "Weight updates"): they answer the oldest
#: begin_update/end_update waiting.
_UPDATE_ERRORS = ("update", "not_trainer")

#: vLLM's pause modes, as begin_update takes them.
PAUSE_MODES = ("keep", "wait", "abort")
#: Who pauses the engines in an update, as begin_update takes it: this server, or another
#: sharing them (a shard follower).
UPDATE_ENGINES = ("pause", "held_elsewhere")

_END = object()  # end-of-stream marker in a stream's queue

TagsArg = Union[str, Mapping[str, int], Sequence[Union[str, Tuple[str, int], Mapping[str, Any]]], None]


def ws_url(url: str) -> str:
    """Accept ``http(s)://host:port``, ``ws(s)://host:port`` or a full ``.../v1/rollouts`` URL."""
    if "://" not in url:
        url = "ws://" + url
    parts = urllib.parse.urlsplit(url)
    scheme = {"http": "ws", "https": "wss", "ws": "ws", "wss": "wss"}.get(parts.scheme.lower())
    if scheme is None:
        raise ValueError(f"url must be ws://, wss://, http:// or https://, not {url!r}")
    path = parts.path
    if path in ("", "/"):
        path = "/v1/rollouts"
    return urllib.parse.urlunsplit((scheme, parts.netloc, path, parts.query, ""))


MAX_SEED = 2**32 - 1  # seeds and steps are uint32 on the wire
MAX_VERSION_ORDINAL = 2**31 - 1  # token_versions_i32 carries ordinals as int32
MAX_TRAINER_TOKEN_LENGTH = 200


def _new_version(label: Any, ordinal: Any) -> Dict[str, Any]:
    """The ``version`` an update names; the server checks the ordinal against the one in force."""
    if not isinstance(label, str) or not label:
        raise TypeError("label must be a non-empty string, e.g. 'step-42'")
    return {"label": label, "ordinal": _int("ordinal", ordinal, 0, MAX_VERSION_ORDINAL)}


def _left_open(error: BaseException, update_id: str, label: str, ordinal: int) -> None:
    """Says which update a failed ``update()`` body left open, and how to end it."""
    note = (
        f"update {update_id!r} stays open: end it with end_update({update_id!r}, {label!r}, {ordinal}) "
        "once the weights are consistent"
    )
    log.warning("%s (%s: %s)", note, type(error).__name__, error)
    if hasattr(error, "add_note"):  # Python >= 3.11
        error.add_note(note)


def _int(name: str, value: Any, minimum: int = 0, maximum: Optional[int] = None) -> int:
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an integer, not a bool")
    try:
        number = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an integer, got {value!r}") from None
    if number < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {number}")
    if maximum is not None and number > maximum:
        raise ValueError(f"{name} must be <= {maximum}, got {number}")
    return int(number)


def _plain(value: Any) -> Any:
    """numpy scalars and tuples → plain msgpack-able Python values; None entries dropped."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "item") and type(value).__module__ == "numpy":
        return value.item()
    return value


def normalize_tags(tags: TagsArg, tag: Optional[str], groups: Union[int, Sequence[int], None]) -> List[Dict[str, Any]]:
    """The request's ``tags: [{tag, groups}]`` from the ways a user may say it:

    ``tag="A", groups=8`` · ``tags=["A", "B"], groups=[3, 2]`` (or one int for all) ·
    ``tags={"A": 3, "B": 2}`` · ``tags=[("A", 3), ("B", 2)]`` · ``tags=[{"tag": "A", "groups": 3}]``.
    """
    if tag is not None and tags is not None:
        raise TypeError("pass tag=... or tags=..., not both")
    if tag is None and tags is None:
        raise TypeError("a rollout needs tag=NAME (with groups=N) or tags=[...]")
    if tag is not None:
        tags = [tag]
    if isinstance(tags, str):
        tags = [tags]
    if isinstance(tags, Mapping):
        if groups is not None:
            raise TypeError("tags={tag: groups} already gives the group counts; drop groups=")
        out = [{"tag": str(t), "groups": _int(f"groups of {t}", n, 1)} for t, n in tags.items()]
    else:
        items = list(tags)
        names = [i for i in items if isinstance(i, str)]
        if names and len(names) != len(items):
            raise TypeError("tags must be all names, all (tag, groups) pairs, or all {tag, groups} dicts")
        if names:
            if groups is None:
                counts = [1] * len(names)
            elif isinstance(groups, Sequence):
                counts = list(groups)
                if len(counts) != len(names):
                    raise ValueError(f"{len(names)} tags but {len(counts)} group counts")
            else:
                counts = [groups] * len(names)
            out = [{"tag": n, "groups": _int(f"groups of {n}", c, 1)} for n, c in zip(names, counts)]
        else:
            if groups is not None:
                raise TypeError("tags with group counts already give the groups; drop groups=")
            out = []
            for item in items:
                if isinstance(item, Mapping):
                    name, count = item.get("tag"), item.get("groups")
                elif isinstance(item, (tuple, list)) and len(item) == 2:
                    name, count = item
                else:
                    raise TypeError(f"cannot read a tag from {item!r}; use (tag, groups) or {{'tag':..., 'groups':...}}")
                if not isinstance(name, str) or not name:
                    raise TypeError(f"tag names are non-empty strings, got {name!r}")
                out.append({"tag": name, "groups": _int(f"groups of {name}", count, 1)})
    if not out:
        raise ValueError("a rollout needs at least one tag")
    return out


class _Rollout:
    """Client-side state of one rollout: what arrived, what was handed out and acknowledged."""

    def __init__(self, rid: str, frame: Dict[str, Any], streaming: bool, on_progress):
        self.id = rid
        self.frame = frame
        self.delivery: str = frame["delivery"]
        self.streaming = streaming  # a RolloutStream hands groups to the user one by one
        self.on_progress = on_progress
        self.groups: Dict[int, Group] = {}
        self.arrival_epoch: Dict[int, int] = {}  # connection on which the group last arrived
        self.acked_epoch: Dict[int, int] = {}  # connection on which we acknowledged it
        self.delivered: set = set()  # handed to the user (or recorded in the batch)
        self.queue: asyncio.Queue = asyncio.Queue()
        self.future: asyncio.Future = asyncio.get_running_loop().create_future()
        self.future.add_done_callback(_consume_exception)
        self.batch: Optional[Batch] = None
        self.progress: Optional[Dict[str, Any]] = None
        self.confirmed = False  # the server has said something about it
        self.resent = False  # the request went out again after a resume
        self.abandoned = False  # nobody will consume more groups: acknowledge on arrival
        self.cancel_sent = False
        self.held: Optional[Dict[str, Any]] = None  # the server's latest ``held`` notice for it
        #: Endless streams: each window's verdict frame, by window number.
        self.windows: Dict[int, Dict[str, Any]] = {}
        # An endless stream forgets each group once handed out; its id and acknowledgement
        # state stay (a few hundred bytes per group), enough to drop resends.
        self.endless = bool(frame.get("endless"))

    @property
    def finished(self) -> bool:
        return self.future.done()


def _consume_exception(future: asyncio.Future) -> None:
    if not future.cancelled():
        future.exception()  # mark retrieved: stream rollouts raise through their queue instead


class _EnvWaiter:
    def __init__(self, reply: str, env_id: str):
        self.reply = reply
        self.id = env_id
        self.future: asyncio.Future = asyncio.get_running_loop().create_future()


class _UpdateWaiter:
    def __init__(self, reply: str, update_id: str):
        self.reply = reply
        self.id = update_id
        self.future: asyncio.Future = asyncio.get_running_loop().create_future()


class AsyncClient:
    """rollgym's trainer client for asyncio code.

    >>> async with AsyncClient("ws://127.0.0.1:8787") as client:
    ...     batch = await client.rollout(tag="CoordSokoban", groups=8, group_size=16)
    ...     batch.scores, batch.group_ids, batch.metrics["train/CoordSokoban/success"]

    Args:
        url: the server, as ``ws://host:port`` (``/v1/rollouts`` is added), ``http://host:port``
            or the full WebSocket URL.
        token: bearer token, sent as ``Authorization: Bearer TOKEN`` at the upgrade.
        client_name: the ``client`` field of ``hello``.
        credit: how many groups the server may have sent but not yet had acknowledged
            (per connection, shared by all rollouts). The client keeps this many granted.
        resume: reconnect and resume the session when the connection drops.
        reconnect_attempts: connection attempts per drop before giving up (also bounded by the
            server's ``resume_grace_s``).
        reconnect_backoff, reconnect_backoff_max: first and largest pause between attempts (s).
        open_timeout: seconds for the TCP/WebSocket handshake plus ``hello``/``welcome``.
        ping_interval, ping_timeout: WebSocket keepalive (``None`` disables it).
        max_size: largest frame accepted from the server, in bytes (``None``: no limit, the
            default; group frames carry whole episode records and may exceed the server's
            ``max_frame_bytes``, which limits frames *to* the server).
        trainer: say ``role: "trainer"`` in ``hello``: this session may bracket weight updates
            (:meth:`begin_update`, :meth:`end_update`, :meth:`update`). One trainer per server
            at a time.
        trainer_token: the server's trainer token, sent as ``hello.trainer_token`` (needs
            ``trainer=True``), for a server started with ``--trainer-token-file``; a server
            without one ignores it.
        protocol_version: the protocol this client speaks (tests only).
    """

    def __init__(
        self,
        url: str,
        token: Optional[str] = None,
        client_name: str = "rollgym-python",
        credit: int = 8,
        resume: bool = True,
        reconnect_attempts: int = 10,
        reconnect_backoff: float = 0.1,
        reconnect_backoff_max: float = 2.0,
        open_timeout: float = 10.0,
        ping_interval: Optional[float] = 20.0,
        ping_timeout: Optional[float] = 20.0,
        max_size: Optional[int] = None,
        protocol_version: int = PROTOCOL_VERSION,
        trainer: bool = False,
        trainer_token: Optional[str] = None,
    ):
        self.url = ws_url(url)
        self.token = token
        self.client_name = client_name
        self.credit = _int("credit", credit, 1)
        self.resume = resume
        self.reconnect_attempts = _int("reconnect_attempts", reconnect_attempts, 0)
        self.reconnect_backoff = reconnect_backoff
        self.reconnect_backoff_max = reconnect_backoff_max
        self.open_timeout = open_timeout
        self.ping_interval = ping_interval
        self.ping_timeout = ping_timeout
        self.max_size = max_size
        self.protocol_version = protocol_version
        self.trainer = bool(trainer)
        if trainer_token is not None:
            if not self.trainer:
                raise ValueError("trainer_token is for the trainer role: pass trainer=True too")
            if not isinstance(trainer_token, str) or not 1 <= len(trainer_token) <= MAX_TRAINER_TOKEN_LENGTH:
                raise ValueError(f"trainer_token must be a string of 1 to {MAX_TRAINER_TOKEN_LENGTH} characters")
        self.trainer_token = trainer_token
        #: The weight version in force, ``{"label", "ordinal"}``, as the server last said
        #: (trainer sessions: from ``welcome``, ``update_begun`` and ``update_ended``).
        self.version: Optional[Dict[str, Any]] = None

        #: The server's ``welcome`` frame (``server``, ``session``, ``envs``, ``limits``).
        self.welcome: Optional[Dict[str, Any]] = None
        #: The reason from the server's ``closing`` frame, once it announced a shutdown.
        self.closing_reason: Optional[str] = None
        #: Server errors that could not be tied to a request (logged as warnings too).
        self.unattributed_errors: List[RollgymError] = []
        #: The server's latest ``held`` notices (an open weight update whose trainer is gone
        #: holds a rollout), newest last; logged as warnings too.
        self.held_notices: Deque[Dict[str, Any]] = collections.deque(maxlen=100)
        #: How many times the session was resumed after a dropped connection.
        self.resumes = 0

        self._ws: Optional[websockets.WebSocketClientProtocol] = None
        self._epoch = 0
        self._reader: Optional[asyncio.Task] = None
        self._reconnect: Optional[asyncio.Task] = None
        self._connect_lock: Optional[asyncio.Lock] = None
        self._closed = False
        self._rollouts: Dict[str, _Rollout] = {}
        # Ids of recently finished rollouts (ids only: their data belongs to the user now).
        self._finished: "collections.OrderedDict[str, None]" = collections.OrderedDict()
        self._env_waiters: Deque[_EnvWaiter] = collections.deque()
        self._env_sessions: Dict[str, "EnvSession"] = {}
        self._update_waiters: Deque[_UpdateWaiter] = collections.deque()
        self._pending_acks: Dict[str, List[int]] = {}  # rollout id → groups to acknowledge (see _ack)
        self._ids = itertools.count(1)
        self._prefix = uuid.uuid4().hex[:8]

    # ------------------------------------------------------------------ properties

    @property
    def session(self) -> Optional[str]:
        """The server's session id (what ``hello {resume}`` names)."""
        return self.welcome.get("session") if self.welcome else None

    @property
    def server(self) -> Optional[str]:
        return self.welcome.get("server") if self.welcome else None

    @property
    def envs(self) -> List[str]:
        """Tags the server hosts."""
        return list(self.welcome.get("envs", [])) if self.welcome else []

    @property
    def limits(self) -> Dict[str, Any]:
        return dict(self.welcome.get("limits", {})) if self.welcome else {}

    @property
    def connected(self) -> bool:
        return self._ws is not None

    # ------------------------------------------------------------------ connection

    async def __aenter__(self) -> "AsyncClient":
        await self.connect()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def connect(self) -> "AsyncClient":
        """Open the connection and do the handshake (a new session)."""
        if self._closed:
            raise RollgymError("closed", "this client was closed; make a new one")
        if self._reconnect is not None and not self._reconnect.done():
            await asyncio.shield(self._reconnect)  # a resume is under way: use its outcome
        if self._connect_lock is None:
            self._connect_lock = asyncio.Lock()
        async with self._connect_lock:
            if self._ws is None:
                await self._open(resume=None)
        return self

    async def close(self) -> None:
        """Close the connection. Pending rollouts and env sessions fail with ConnectionLost."""
        if self._closed:
            return
        self._closed = True
        if self._reconnect is not None:
            self._reconnect.cancel()
        ws = self._ws
        self._ws = None
        if ws is not None:
            await ws.close(1000, "client closed")
        if self._reader is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._reader), 5)
            except (asyncio.TimeoutError, asyncio.CancelledError):
                self._reader.cancel()
        self._fail_everything(ConnectionLost("the client was closed", code="closed"))

    async def _ensure_connected(self) -> None:
        if self._closed:
            raise RollgymError("closed", "this client was closed; make a new one")
        if self._reconnect is not None and not self._reconnect.done():
            await asyncio.shield(self._reconnect)
        if self._ws is None:
            # Not connected (never was, or a previous session is gone): a fresh session.
            await self.connect()

    async def _open(self, resume: Optional[str]) -> None:
        headers = {"Authorization": f"Bearer {self.token}"} if self.token is not None else None
        try:
            ws = await ws_connect(
                self.url,
                extra_headers=headers,
                compression=None,
                max_size=self.max_size,
                # Group frames run to hundreds of KB: read them in big pieces, not 64 KiB ones.
                read_limit=2**22,
                open_timeout=self.open_timeout,
                ping_interval=self.ping_interval,
                ping_timeout=self.ping_timeout,
                close_timeout=2,
                user_agent_header=f"{self.client_name} (rollgym_client python websockets/{websockets.__version__})",
            )
        except wsx.InvalidStatusCode as error:
            status = error.status_code
            if status == 401:
                raise AuthError(
                    f"{self.url} refused the connection (HTTP 401): "
                    + ("the token was not accepted" if self.token is not None else "the server requires a token; pass token=...")
                ) from None
            if status == 404:
                raise ProtocolError(f"{self.url}: HTTP 404, no rollgym WebSocket route there (it is /v1/rollouts)") from None
            if status == 503:
                raise ConnectionLost(f"{self.url}: HTTP 503, the server is shutting down", code="shutting_down") from None
            raise ProtocolError(f"{self.url}: the WebSocket upgrade failed with HTTP {status}") from None
        except wsx.InvalidHandshake as error:
            raise ProtocolError(f"{self.url}: WebSocket handshake failed: {error}") from None
        except asyncio.TimeoutError:
            raise ConnectionLost(f"cannot connect to {self.url}: no handshake within {self.open_timeout} s", code="connect_failed") from None
        except OSError as error:
            raise ConnectionLost(f"cannot connect to {self.url}: {error.strerror or error}", code="connect_failed") from None

        try:
            hello: Dict[str, Any] = {"type": "hello", "protocol": self.protocol_version, "client": self.client_name}
            if resume is not None:
                hello["resume"] = resume
            if self.trainer:
                hello["role"] = "trainer"
                if self.trainer_token is not None:
                    hello["trainer_token"] = self.trainer_token
            await ws.send(codec.encode(hello))
            try:
                data = await asyncio.wait_for(ws.recv(), self.open_timeout)
            except asyncio.TimeoutError:
                raise ProtocolError(f"{self.url}: no welcome within {self.open_timeout} s of hello") from None
            except wsx.ConnectionClosed as closed:
                raise self._closed_during_handshake(closed.code, closed.reason) from None
            if isinstance(data, str):
                raise ProtocolError(f"{self.url}: the server sent a text frame; rollgym speaks binary msgpack")
            frame = codec.decode(data)
            if frame["type"] == "error":
                code = str(frame.get("code", "internal"))
                message = str(frame.get("message", ""))
                if code == "protocol_version":
                    raise ProtocolError(f"protocol version mismatch: {message}", code=code)
                if code == "unknown_session":
                    raise ConnectionLost(f"cannot resume: {message}", code=code)
                raise RollgymError(code, message, field=frame.get("field"))
            if frame["type"] != "welcome":
                raise ProtocolError(f"{self.url}: expected welcome, got {frame['type']!r}")
            if frame.get("protocol") != self.protocol_version:
                raise ProtocolError(
                    f"protocol version mismatch: client speaks protocol {self.protocol_version}, "
                    f"server {frame.get('server')} speaks {frame.get('protocol')}",
                    code="protocol_version",
                )
            if resume is not None and not frame.get("resumed"):
                raise ConnectionLost(f"the server did not resume session {resume}", code="unknown_session")
            if self._closed:
                raise ConnectionLost("the client was closed", code="closed")
        except BaseException:
            await ws.close()
            raise

        self.welcome = frame
        if "version" in frame:
            self.version = dict(frame["version"])
        self._ws = ws
        self._epoch += 1
        self._reader = asyncio.get_running_loop().create_task(self._read_loop(ws, self._epoch))
        await self._send({"type": "credit", "groups": self.credit})
        if resume is not None:
            # Requests the server may not have received before the drop go out again; for the
            # ones it has, it answers duplicate_id, which the client ignores.
            for r in list(self._rollouts.values()):
                r.resent = True
                await self._send(r.frame)
                if r.cancel_sent:
                    await self._send({"type": "cancel", "rollout": r.id})

    def _closed_during_handshake(self, code: Optional[int], reason: str) -> RollgymError:
        if code == 4001:
            return ProtocolError(f"protocol version mismatch: {reason}", code="protocol_version")
        if code == 4002:
            return ConnectionLost(f"resume refused: {reason}", code="unknown_session")
        if code == 4003:
            return RollgymError("not_trainer", f"another trainer is connected: {reason}")
        if code == 4004:
            return RollgymError("not_trainer", f"the trainer token was refused: {reason}", field="trainer_token")
        return ProtocolError(f"{self.url} closed the connection during the handshake (code {code}: {reason or 'no reason'})")

    async def _send(self, frame: Dict[str, Any]) -> bool:
        """Send on the current connection; False when there is none (the frame is dropped:
        credit, acks and requests are re-established on resume)."""
        data = codec.encode(frame)
        limit = self.limits.get("max_frame_bytes")
        if isinstance(limit, int) and len(data) > limit:
            raise RollgymError(
                "limit",
                f"this {frame['type']} frame is {len(data)} bytes; the server accepts at most "
                f"max_frame_bytes={limit} (split it into smaller requests)",
            )
        ws = self._ws
        if ws is None:
            return False
        try:
            await ws.send(data)
            return True
        except wsx.ConnectionClosed:
            return False

    async def _read_loop(self, ws, epoch: int) -> None:
        try:
            async for data in ws:
                if isinstance(data, str):
                    log.warning("server sent a text frame; closing")
                    await ws.close(1002, "text frames are not part of the protocol")
                    break
                try:
                    self._dispatch(codec.decode(data), epoch)
                except Exception:  # a bad frame must not stop the reader
                    log.exception("failed to handle a server frame")
        except wsx.ConnectionClosed:
            pass
        except Exception:
            log.exception("reader failed")
        finally:
            if epoch == self._epoch:
                self._on_disconnect(ws)

    def _on_disconnect(self, ws) -> None:
        self._ws = None
        code, reason = ws.close_code, ws.close_reason
        if self._closed:
            return
        what = f"code {code}" + (f": {reason}" if reason else "")
        self._fail_envs(
            ConnectionLost(f"the connection dropped ({what}); env sessions live on one connection and are gone")
        )
        if code in _FATAL_CLOSES or not self.resume or self.session is None:
            if code == 1001:
                why = f"the server shut down ({self.closing_reason or reason or 'no reason given'})"
            elif code in _FATAL_CLOSES:
                why = f"the server closed the connection: {_FATAL_CLOSES[code]} ({what})"
            else:
                why = f"the connection dropped ({what}) and resume is off"
            self._fail_rollouts(ConnectionLost(why))
            return
        log.warning("connection to %s dropped (%s); resuming session %s", self.url, what, self.session)
        self._reconnect = asyncio.get_running_loop().create_task(self._resume(time.monotonic()))

    async def _resume(self, dropped_at: float) -> None:
        grace = float(self.limits.get("resume_grace_s", 60))
        deadline = dropped_at + grace
        delay = self.reconnect_backoff
        last: Optional[BaseException] = None
        attempts = 0
        while attempts < self.reconnect_attempts and time.monotonic() < deadline and not self._closed:
            attempts += 1
            try:
                await self._open(resume=self.session)
                self.resumes += 1
                log.warning("resumed session %s after %d attempt(s)", self.session, attempts)
                return
            except ConnectionLost as error:
                last = error
                if error.code == "unknown_session":
                    break
            except RollgymError as error:  # auth, protocol version, or another refusal: final
                last = error
                break
            except (OSError, asyncio.TimeoutError, wsx.WebSocketException) as error:
                last = error
            except Exception as error:  # never leave rollouts waiting on a dead task
                log.exception("resume attempt failed")
                last = error
                break
            pause = min(delay, max(0.0, deadline - time.monotonic()))
            await asyncio.sleep(pause)
            delay = min(delay * 2, self.reconnect_backoff_max)
        if self._closed:
            return
        session = self.session
        self.welcome = None  # the next request starts a new session
        self._fail_rollouts(
            ConnectionLost(
                f"lost the connection to {self.url} and could not resume session {session} "
                f"({attempts} attempt(s), grace {grace:g} s): {last or 'grace period over'}"
            )
        )

    # ------------------------------------------------------------------ dispatch

    def _dispatch(self, frame: Dict[str, Any], epoch: int) -> None:
        kind = frame["type"]
        if kind == "group":
            self._on_group(frame, epoch)
        elif kind == "batch":
            self._on_batch(frame)
        elif kind == "progress":
            r = self._rollouts.get(frame.get("rollout"))
            if r is not None:
                r.confirmed = True
                r.progress = frame
                if r.on_progress is not None:
                    try:
                        r.on_progress(frame)
                    except Exception:
                        log.exception("on_progress callback failed")
        elif kind == "window":
            self._on_window(frame)
        elif kind == "held":
            self._on_held(frame)
        elif kind in ("update_begun", "update_ended"):
            self._on_update_reply(frame)
        elif kind == "error":
            self._on_error(frame)
        elif kind in ("env_opened", "env_stepped", "env_closed"):
            self._on_env_reply(frame)
        elif kind == "closing":
            self.closing_reason = str(frame.get("reason", "server shutting down"))
            log.warning("server is shutting down: %s (deadline %s ms)", self.closing_reason, frame.get("deadline_ms"))
        elif kind == "welcome":
            log.warning("unexpected second welcome frame; ignored")
        else:
            log.debug("ignoring unknown frame type %r", kind)

    def _on_group(self, frame: Dict[str, Any], epoch: int) -> None:
        rid = frame.get("rollout")
        gid = frame.get("group")
        r = self._rollouts.get(rid)
        if r is None or not isinstance(gid, int):
            # A resend for a rollout that is over (or one this client never asked for): the
            # user has what they need; acknowledge so the server can let go of it.
            if rid not in self._finished:
                log.warning("group %r of unknown rollout %r; acknowledged and dropped", gid, rid)
            if isinstance(rid, str) and isinstance(gid, int):
                self._spawn(self._ack_raw(rid, gid))
            return
        r.confirmed = True
        r.arrival_epoch[gid] = epoch
        if gid in r.groups or gid in r.delivered:  # a resent group: the user has it (or will get it) already
            if gid in r.delivered:
                self._ack(r, gid)
            return
        try:
            group = Group.from_frame(frame)
        except ProtocolError as error:
            self._fail(r, error)
            self._spawn(self._ack_raw(rid, gid))
            return
        r.groups[gid] = group
        if r.streaming and not r.abandoned and not r.finished:
            r.queue.put_nowait(group)
        else:
            r.delivered.add(gid)
            self._ack(r, gid)

    def _on_batch(self, frame: Dict[str, Any]) -> None:
        rid = frame.get("rollout")
        if isinstance(rid, str):
            # The groups' acknowledgements go before the verdict's, as the groups arrived.
            self._flush_acks(self._epoch)
            self._spawn(self._send({"type": "ack", "rollout": rid, "groups": [], "batch": True}))
        r = self._rollouts.get(rid)
        if r is None:
            return  # a resent verdict for a rollout already finished
        r.confirmed = True
        if r.delivery == "batch":
            missing = [g for g in frame.get("kept", []) if g not in r.groups]
            if missing:
                self._fail(r, ProtocolError(f"the verdict keeps groups {missing} that never arrived", rollout=rid))
                return
        batch = Batch(rid, r.delivery, r.groups.values(), frame)
        r.batch = batch
        self._retire(r)
        if not r.future.done():
            r.future.set_result(batch)
        r.queue.put_nowait(_END)

    def _on_window(self, frame: Dict[str, Any]) -> None:
        """An endless stream's window verdict: kept on the window's groups still held."""
        r = self._rollouts.get(frame.get("rollout"))
        window = frame.get("window")
        if r is None or not isinstance(window, int) or window in r.windows:
            return  # a resend (the last windows come again after a resume)
        r.confirmed = True
        r.windows[window] = frame
        kept = set(frame.get("kept", []))
        failed = set(frame.get("failed_groups", []))
        first, size = int(frame.get("first", 0)), int(frame.get("groups", 0))
        for gid in range(first, first + size):
            group = r.groups.get(gid)
            if group is not None:
                group.kept = gid in kept
                group.failed = gid in failed

    def _on_update_reply(self, frame: Dict[str, Any]) -> None:
        if "version" in frame:
            self.version = dict(frame["version"])
        for waiter in self._update_waiters:
            if waiter.reply == frame["type"] and waiter.id == frame.get("id"):
                self._update_waiters.remove(waiter)
                if not waiter.future.done():
                    waiter.future.set_result(frame)
                return
        log.warning("unexpected %s for update %r", frame["type"], frame.get("id"))

    def _on_error(self, frame: Dict[str, Any]) -> None:
        code = str(frame.get("code", "internal"))
        rid = frame.get("rollout")
        error = RollgymError(code, str(frame.get("message", "")), rollout=rid, field=frame.get("field"))
        if code in _UPDATE_ERRORS:
            # An update that expired (max_update_s) is told unasked: only an end_update waits for that.
            expired = frame.get("field") == "max_update_s"
            waiter = next((w for w in self._update_waiters if not expired or w.reply == "update_ended"), None)
            if waiter is None:
                log.warning("server: %s", error)
                self.unattributed_errors.append(error)
                return
            self._update_waiters.remove(waiter)
            if not waiter.future.done():
                waiter.future.set_exception(error)
            return
        if rid is not None:
            r = self._rollouts.get(rid)
            if r is None:
                log.info("server error for rollout %r, which is no longer pending: %s", rid, error)
                return
            if code == "unknown_group":
                log.info("server: %s", error)  # an acknowledgement raced a resend; harmless
                return
            if code == "duplicate_id" and r.resent:
                return  # the server had the request before the drop; it carries on
            self._fail(r, error)
            return
        # An env session's error names it: its oldest waiting request (each session's requests
        # are answered in order). Without an id, the oldest waiting env request.
        sid = frame.get("id")
        waiter = next((w for w in self._env_waiters if w.id == sid), None) if sid is not None else None
        if waiter is None and self._env_waiters:
            waiter = self._env_waiters[0]
        if waiter is not None:
            self._env_waiters.remove(waiter)
            if not waiter.future.done():
                waiter.future.set_exception(error)
            return
        # A rollout request the server could not validate names no rollout (see README,
        # "Protocol notes"): blame the newest rollout the server has not spoken about yet.
        unconfirmed = [r for r in self._rollouts.values() if not r.confirmed]
        if unconfirmed and code in ("bad_frame", "unknown_type", "limit", "unknown_tag"):
            target = unconfirmed[-1]
            self._fail(target, RollgymError(code, error.message, rollout=target.id, field=error.field))
            return
        log.warning("server error not tied to a request: %s", error)
        self.unattributed_errors.append(error)

    def _on_held(self, frame: Dict[str, Any]) -> None:
        """An open weight update whose trainer is gone holds a rollout (PROTOCOL.md "Weight
        updates"): a notice, logged and kept; the rollout goes on."""
        log.warning("server: %s", frame.get("message"))
        self.held_notices.append(frame)
        r = self._rollouts.get(frame.get("rollout"))
        if r is not None:
            r.confirmed = True
            r.held = frame

    @staticmethod
    def _held_by_update(r: _Rollout) -> str:
        """Why a rollout may be late: the server's last ``held`` notice for it, or nothing."""
        return "" if r.held is None else f"; the server said: {r.held.get('message')}"

    def _on_env_reply(self, frame: Dict[str, Any]) -> None:
        for waiter in self._env_waiters:
            if waiter.reply == frame["type"] and waiter.id == frame.get("id"):
                self._env_waiters.remove(waiter)
                if not waiter.future.done():
                    waiter.future.set_result(frame)
                return
        log.warning("unexpected %s for env session %r", frame["type"], frame.get("id"))

    # ------------------------------------------------------------------ acks and failures

    def _spawn(self, coro) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        task.add_done_callback(_log_task_error)

    async def _ack_raw(self, rid: str, gid: int) -> None:
        await self._send({"type": "ack", "rollout": rid, "groups": [gid]})
        await self._send({"type": "credit", "groups": 1})

    def _ack(self, r: _Rollout, gid: int) -> None:
        """Acknowledge a group once per connection it arrived on, and grant one more credit.

        Acknowledgements made in one pass of the event loop go out together, as one ``ack``
        per rollout and one ``credit``: a consumer that takes several queued groups at once
        costs the socket two frames, not two per group."""
        if r.acked_epoch.get(gid) == self._epoch or r.arrival_epoch.get(gid) != self._epoch:
            return  # already acked here, or it arrived on a dead connection (it will be resent)
        r.acked_epoch[gid] = self._epoch
        if not self._pending_acks:
            # Runs in the next pass, long before a new connection could be made (that takes
            # network round trips), so every pending acknowledgement is for this epoch.
            asyncio.get_running_loop().call_soon(self._flush_acks, self._epoch)
        self._pending_acks.setdefault(r.id, []).append(gid)

    def _flush_acks(self, epoch: int) -> None:
        acks, self._pending_acks = self._pending_acks, {}
        if acks and epoch == self._epoch:  # else their connection is gone: resent groups get acked anew
            self._spawn(self._send_acks(acks))

    async def _send_acks(self, acks: Dict[str, List[int]]) -> None:
        for rid, gids in acks.items():
            await self._send({"type": "ack", "rollout": rid, "groups": gids})
        await self._send({"type": "credit", "groups": sum(len(gids) for gids in acks.values())})

    def _deliver(self, r: _Rollout, group: Group) -> None:
        r.delivered.add(group.group)
        self._ack(r, group.group)
        if r.endless:
            r.groups.pop(group.group, None)

    def _retire(self, r: _Rollout) -> None:
        self._rollouts.pop(r.id, None)
        self._finished[r.id] = None  # remembered a while to answer late resends quietly
        while len(self._finished) > 256:
            self._finished.popitem(last=False)

    def _fail(self, r: _Rollout, error: BaseException) -> None:
        self._retire(r)
        r.abandoned = True
        if not r.future.done():
            r.future.set_exception(error)
        r.queue.put_nowait(error)

    def _fail_rollouts(self, error: ConnectionLost) -> None:
        for r in list(self._rollouts.values()):
            self._fail(r, ConnectionLost(error.message, code=error.code, rollout=r.id))

    def _fail_envs(self, error: RollgymError) -> None:
        while self._update_waiters:
            waiter = self._update_waiters.popleft()
            if not waiter.future.done():
                waiter.future.set_exception(error)
        while self._env_waiters:
            waiter = self._env_waiters.popleft()
            if not waiter.future.done():
                waiter.future.set_exception(error)
        for env in self._env_sessions.values():
            env._lost = error
        self._env_sessions.clear()

    def _fail_everything(self, error: RollgymError) -> None:
        self._fail_envs(error)
        self._fail_rollouts(error)

    # ------------------------------------------------------------------ rollouts

    def _new_rollout(
        self,
        streaming: bool,
        tags: TagsArg,
        tag: Optional[str],
        groups: Union[int, Sequence[int], None],
        group_size: Optional[int],
        mode: str,
        step: Optional[int],
        seed: Optional[int],
        delivery: str,
        rollout_id: Optional[str],
        on_progress: Optional[Callable[[Dict[str, Any]], None]],
        options: Dict[str, Any],
    ) -> _Rollout:
        if group_size is None:
            raise TypeError("group_size is required (episodes per group, e.g. group_size=16)")
        if mode not in ("train", "val"):
            raise ValueError(f'mode must be "train" or "val", not {mode!r}')
        if delivery not in ("batch", "stream"):
            raise ValueError(f'delivery must be "batch" or "stream", not {delivery!r}')
        rid = rollout_id if rollout_id is not None else f"py-{self._prefix}-{next(self._ids)}"
        if not isinstance(rid, str) or not rid:
            raise TypeError("rollout_id must be a non-empty string")
        if rid in self._rollouts:
            raise ValueError(f"rollout id {rid!r} is already running on this client")
        frame: Dict[str, Any] = {
            "type": "rollout",
            "id": rid,
            "tags": normalize_tags(tags, tag, groups),
            "mode": mode,
            "group_size": _int("group_size", group_size, 1),
            "delivery": delivery,
        }
        if step is not None:
            frame["step"] = _int("step", step, 0, MAX_SEED)
        if seed is not None:
            frame["seed"] = _int("seed", seed, 0, MAX_SEED)
        for key, value in options.items():
            if value is not None:
                frame[key] = _plain(value)
        r = _Rollout(rid, frame, streaming, on_progress)
        self._finished.pop(rid, None)
        return r

    async def _start(self, r: _Rollout) -> None:
        await self._ensure_connected()
        codec_size_check = codec.encode(r.frame)  # fail before registering when too large
        limit = self.limits.get("max_frame_bytes")
        if isinstance(limit, int) and len(codec_size_check) > limit:
            raise RollgymError("limit", f"the rollout request is {len(codec_size_check)} bytes; max_frame_bytes is {limit}")
        self._rollouts[r.id] = r
        await self._send(r.frame)

    async def rollout(
        self,
        tags: TagsArg = None,
        *,
        tag: Optional[str] = None,
        groups: Union[int, Sequence[int], None] = None,
        group_size: Optional[int] = None,
        mode: str = "train",
        step: Optional[int] = None,
        seed: Optional[int] = None,
        delivery: str = "batch",
        rollout_id: Optional[str] = None,
        on_progress: Optional[Callable[[Dict[str, Any]], None]] = None,
        timeout: Optional[float] = None,
        **options: Any,
    ) -> Batch:
        """Play a batch and return it once the server's verdict arrives.

        Args:
            tags / tag / groups: which env groups (see :func:`normalize_tags`).
            group_size: episodes per group.
            mode: ``"train"`` (filtered, seed schedule from ``step``) or ``"val"``.
            step: RAGEN's training step (train seed = ``seed.train + step * groups``).
            seed: explicit seed of group 0 (overrides the schedule).
            delivery: ``"batch"`` (the server sends kept groups after the filter) or
                ``"stream"`` (every group as it finishes; the Batch then holds all of them).
            rollout_id: the request's id (default: generated).
            on_progress: called with each ``progress`` frame.
            timeout: seconds; on expiry the rollout is cancelled and ``RollgymError("timeout")`` raised.
            **options: more request fields, sent as given: ``max_turn``, ``max_actions_per_turn``,
                ``think``, ``sampling={temperature, top_p, top_k, min_p, max_tokens}``,
                ``filter={strategy, value, top_p_mode, type, include_zero, metric}``,
                ``tokens=True`` (token in, token out: every group carries its episodes' token
                logs, ``Group.tokens``/``Batch.tokens``, ready for :func:`pack_batch`; needs a
                server running against a remote engine).

        Raises:
            RollgymError: the server refused the request (``unknown_tag``, ``limit``, ``bad_frame``...).
            ConnectionLost: the connection dropped and the session could not be resumed.
        """
        r = self._new_rollout(False, tags, tag, groups, group_size, mode, step, seed, delivery, rollout_id, on_progress, options)
        await self._start(r)
        try:
            if timeout is None:
                return await asyncio.shield(r.future)
            return await asyncio.wait_for(asyncio.shield(r.future), timeout)
        except asyncio.TimeoutError:
            await self._abandon(r)
            raise RollgymError("timeout", f"no verdict within {timeout} s; the rollout was cancelled{self._held_by_update(r)}", rollout=r.id) from None
        except asyncio.CancelledError:
            await self._abandon(r)
            raise

    def stream(
        self,
        tags: TagsArg = None,
        *,
        tag: Optional[str] = None,
        groups: Union[int, Sequence[int], None] = None,
        group_size: Optional[int] = None,
        mode: str = "train",
        step: Optional[int] = None,
        seed: Optional[int] = None,
        delivery: str = "stream",
        rollout_id: Optional[str] = None,
        on_progress: Optional[Callable[[Dict[str, Any]], None]] = None,
        **options: Any,
    ) -> "RolloutStream":
        """A rollout whose groups are handed out as they arrive:

        >>> stream = client.stream(tag="CoordSokoban", groups=64, group_size=16)
        >>> async for group in stream:      # each group exactly once, even across a resume
        ...     train_on(group.scores, group.episodes)
        >>> stream.batch.kept, stream.batch.metrics

        Each group is acknowledged when it is handed out, so at most ``credit`` groups wait in
        this process. Groups carry ``kept=None`` until the verdict; after the loop
        ``stream.batch`` has the verdict (and sets ``kept`` on the groups already handed out).
        Leaving the loop early and calling ``await stream.aclose()`` (or using
        ``async with``) cancels the rollout on the server.

        ``endless=True`` asks for a stream without an end (PROTOCOL.md "Endless streams"): the
        tags' groups form one window, windows follow each other (group *k* plays ``seed + k``)
        until :meth:`RolloutStream.cancel`, and ``stream.windows`` collects each window's
        verdict (RAGEN's filter over that window; it also sets ``kept`` on the window's groups
        not yet handed out). Pacing options: ``in_flight`` (groups running at once),
        ``max_staleness`` and ``groups_per_step`` (the capacity rule of PROTOCOL.md
        "Staleness"), ``strict_staleness`` (with ``max_staleness``: no group arrives older
        than S, by holding finished groups back, never by dropping them), ``drop_older_than``.
        Groups carry ``min_version``/``max_version`` (0 until a trainer has begun an update).
        """
        r = self._new_rollout(True, tags, tag, groups, group_size, mode, step, seed, delivery, rollout_id, on_progress, options)
        return RolloutStream(self, r)

    # ------------------------------------------------------------------ weight updates

    async def _update_request(self, frame: Dict[str, Any], reply: str) -> Dict[str, Any]:
        await self._ensure_connected()
        waiter = _UpdateWaiter(reply, frame["id"])
        self._update_waiters.append(waiter)
        if not await self._send(frame):
            self._update_waiters.remove(waiter)
            raise ConnectionLost("not connected; send the update frame again once reconnected")
        return await waiter.future

    async def begin_update(
        self,
        update_id: Optional[str] = None,
        mode: Optional[str] = None,
        label: Optional[str] = None,
        ordinal: Optional[int] = None,
        engines: Optional[str] = None,
    ) -> Dict[str, Any]:
        """Trainer only: close the server's admission and pause every engine (``mode``: one of
        ``"keep"``, ``"wait"``, ``"abort"``; the server's default when ``None``). Returns the
        ``update_begun`` frame (``id``, ``version`` in force, ``paused``, ``aborted``,
        ``out_of_routing``, ``in_flight``) once all are paused; move the weights then.

        ``label`` and ``ordinal`` (both or neither) announce the version :meth:`end_update`
        will name: the server checks the ordinal now, before any engine pauses, and
        ``end_update`` must then name the same version.

        ``engines="held_elsewhere"``: another server sharing the engines pauses them (a shard
        follower, :class:`~rollgym_client.sharded.ShardedClient`); this one only closes its
        admission and moves its version, and asks the engines nothing (PROTOCOL.md "Engines held
        elsewhere").

        Raises:
            RollgymError: ``not_trainer`` (the client was not made with ``trainer=True``) or
                ``update`` (one is open already, pausing failed, an announced ordinal not
                greater than ``client.version["ordinal"]`` (``field == "version.ordinal"``)...),
                with the server's message.
        """
        if mode is not None and mode not in PAUSE_MODES:
            raise ValueError(f"mode must be one of {PAUSE_MODES}, not {mode!r}")
        if engines is not None and engines not in UPDATE_ENGINES:
            raise ValueError(f"engines must be one of {UPDATE_ENGINES}, not {engines!r}")
        if (label is None) != (ordinal is None):
            raise TypeError("label and ordinal announce the new version together: pass both or neither")
        uid = update_id if update_id is not None else f"update-{self._prefix}-{next(self._ids)}"
        frame: Dict[str, Any] = {"type": "begin_update", "id": uid}
        if mode is not None:
            frame["mode"] = mode
        if label is not None:
            frame["version"] = _new_version(label, ordinal)
        if engines is not None:
            frame["engines"] = engines
        return await self._update_request(frame, "update_begun")

    async def end_update(self, update_id: str, label: str, ordinal: int) -> Dict[str, Any]:
        """Trainer only: the new weights are in place as version ``label`` with ``ordinal``
        (greater than the current one, at most ``MAX_VERSION_ORDINAL`` = 2**31 - 1). Resumes
        the engines and admission; returns the ``update_ended`` frame. An error leaves the
        update open (send a corrected one), except ``update`` with ``field == "max_update_s"``:
        the update was open longer than the server's ``limits["max_update_s"]`` and the engines
        resumed at the old version (begin a new one)."""
        frame = {"type": "end_update", "id": update_id, "version": _new_version(label, ordinal)}
        return await self._update_request(frame, "update_ended")

    @contextlib.asynccontextmanager
    async def update(self, label: str, ordinal: int, mode: Optional[str] = None) -> AsyncIterator[Dict[str, Any]]:
        """Brackets a weight update: ``begin_update`` announcing ``(label, ordinal)`` on entry
        (yields ``update_begun``), ``end_update(label, ordinal)`` on a normal exit. An ordinal
        not greater than the one in force is refused at entry, before any engine pauses and
        before the body runs: count from ``client.version["ordinal"]``.

        >>> next_ordinal = client.version["ordinal"] + 1
        >>> async with client.update(f"step-{next_ordinal}", next_ordinal):
        ...     push_weights()          # NCCL, disk, vLLM's weight-transfer routes...

        When the body raises, the update is left open and the error propagates (logged, and
        noted on the error on Python >= 3.11, with the update's id): end it with
        :meth:`end_update` once the weights are consistent (the server resumes the engines at
        the old version only when this session ends, or once the update has been open for
        ``limits["max_update_s"]``).
        """
        begun = await self.begin_update(mode=mode, label=label, ordinal=ordinal)
        try:
            yield begun
        except BaseException as error:
            _left_open(error, begun["id"], label, ordinal)
            raise
        await self.end_update(begun["id"], label, ordinal)

    async def cancel(self, rollout_id: str) -> None:
        """Cancel a running rollout: no new turns, in-flight inference aborted. Its
        ``rollout()``/stream still ends normally with a Batch (cut episodes have
        ``failure: "cancelled"``)."""
        r = self._rollouts.get(rollout_id)
        if r is None:
            if rollout_id in self._finished:
                return
            raise RollgymError("unknown_rollout", f"no running rollout {rollout_id!r} on this client", rollout=rollout_id)
        r.cancel_sent = True
        await self._send({"type": "cancel", "rollout": rollout_id})

    async def _abandon(self, r: _Rollout) -> None:
        """Nobody wants the rest: cancel on the server, acknowledge whatever still arrives."""
        r.abandoned = True
        while not r.queue.empty():
            item = r.queue.get_nowait()
            if isinstance(item, Group):
                self._deliver(r, item)
        if not r.finished and r.id in self._rollouts:
            r.cancel_sent = True
            try:
                await self._send({"type": "cancel", "rollout": r.id})
            except RollgymError:
                pass

    # ------------------------------------------------------------------ env hosting

    async def _env_request(self, frame: Dict[str, Any], reply: str, epoch: Optional[int] = None) -> Dict[str, Any]:
        if epoch is not None and epoch != self._epoch:
            raise ConnectionLost("the connection this env session was opened on is gone; open a new one")
        waiter = _EnvWaiter(reply, frame["id"])
        data_ok = codec.encode(frame)
        limit = self.limits.get("max_frame_bytes")
        if isinstance(limit, int) and len(data_ok) > limit:
            raise RollgymError(
                "limit", f"this {frame['type']} frame is {len(data_ok)} bytes; max_frame_bytes is {limit}; send fewer responses per step"
            )
        self._env_waiters.append(waiter)
        if not await self._send(frame):
            self._env_waiters.remove(waiter)
            raise ConnectionLost("not connected; env sessions do not survive a dropped connection")
        return await waiter.future

    async def open_envs(
        self,
        tag: str,
        groups: int = 1,
        group_size: int = 1,
        seed: Optional[int] = None,
        mode: str = "train",
        think: Optional[bool] = True,
        step: Optional[int] = None,
        max_turn: Optional[int] = None,
        max_actions_per_turn: Optional[int] = None,
        env_id: Optional[str] = None,
    ) -> "EnvSession":
        """Host env groups for a trainer that runs inference itself (RAGEN's env manager as a
        service). Returns an :class:`EnvSession` whose ``episodes`` hold each episode's
        first-turn chat. Env sessions live on one connection: a dropped connection ends them
        (``ConnectionLost``)."""
        await self._ensure_connected()
        if mode not in ("train", "val"):
            raise ValueError(f'mode must be "train" or "val", not {mode!r}')
        sid = env_id if env_id is not None else f"env-{self._prefix}-{next(self._ids)}"
        frame: Dict[str, Any] = {
            "type": "env_open",
            "id": sid,
            "tag": tag,
            "groups": _int("groups", groups, 1),
            "group_size": _int("group_size", group_size, 1),
            "mode": mode,
        }
        for key, value in (("seed", seed), ("step", step), ("max_turn", max_turn), ("max_actions_per_turn", max_actions_per_turn)):
            if value is not None:
                frame[key] = _int(key, value, 0, MAX_SEED) if key in ("seed", "step") else _int(key, value, 1)
        if think is not None:
            frame["think"] = bool(think)
        epoch = self._epoch
        reply = await self._env_request(frame, "env_opened")
        session = EnvSession(self, sid, tag, reply.get("episodes", []), epoch)
        self._env_sessions[sid] = session
        return session


def _log_task_error(task: asyncio.Task) -> None:
    if not task.cancelled() and task.exception() is not None:
        error = task.exception()
        if isinstance(error, RollgymError):
            log.warning("background send failed: %s", error)
        else:
            log.error("background task failed", exc_info=error)


class RolloutStream:
    """An async iterator over a rollout's groups (see :meth:`AsyncClient.stream`).

    Attributes:
        rollout_id: the request's id.
        batch: the finished :class:`Batch`, once iteration has ended.
        progress: the latest ``progress`` frame.
    """

    def __init__(self, client: AsyncClient, r: _Rollout):
        self._client = client
        self._r = r
        self._started = False
        self._done = False
        self._held: Any = None  # the end or an error met by _ready_groups, for the next __anext__
        self.rollout_id = r.id
        self.batch: Optional[Batch] = None

    @property
    def progress(self) -> Optional[Dict[str, Any]]:
        return self._r.progress

    @property
    def windows(self) -> Dict[int, Dict[str, Any]]:
        """Endless streams: each window's verdict frame so far (``kept``, ``dropped``,
        ``failed_groups``, ``metrics``...), by window number."""
        return self._r.windows

    def __aiter__(self) -> "RolloutStream":
        return self

    async def __aenter__(self) -> "RolloutStream":
        await self.start()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()

    async def start(self) -> None:
        """Send the request (done by the first iteration otherwise)."""
        if not self._started:
            self._started = True
            await self._client._start(self._r)

    async def __anext__(self) -> Group:
        if self._done:
            raise StopAsyncIteration
        await self.start()
        r = self._r
        if self._held is not None:
            item, self._held = self._held, None
        else:
            item = await r.queue.get()
        if item is _END:
            self._done = True
            self.batch = r.batch
            raise StopAsyncIteration
        if isinstance(item, BaseException):
            self._done = True
            raise item
        self._client._deliver(r, item)
        return item

    async def _ready_groups(self) -> List[Group]:
        """The next group (waiting for it as ``__anext__`` does) and every further one already
        queued, all handed out (and acknowledged) together: :class:`SyncRolloutStream` crosses
        from the caller's thread to the client's loop once per call, not once per group."""
        groups = [await self.__anext__()]
        r = self._r
        while not r.queue.empty():
            item = r.queue.get_nowait()
            if item is _END or isinstance(item, BaseException):
                self._held = item
                break
            self._client._deliver(r, item)
            groups.append(item)
        return groups

    async def collect(self) -> Batch:
        """Consume the remaining groups and return the Batch."""
        async for _ in self:
            pass
        assert self.batch is not None
        return self.batch

    async def cancel(self) -> None:
        """Ask the server to stop the rollout; keep iterating to get the rest and the verdict."""
        if self._started:
            await self._client.cancel(self.rollout_id)

    async def aclose(self) -> None:
        """Stop consuming: cancel the rollout if it is still running and acknowledge what arrives."""
        if self._started and not self._done:
            self._done = True
            await self._client._abandon(self._r)

    def __del__(self) -> None:
        # A loop left with `break` and then dropped: stop the rollout, so its unconsumed groups
        # do not hold the connection's credit.
        if getattr(self, "_started", False) and not self._done:
            client, r = self._client, self._r
            try:
                loop = r.future.get_loop()
                loop.call_soon_threadsafe(lambda: loop.create_task(client._abandon(r)))
            except RuntimeError:  # the loop is closed
                pass


class EnvSession:
    """Env groups hosted by the server, stepped with the trainer's own model outputs.

    Attributes:
        id: the env session id.
        tag: the env tag.
        episodes: ``[{env_id, group, seed, messages}]`` from ``env_opened`` (first-turn chat).
        messages: env_id → the chat for the next turn (``None`` once the episode is done).
        done: env ids whose episodes are over.
    """

    def __init__(self, client: AsyncClient, sid: str, tag: str, episodes: List[Dict[str, Any]], epoch: int):
        self._client = client
        self.id = sid
        self.tag = tag
        self.episodes = episodes
        self._epoch = epoch
        self._lost: Optional[RollgymError] = None
        self.closed = False
        self.messages: Dict[int, Optional[List[Dict[str, str]]]] = {int(e["env_id"]): e.get("messages") for e in episodes}
        self.done: set = set()

    @property
    def env_ids(self) -> List[int]:
        return [int(e["env_id"]) for e in self.episodes]

    @property
    def active(self) -> List[int]:
        """Env ids still waiting for a response."""
        return [i for i in self.env_ids if i not in self.done]

    async def __aenter__(self) -> "EnvSession":
        return self

    async def __aexit__(self, *exc) -> None:
        if not self.closed and self._lost is None:
            try:
                await self.close()
            except ConnectionLost:
                pass

    def _check(self) -> None:
        if self._lost is not None:
            raise self._lost
        if self.closed:
            raise RollgymError("unknown_env", f"env session {self.id!r} is closed")

    async def step(self, responses: Union[Mapping[int, str], Iterable[Tuple[int, str]], Iterable[Mapping[str, Any]]]) -> List[StepResult]:
        """Apply one model response per listed episode: ``{env_id: text}``, ``[(env_id, text)]``
        or ``[{"env_id": ..., "text": ...}]``. ``text`` is what the model generated after the
        generation prompt's ``<think>`` (or ``<answer>``). Returns one StepResult per response,
        in the order given."""
        self._check()
        items = responses.items() if isinstance(responses, Mapping) else responses
        wire = []
        for item in items:
            if isinstance(item, Mapping):
                env_id, text = item.get("env_id"), item.get("text")
            else:
                env_id, text = item
            if not isinstance(text, str):
                raise TypeError(f"response for env {env_id} must be a str, got {type(text).__name__}")
            wire.append({"env_id": _int("env_id", env_id), "text": text})
        if not wire:
            return []
        reply = await self._client._env_request({"type": "env_step", "id": self.id, "responses": wire}, "env_stepped", self._epoch)
        results = []
        for item in reply.get("results", []):
            res = StepResult.from_wire(item)
            # The server sends only what changed since the previous chat: its first `keep`
            # messages, then `messages`. Users get the full chat, as before.
            keep = item.get("keep")
            if keep is not None and res.messages is not None:
                res.messages = list((self.messages.get(res.env_id) or [])[: int(keep)]) + list(res.messages)
            self.messages[res.env_id] = res.messages
            results.append(res)
        for res in results:
            if res.done:
                self.done.add(res.env_id)
        return results

    async def close(self) -> Tuple[List[Dict[str, Any]], Dict[str, float]]:
        """End the session: ``(episodes, metrics)`` — the same episode records and RAGEN
        metrics a rollout would produce."""
        self._check()
        reply = await self._client._env_request({"type": "env_close", "id": self.id}, "env_closed", self._epoch)
        self.closed = True
        self._client._env_sessions.pop(self.id, None)
        return list(reply.get("episodes", [])), dict(reply.get("metrics", {}))
