"""One rollout or endless stream over several rollgym servers (shards): :class:`ShardedClient`
(issue 34).

    from rollgym_client.sharded import ShardedClient
    with ShardedClient(["http://10.0.0.5:8787", "http://10.0.0.6:8787"]) as client:
        batch = client.rollout(tag="CoordSokoban", groups=64, group_size=16, step=3)

The trainer sees one :class:`~rollgym_client.batch.Batch`, equal to the one a single server
would give for the same request (PROTOCOL.md "Shards"): group k of a rollout is a pure function
of the request and k (seed + k, env ids k × group_size …, sampling seeds from the batch seed and
env id), so each shard plays a contiguous share of the groups (``group_range``) exactly as one
server would, and the whole batch's filter verdict and RAGEN metrics come from one shard's
``rollout`` frame that carries every episode (``played_episodes``). The filter is not ported to Python on purpose: it
reproduces PyTorch's float32 kernels bit for bit (src/rollout/filter.ts), and a second copy
would drift; asking a server keeps one implementation, at the cost of one round trip that
carries the episodes' scores, metrics and flags (their texts stay behind).

Weight updates (:meth:`ShardedClient.update`, ``begin_update``/``end_update``) pause each
engine replica once for all shards: the other shards close their admission without touching the
engines (``engines="held_elsewhere"``), and the first shard pauses and resumes them
(docs/ray.md "Weight updates" has the order and why).

The shards must run with the same configuration (``rollgym_client.ray.ShardGroup`` starts them
so), and a train rollout needs a seed they agree on: ``seed=``, or ``step=`` with a configured
``seed.train`` (RAGEN's default, 10000).

A sharded stream's ``max_staleness`` admission is global: ``groups_per_step`` (and
``in_flight``) are split over the shares as the groups are, so the shards together admit what
one server admits (docs/ray.md "Staleness across shards" says where the frames' counts differ).

A shard that dies or stops answering is given up ``give_up_after`` seconds (10 by default) after
its connection dropped and could not be resumed; its unfinished groups are played again on the
survivors with the same seeds and group ids (docs/ray.md "When a shard dies"), and the caller
sees an error only once no shard is left.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import queue
import threading
import time
import uuid
from typing import Any, Callable, ContextManager, Dict, Iterator, List, Optional, Sequence, Set, Tuple, TypeVar, Union

import numpy as np

from .aio import TagsArg, normalize_tags
from .batch import Batch, Group
from .errors import ConnectionLost
from .sync import Client, SyncRolloutStream, updating

log = logging.getLogger("rollgym_client")
_T = TypeVar("_T")

__all__ = ["ShardedClient", "ShardedStream", "shard_ranges"]

# Options a sharded rollout cannot pass on (a finite rollout is not paced; stream: below).
_NOT_SHARDED = ("endless", "max_staleness", "strict_staleness", "groups_per_step", "drop_older_than", "group_range", "played_episodes")
# A sharded stream splits max_staleness's groups_per_step (and in_flight) over its shares
# (_split_pace); strict_staleness orders one server's sends, and no shard sees the others'.
_NOT_SHARDED_STREAM = ("endless", "strict_staleness", "group_range", "played_episodes")
# Pacing options the window verdict's rollout (played_episodes) has no use for.
_PACE = ("max_staleness", "groups_per_step", "drop_older_than", "in_flight")

# What the verdict reads of an episode (protocol/messages.ts PlayedEpisodeSchema).
_EPISODE_FIELDS = ("env_id", "group_id", "tag", "seed", "score", "success", "failure", "end_reason", "metrics")
_TURN_FLAGS = ("context_dropped", "ambiguous_split")
_TOKEN_COUNTS = ("prompt_drift", "logprobs_missing", "template_drift")


def shard_ranges(groups: int, shards: int) -> List[Tuple[int, int]]:
    """Each shard's ``(first, count)`` of ``groups`` groups: contiguous, in shard order, sizes
    differing by at most one; shards beyond the number of groups get none."""
    if shards < 1:
        raise ValueError(f"shards must be >= 1, got {shards}")
    bounds = [groups * i // shards for i in range(shards + 1)]
    return [(bounds[i], bounds[i + 1] - bounds[i]) for i in range(shards)]


def _split_pace(per_window: int, shares: int, groups_per_step: Optional[int], in_flight: Optional[int]) -> List[Dict[str, int]]:
    """Each share's ``groups_per_step`` (and ``in_flight`` when given): the stream's split as
    :func:`shard_ranges` splits groups, so the shares' capacities (S + v + 1) × Bᵢ sum to one
    server's (S + v + 1) × B (docs/ray.md "Staleness across shards")."""
    steps = per_window if groups_per_step is None else groups_per_step
    split = {"groups_per_step": steps, "in_flight": in_flight}
    paces: List[Dict[str, int]] = [{} for _ in range(shares)]
    for name, value in split.items():
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < shares:
            raise ValueError(f"{name} must be an integer >= {shares} (the stream's shares: each needs one), got {value!r}")
        for pace, (_, count) in zip(paces, shard_ranges(value, shares)):
            pace[name] = count
    return paces


def _verdict_episode(episode: Dict[str, Any]) -> Dict[str, Any]:
    """An episode as the verdict reads it (PROTOCOL.md "Shards"): the fields it reads of the
    record, each turn's context flags; the texts stay here."""
    slim = {k: episode[k] for k in _EPISODE_FIELDS if episode.get(k) is not None}
    slim["turns"] = [{k: t[k] for k in _TURN_FLAGS if k in t} for t in episode.get("turns", [])]
    tokens = episode.get("tokens")
    if isinstance(tokens, dict):
        slim["tokens"] = {k: tokens[k] for k in _TOKEN_COUNTS if tokens.get(k) is not None}
    return slim


class ShardedClient:
    """:meth:`Client.rollout <rollgym_client.sync.Client.rollout>`, ``stream`` and weight
    updates over several servers.

    Args:
        urls: the shards' URLs (``ShardGroup.urls``), in a fixed order: group shares follow it.
        token: their bearer token.
        give_up_after: seconds a shard may stay without a connection (dropped and not yet
            resumed) before it is given up for good and its groups are played elsewhere. Its
            WebSocket pings default to every ``give_up_after / 2`` s, with ``give_up_after`` s
            for the pong, so a shard that stops answering without closing is found too.
        **options: the other :class:`~rollgym_client.sync.Client` arguments.

    One :class:`~rollgym_client.sync.Client` per shard (``clients``); each rollout plays the
    shares at once, one thread per shard. ``dead`` maps each given-up shard's index to the
    reason; ``replayed`` lists the batch shares played again elsewhere.
    """

    def __init__(self, urls: Sequence[str], token: Optional[str] = None, *, give_up_after: float = 10.0, **options: Any):
        if isinstance(urls, str) or not urls:
            raise ValueError("urls must be a non-empty list of shard URLs")
        if not isinstance(give_up_after, (int, float)) or isinstance(give_up_after, bool) or not give_up_after > 0:
            raise ValueError(f"give_up_after must be a number of seconds > 0, got {give_up_after!r}")
        self.give_up_after = float(give_up_after)
        options.setdefault("ping_interval", self.give_up_after / 2)
        options.setdefault("ping_timeout", self.give_up_after)
        #: Shards given up, by index: why.
        self.dead: Dict[int, str] = {}
        #: Batch shares played again on a survivor: ``{rollout, shard, url, groups, on, reason}``.
        self.replayed: List[Dict[str, Any]] = []
        self._dead_lock = threading.Lock()
        self._closing = threading.Event()
        self.clients: List[Client] = []
        try:
            for url in urls:
                self.clients.append(Client(url, token, **options))
        except BaseException:
            self.close()
            raise
        self._pool = concurrent.futures.ThreadPoolExecutor(len(self.clients), thread_name_prefix="rollgym-shard")
        self._watchdog = threading.Thread(target=self._watch, name="rollgym-shard-watchdog", daemon=True)
        self._watchdog.start()
        # Per update id: the shards whose end_update was answered (a retry skips them).
        self._ended: Dict[str, Dict[int, Dict[str, Any]]] = {}

    def close(self) -> None:
        self._closing.set()
        if hasattr(self, "_watchdog"):
            self._watchdog.join(20)  # it may be closing a client it gave up
        for client in self.clients:
            client.close()
        if hasattr(self, "_pool"):
            self._pool.shutdown(wait=True)

    def __enter__(self) -> "ShardedClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def rollout(
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
        timeout: Optional[float] = None,
        **options: Any,
    ) -> Batch:
        """The arguments and result of :meth:`Client.rollout <rollgym_client.sync.Client.rollout>`
        (no ``on_progress``, and none of the stream pacing options). ``delivery="batch"`` gives the
        kept groups with their filter scores, ``"stream"`` every group, as one server does."""
        _refuse_unsharded("rollout", options)
        if delivery not in ("batch", "stream"):
            raise ValueError(f'delivery must be "batch" or "stream", not {delivery!r}')
        tag_list = normalize_tags(tags, tag, groups)
        rid = _rollout_id(rollout_id)
        request = dict(group_size=group_size, mode=mode, step=step, seed=seed, delivery="stream", timeout=timeout, **options)
        played = sorted(self._play_shares(tag_list, rid, request), key=lambda g: g.group)
        # The same rollout again with its episodes: a shard judges them as if it had played them
        # all, and answers with the batch frame one server would send.
        episodes = [_verdict_episode(e) for g in played for e in g.episodes]
        judged = self._on_a_shard(lambda client: client.rollout(tag_list, rollout_id=rid, played_episodes=episodes, **request))
        group_scores = judged.verdict.get("group_scores", [])
        verdict = {k: v for k, v in judged.verdict.items() if k != "group_scores"}
        for g in played:
            g.rollout = rid
        if delivery == "batch":
            # One server sends the kept groups only, each with its filter score.
            kept = set(verdict.get("kept", []))
            played = [g for g in played if g.group in kept]
            for g in played:
                g.score = group_scores[g.group]
        return Batch(rid, delivery, played, verdict)

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
        rollout_id: Optional[str] = None,
        **options: Any,
    ) -> "ShardedStream":
        """An endless stream over the shards (``Client.stream(..., endless=True)``): each window
        of the tags' groups is split over the shards as :meth:`rollout` splits a batch. Iterate
        it for the groups as they arrive from any shard; each window's verdict appears in
        ``windows`` (the ``window`` frame one server sends) once all its groups have arrived,
        judged by one shard, and sets ``kept`` on them. ``close()`` cancels every share.

        A shard lost mid-stream has its range of every window from the earliest one not fully
        delivered played again on a survivor (same seeds and group ids); groups that arrive twice
        are dropped, so each is handed out once (``ShardedStream.replayed`` says what moved).

        A consumer that does not take groups pauses the shards: at most ``ShardedStream.hold``
        groups of each share wait for it (docs/ray.md "Backpressure").

        ``max_staleness``, ``groups_per_step``, ``drop_older_than`` and ``in_flight`` pace the
        stream as one server paces it: ``groups_per_step`` B (default: the window's groups; a
        server's ``rollgym.async.groups_per_step`` is not read) and ``in_flight`` are split over
        the shares as the groups are, so the groups admitted by version v over all shards are at
        most (S + v + 1) × B, one server's bound. Each group's ``admitted`` counts are its
        shard's (docs/ray.md "Staleness across shards"); ``ShardedStream.paces`` gives each
        share's. ``strict_staleness`` is refused."""
        for name in _NOT_SHARDED_STREAM:
            if options.get(name) is not None:
                raise TypeError(f"ShardedClient.stream does not take {name}")
        tag_list = normalize_tags(tags, tag, groups)
        rid = _rollout_id(rollout_id)
        request = dict(group_size=group_size, mode=mode, step=step, seed=seed, **options)
        judged_options = {k: v for k, v in options.items() if k not in _PACE}
        judge = _WindowJudge(self, rid, tag_list, group_size, mode, judged_options)
        return ShardedStream(self, rid, tag_list, request, judge)

    # ------------------------------------------------------------------ weight updates

    @property
    def version(self) -> Optional[Dict[str, Any]]:
        """The weight version in force as the lead shard (shard 0) last said (trainer clients)."""
        return self.clients[0].version

    def begin_update(
        self,
        update_id: Optional[str] = None,
        mode: Optional[str] = None,
        label: Optional[str] = None,
        ordinal: Optional[int] = None,
    ) -> Dict[str, Any]:
        """:meth:`Client.begin_update <rollgym_client.sync.Client.begin_update>` over the shards,
        each engine replica paused once (needs ``ShardedClient(..., trainer=True)``): every other
        shard begins first with ``engines="held_elsewhere"`` (its admission closes and its turns
        wait; it asks the engines nothing), then the lead shard (shard 0) begins as one server
        does and pauses every replica in ``mode``. Returns the lead's ``update_begun`` with
        ``shards``: every shard's, in shard order (docs/ray.md "Weight updates").

        A refusal anywhere raises that shard's error with nothing paused and every admission
        open again: the followers that had begun end at the version in force (no weights moved).
        """
        uid = update_id if update_id is not None else f"update-{uuid.uuid4().hex[:12]}"
        followers: List[Dict[str, Any]] = []
        try:
            for client in self.clients[1:]:
                followers.append(client.begin_update(uid, mode, label, ordinal, engines="held_elsewhere"))
            lead = self.clients[0].begin_update(uid, mode, label, ordinal)
        except BaseException as error:
            self._reopen(uid, followers, error)
            raise
        return {**lead, "shards": [lead, *followers]}

    def _reopen(self, update_id: str, followers: List[Dict[str, Any]], error: BaseException) -> None:
        """The followers that began ``update_id`` end it at the version they had: the lead paused
        nothing, so no weights moved."""
        for shard, (client, begun) in enumerate(zip(self.clients[1:], followers), start=1):
            before = begun["version"]
            try:
                client.end_update(update_id, before["label"], before["ordinal"])
            except Exception as stuck:  # told with the original error, which is what the caller sees
                note = f"update {update_id!r} stays open on shard {shard}: reopening it failed ({stuck})"
                if hasattr(error, "add_note"):
                    error.add_note(note)

    def end_update(self, update_id: str, label: str, ordinal: int) -> Dict[str, Any]:
        """:meth:`Client.end_update <rollgym_client.sync.Client.end_update>` over the shards: the
        followers end first, while the engines are still paused, so each of their turns is
        stamped with the new version before any token of the new weights is sampled; then the
        lead resumes every replica once. Returns the lead's ``update_ended`` with ``shards``.

        A refusal raises that shard's error and leaves the update open where it was not ended
        yet (the lead's, so the engines stay paused, as one server's update stays open); call
        again with the same arguments: the shards that ended are not asked again.
        """
        ended = self._ended.setdefault(update_id, {})
        order = [*range(1, len(self.clients)), 0]
        for i in order:
            if i not in ended:
                ended[i] = self.clients[i].end_update(update_id, label, ordinal)
        del self._ended[update_id]
        frames = [ended[i] for i in range(len(self.clients))]
        return {**frames[0], "shards": frames}

    def update(self, label: str, ordinal: int, mode: Optional[str] = None) -> ContextManager[Dict[str, Any]]:
        """:meth:`Client.update <rollgym_client.sync.Client.update>` over the shards
        (:meth:`begin_update`, then :meth:`end_update` on a normal exit; a body that raises
        leaves the update open):

        >>> next_ordinal = sharded.version["ordinal"] + 1
        >>> with sharded.update(f"step-{next_ordinal}", next_ordinal):
        ...     push_weights()
        """
        return updating(self, label, ordinal, mode)

    def _shares(self, tag_list: List[Dict[str, Any]]) -> List[Tuple[int, Client, int, int]]:
        """Each shard's share of the tags' groups (of a rollout, or of every window): its index,
        client, first group and count; shards left without groups are left out."""
        total = sum(t["groups"] for t in tag_list)
        live = self._live()
        ranges = shard_ranges(total, len(live))
        return [(i, self.clients[i], first, count) for i, (first, count) in zip(live, ranges) if count > 0]

    def _play_shares(self, tag_list: List[Dict[str, Any]], rid: str, request: Dict[str, Any]) -> List[Group]:
        """Every group of a rollout, its shares played at once; a share whose shard is lost is
        played again, whole, on the least busy survivor (its groups were never handed out)."""
        running: Dict[concurrent.futures.Future, Tuple[int, int, int]] = {}  # shard, first, count

        def play(shard: int, first: int, count: int, name: str) -> None:
            future = self._pool.submit(self.clients[shard].rollout, tag_list, rollout_id=name, group_range={"first": first, "count": count}, **request)
            running[future] = (shard, first, count)

        for i, _, first, count in self._shares(tag_list):
            play(i, first, count, f"{rid}.shard{i}")
        played: List[Group] = []
        replays = 0
        while running:
            done, _ = concurrent.futures.wait(running, return_when=concurrent.futures.FIRST_COMPLETED)
            for future in done:
                shard, first, count = running.pop(future)
                try:
                    played.extend(future.result().groups)
                    continue
                except Exception as error:
                    if not self._lost(shard, error):
                        raise
                    self._give_up(shard, error)
                busy = [s for s, _, _ in running.values()]
                survivor = self._least_busy(busy)
                replays += 1
                self.replayed.append({"rollout": rid, "shard": shard, "url": self.clients[shard].aio.url, "groups": [first, first + count], "on": survivor, "reason": self.dead[shard]})
                log.warning("rollout %s: shard %d is gone (%s); playing its groups %d..%d again on shard %d", rid, shard, self.dead[shard], first, first + count - 1, survivor)
                play(survivor, first, count, f"{rid}.replay{replays}")
        return played

    def _on_a_shard(self, call: Callable[[Client], _T]) -> _T:
        """``call`` on the first live shard, then the next while shards are lost under it."""
        while True:
            shard = self._live()[0]
            try:
                return call(self.clients[shard])
            except Exception as error:
                if not self._lost(shard, error):
                    raise
                self._give_up(shard, error)

    def _lost(self, shard: int, error: Exception) -> bool:
        """Whether ``error`` means shard ``shard`` is gone (and not this client closing): its
        connection could not be resumed, or it was given up (its closed client raises anything)."""
        if self._closing.is_set():
            return False
        with self._dead_lock:
            return isinstance(error, ConnectionLost) or shard in self.dead

    def _live(self) -> List[int]:
        """The shards not given up, in shard order; ConnectionLost naming every shard's reason
        when none is left."""
        with self._dead_lock:
            live = [i for i in range(len(self.clients)) if i not in self.dead]
            if not live:
                reasons = "; ".join(f"shard {i} ({self.clients[i].aio.url}): {why}" for i, why in sorted(self.dead.items()))
                raise ConnectionLost(f"every shard is gone: {reasons}", code="no_shards")
        return live

    def _least_busy(self, busy: Sequence[int]) -> int:
        """The live shard that appears least in ``busy`` (the lower index on ties)."""
        return min(self._live(), key=lambda i: (busy.count(i), i))

    def _give_up(self, shard: int, why: Union[str, BaseException]) -> None:
        """Shard ``shard`` is lost for good: its connection is closed, so whatever it still plays
        fails and is played elsewhere. Its client's thread runs on until :meth:`close`: a call
        still on its way to a stopped event loop would never return."""
        with self._dead_lock:
            if shard in self.dead:
                return
            self.dead[shard] = str(why)
        client = self.clients[shard]
        log.warning("shard %d (%s) given up: %s", shard, client.aio.url, why)
        try:
            asyncio.run_coroutine_threadsafe(client.aio.close(), client.loop).result(15)
        except Exception:  # a dead shard's connection may not close cleanly; it is not used again
            log.exception("closing shard %d's connection failed", shard)

    def _watch(self) -> None:
        """Gives up a shard whose connection has been down ``give_up_after`` seconds: the
        client's own resume would keep trying for up to the server's ``resume_grace_s`` (60 s)."""
        down_since: Dict[int, float] = {}
        while not self._closing.wait(0.25):
            now = time.monotonic()
            with self._dead_lock:
                live = [i for i in range(len(self.clients)) if i not in self.dead]
            for i in live:
                aio = self.clients[i].aio
                # Never connected, or a session over: nothing waits on it.
                if aio.connected or aio.session is None:
                    down_since.pop(i, None)
                    continue
                since = down_since.setdefault(i, now)
                if now - since >= self.give_up_after:
                    self._give_up(i, f"no connection for {self.give_up_after:g} s (it dropped and could not be resumed)")


def _rollout_id(given: Optional[str]) -> str:
    return given if given is not None else f"sharded-{uuid.uuid4().hex[:12]}"


def _refuse_unsharded(call: str, options: Dict[str, Any]) -> None:
    for name in _NOT_SHARDED:
        if options.get(name) is not None:
            raise TypeError(f"ShardedClient.{call} does not take {name}")


class _WindowJudge:
    """A window's verdict from a shard: the window's episodes as a rollout of its own (its groups
    from seed ``seed + w × W``, ids from 0, PROTOCOL.md "Shards"), shifted back to the stream's
    group ids."""

    def __init__(self, sharded: ShardedClient, rid: str, tags: List[Dict[str, Any]], group_size: Optional[int], mode: str, options: Dict[str, Any]):
        self._sharded, self._rid, self._tags = sharded, rid, tags
        self._group_size, self._mode, self._options = group_size, mode, options

    def __call__(self, window: int, groups: List[Group]) -> Dict[str, Any]:
        per_window = len(groups)
        first = window * per_window
        size = len(groups[0].episodes)
        episodes = []
        for g in groups:
            for e in g.episodes:
                local = _verdict_episode(e)
                local["env_id"] = int(e["env_id"]) - first * size
                local["group_id"] = int(e["group_id"]) - first
                episodes.append(local)
        judged = self._sharded._on_a_shard(lambda client: client.rollout(
            self._tags,
            group_size=self._group_size,
            mode=self._mode,
            seed=groups[0].seed,
            delivery="stream",
            rollout_id=f"{self._rid}.window{window}",
            played_episodes=episodes,
            **self._options,
        ))
        verdict = judged.verdict
        shifted = {k: [int(g) + first for g in verdict.get(k, [])] for k in ("kept", "dropped", "failed_groups")}
        # The fields in a window frame's order.
        return {
            "type": "window",
            "rollout": self._rid,
            "window": window,
            "first": first,
            "groups": per_window,
            **shifted,
            "metrics": verdict.get("metrics", {}),
            "episodes": verdict.get("episodes", 0),
            "failed": verdict.get("failed", 0),
        }


_END = object()


class _Share:
    """One shard's range of groups ``first … first + count − 1`` in every window from ``start``
    on: an endless stream of its own whose window 0 is the sharded stream's window ``start``."""

    def __init__(self, shard: int, first: int, count: int, start: int, stream: SyncRolloutStream):
        self.shard, self.first, self.count, self.start, self.stream = shard, first, count, start, stream
        # Its groups handed to the consumer's queue and not taken yet (ShardedStream.hold bounds it).
        self.waiting = 0


class ShardedStream:
    """The groups of an endless stream played in shares (:meth:`ShardedClient.stream`).

    Attributes:
        windows: each window's verdict (the ``window`` frame one server sends), by window number.
        replayed: the shares played again after their shard was lost:
            ``{shard, url, reason, group_range, from_window, on}``.
        duplicates: groups that arrived twice (a replayed share plays again what had arrived)
            and were dropped.
        hold: groups of one share that may wait for the consumer at once (docs/ray.md
            "Backpressure").
    """

    def __init__(self, sharded: ShardedClient, rollout_id: str, tags: List[Dict[str, Any]], request: Dict[str, Any], judge: _WindowJudge):
        self.rollout_id = rollout_id
        self.windows: Dict[int, Dict[str, Any]] = {}
        self.replayed: List[Dict[str, Any]] = []
        self.duplicates = 0
        self._sharded, self._tags, self._request, self._judge = sharded, tags, request, judge
        self._per_window = sum(t["groups"] for t in tags)
        # Seed of group 0: a replayed share starting at window w plays from this + w × W.
        self._base_seed: Optional[int] = request.get("seed")
        self._arrived: "queue.Queue[Tuple[_Share, Any]]" = queue.Queue()
        self._pending: Dict[int, Dict[int, Group]] = {}  # windows not yet judged: group id → group
        self._judged_below = 0  # every window below it is judged
        self._judged: Set[int] = set()  # judged windows from _judged_below on
        self._shares: List[_Share] = []
        self._closed = False
        # A share's reader stops past it, so a slow consumer slows the shards (docs/ray.md
        # "Backpressure"): the credit, what a lone client holds.
        self.hold: int = sharded.clients[0].aio.credit
        self._room = threading.Condition()  # a share's reader waits here for the consumer
        shares = sharded._shares(tags)
        split = _split_pace(self._per_window, len(shares), request.pop("groups_per_step", None), request.pop("in_flight", None))
        #: Each share's pacing, by its group range's first group: ``{shard, group_range,
        #: groups_per_step, in_flight?}`` (a share played again elsewhere keeps its own).
        self.paces: Dict[int, Dict[str, Any]] = {}
        for (shard, _, first, count), pace in zip(shares, split):
            self.paces[first] = {"shard": shard, "group_range": {"first": first, "count": count}, **pace}
        for shard, _, first, count in shares:
            self._start(shard, first, count, 0, f"{rollout_id}.shard{shard}")

    def _start(self, shard: int, first: int, count: int, start: int, name: str) -> None:
        request = self._request
        if start > 0:
            # Window `start` of the stream is window 0 of the stream from its first seed.
            assert self._base_seed is not None  # a group of window 0 has arrived
            request = {**request, "step": None, "seed": self._base_seed + start * self._per_window}
        pace = {k: v for k, v in self.paces[first].items() if k in _PACE}
        stream = self._sharded.clients[shard].stream(self._tags, rollout_id=name, endless=True, group_range={"first": first, "count": count}, **pace, **request)
        share = _Share(shard, first, count, start, stream)
        self._shares.append(share)
        threading.Thread(target=self._read, args=(share,), name="rollgym-share", daemon=True).start()

    def _read(self, share: _Share) -> None:
        """Hands ``share``'s groups to the consumer, at most ``hold`` of them waiting there: while
        they wait, the reader takes (and so acknowledges) no more, and the shard's own buffer
        bound pauses its play, as one server pauses for a slow client."""
        try:
            while self._room_for(share):
                try:
                    group = next(share.stream)
                except StopIteration:
                    break
                with self._room:
                    share.waiting += 1
                self._arrived.put((share, group))
        except BaseException as error:  # handed to the consumer, which replays the share or raises
            self._arrived.put((share, error))
        else:
            self._arrived.put((share, _END))

    def _room_for(self, share: _Share) -> bool:
        """Waits until fewer than ``hold`` of ``share``'s groups wait for the consumer; False once
        the stream is closed."""
        with self._room:
            self._room.wait_for(lambda: share.waiting < self.hold or self._closed)
            return not self._closed

    def _taken(self, share: _Share) -> None:
        with self._room:
            share.waiting -= 1
            self._room.notify_all()

    def __iter__(self) -> Iterator[Group]:
        return self

    def __next__(self) -> Group:
        while True:
            if not self._shares:
                raise StopIteration
            share, item = self._arrived.get()
            if item is not _END and not isinstance(item, BaseException):
                self._taken(share)
            if share not in self._shares:
                continue
            if item is _END:
                self._shares.remove(share)
                continue
            if isinstance(item, BaseException):
                if not self._closed and isinstance(item, Exception) and self._sharded._lost(share.shard, item):
                    self._replay(share, item)
                    continue
                self.close()
                raise item
            group = self._renumbered(share, item)
            if self._base_seed is None:
                self._base_seed = group.seed - group.group
            if self._arrived_before(group):
                self.duplicates += 1
                continue
            return self._take(group)

    def _replay(self, lost: _Share, error: Exception) -> None:
        """Plays ``lost``'s range again on a survivor from the earliest window in which one of its
        groups has not arrived; what arrives twice is dropped by :meth:`_arrived_before`."""
        self._shares.remove(lost)
        sharded = self._sharded
        sharded._give_up(lost.shard, error)
        start = self._first_window_missing(lost.first, lost.count)
        while True:
            try:
                survivor = sharded._least_busy([s.shard for s in self._shares])
            except ConnectionLost:
                self.close()
                raise
            try:
                self._start(survivor, lost.first, lost.count, start, f"{self.rollout_id}.replay{len(self.replayed) + 1}")
                self.paces[lost.first]["shard"] = survivor
                break
            except RuntimeError:  # its client was closed meanwhile (ShardedClient.close)
                if survivor not in sharded.dead:
                    raise
        last = lost.first + lost.count - 1
        self.replayed.append({
            "shard": lost.shard, "url": sharded.clients[lost.shard].aio.url, "reason": sharded.dead[lost.shard],
            "group_range": {"first": lost.first, "count": lost.count}, "from_window": start, "on": survivor,
        })
        log.warning(
            "stream %s: shard %d is gone (%s); its groups %d..%d of every window from window %d now play on shard %d",
            self.rollout_id, lost.shard, sharded.dead[lost.shard], lost.first, last, start, survivor,
        )

    def _first_window_missing(self, first: int, count: int) -> int:
        w = self._judged_below
        while True:
            if w not in self._judged:
                have = self._pending.get(w, {})
                if any(w * self._per_window + g not in have for g in range(first, first + count)):
                    return w
            w += 1

    def _renumbered(self, share: _Share, group: Group) -> Group:
        """A replayed share's group numbered as the stream numbers it (its windows start at
        ``share.start``), as _WindowJudge shifts a window's groups the other way."""
        if share.start == 0:
            return group
        shift = share.start * self._per_window
        size = len(group.episodes)
        group.group += shift
        group.window = int(group.window or 0) + share.start
        for e in group.episodes:
            e["group_id"] = int(e["group_id"]) + shift
            e["env_id"] = int(e["env_id"]) + shift * size
        env_ids = (group.env_ids + shift * size).astype(np.int32)
        env_ids.setflags(write=False)
        group.env_ids = group.arrays["env_ids"] = env_ids
        return group

    def _arrived_before(self, group: Group) -> bool:
        w = int(group.window or 0)
        if w < self._judged_below or w in self._judged:
            return True
        return group.group in self._pending.get(w, {})

    def _take(self, group: Group) -> Group:
        group.rollout = self.rollout_id
        window = int(group.window or 0)
        pending = self._pending.setdefault(window, {})
        pending[group.group] = group
        if len(pending) == self._per_window:
            groups = [pending[g] for g in sorted(pending)]
            del self._pending[window]
            verdict = self._judge(window, groups)
            self.windows[window] = verdict
            self._judged.add(window)
            while self._judged_below in self._judged:
                self._judged.discard(self._judged_below)
                self._judged_below += 1
            kept, failed = set(verdict["kept"]), set(verdict["failed_groups"])
            for g in groups:
                g.kept = g.group in kept
                g.failed = g.group in failed
        return group

    def close(self) -> None:
        """Cancel every share on its shard."""
        if self._closed:
            return
        with self._room:
            self._closed = True
            self._room.notify_all()  # a reader waiting for room ends
        for share in self._shares:
            if share.shard in self._sharded.dead:
                continue  # its connection is closed already
            try:
                share.stream.close()
            except Exception:  # the shard went meanwhile: nothing left to cancel
                log.debug("closing share on shard %d failed", share.shard, exc_info=True)

    def __enter__(self) -> "ShardedStream":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
