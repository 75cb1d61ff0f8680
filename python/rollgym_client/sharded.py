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
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import queue
import threading
import uuid
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

from .aio import TagsArg, _left_open, normalize_tags
from .batch import Batch, Group
from .sync import Client

__all__ = ["ShardedClient", "ShardedStream", "shard_ranges"]

# Options a sharded rollout cannot pass on: pacing is per server (global admission is not built).
_NOT_SHARDED = ("endless", "max_staleness", "strict_staleness", "groups_per_step", "drop_older_than", "group_range", "played_episodes")

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
        token: their bearer token; **options: the other :class:`~rollgym_client.sync.Client` arguments.

    One :class:`~rollgym_client.sync.Client` per shard (``clients``); each rollout plays the
    shares at once, one thread per shard.
    """

    def __init__(self, urls: Sequence[str], token: Optional[str] = None, **options: Any):
        if isinstance(urls, str) or not urls:
            raise ValueError("urls must be a non-empty list of shard URLs")
        self.clients: List[Client] = []
        try:
            for url in urls:
                self.clients.append(Client(url, token, **options))
        except BaseException:
            self.close()
            raise
        self._pool = concurrent.futures.ThreadPoolExecutor(len(self.clients), thread_name_prefix="rollgym-shard")
        # Per update id: the shards whose end_update was answered (a retry skips them).
        self._ended: Dict[str, Dict[int, Dict[str, Any]]] = {}

    def close(self) -> None:
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
        shares = [
            self._pool.submit(
                client.rollout,
                tag_list,
                group_size=group_size,
                mode=mode,
                step=step,
                seed=seed,
                delivery="stream",
                rollout_id=f"{rid}.shard{i}",
                timeout=timeout,
                group_range={"first": first, "count": count},
                **options,
            )
            for i, client, first, count in self._shares(tag_list)
        ]
        played: List[Group] = sorted((g for share in shares for g in share.result().groups), key=lambda g: g.group)
        # The same rollout again with its episodes: the first shard judges them as if it had
        # played them all, and answers with the batch frame one server would send.
        judged = self.clients[0].rollout(
            tag_list,
            group_size=group_size,
            mode=mode,
            step=step,
            seed=seed,
            delivery="stream",
            rollout_id=rid,
            timeout=timeout,
            played_episodes=[_verdict_episode(e) for g in played for e in g.episodes],
            **options,
        )
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
        judged by the first shard, and sets ``kept`` on them. ``close()`` cancels every share."""
        _refuse_unsharded("stream", options)
        tag_list = normalize_tags(tags, tag, groups)
        per_window = sum(t["groups"] for t in tag_list)
        rid = _rollout_id(rollout_id)
        shares = [
            client.stream(
                tag_list,
                group_size=group_size,
                mode=mode,
                step=step,
                seed=seed,
                rollout_id=f"{rid}.shard{i}",
                endless=True,
                group_range={"first": first, "count": count},
                **options,
            )
            for i, client, first, count in self._shares(tag_list)
        ]
        judge = _WindowJudge(self.clients[0], rid, tag_list, group_size, mode, options)
        return ShardedStream(rid, per_window, shares, judge)


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

    @contextlib.contextmanager
    def update(self, label: str, ordinal: int, mode: Optional[str] = None) -> Iterator[Dict[str, Any]]:
        """:meth:`Client.update <rollgym_client.sync.Client.update>` over the shards
        (:meth:`begin_update`, then :meth:`end_update` on a normal exit; a body that raises
        leaves the update open):

        >>> next_ordinal = sharded.version["ordinal"] + 1
        >>> with sharded.update(f"step-{next_ordinal}", next_ordinal):
        ...     push_weights()
        """
        begun = self.begin_update(mode=mode, label=label, ordinal=ordinal)
        try:
            yield begun
        except BaseException as error:
            _left_open(error, begun["id"], label, ordinal)
            raise
        self.end_update(begun["id"], label, ordinal)

    def _shares(self, tag_list: List[Dict[str, Any]]) -> List[Tuple[int, Client, int, int]]:
        """Each shard's share of the tags' groups (of a rollout, or of every window): its index,
        client, first group and count; shards left without groups are left out."""
        total = sum(t["groups"] for t in tag_list)
        ranges = shard_ranges(total, len(self.clients))
        return [(i, client, first, count) for i, (client, (first, count)) in enumerate(zip(self.clients, ranges)) if count > 0]


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

    def __init__(self, client: Client, rid: str, tags: List[Dict[str, Any]], group_size: Optional[int], mode: str, options: Dict[str, Any]):
        self._client, self._rid, self._tags = client, rid, tags
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
        judged = self._client.rollout(
            self._tags,
            group_size=self._group_size,
            mode=self._mode,
            seed=groups[0].seed,
            delivery="stream",
            rollout_id=f"{self._rid}.window{window}",
            played_episodes=episodes,
            **self._options,
        )
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


class ShardedStream:
    """The groups of an endless stream played in shares (:meth:`ShardedClient.stream`)."""

    def __init__(self, rollout_id: str, per_window: int, shares: List[Any], judge: _WindowJudge):
        self.rollout_id = rollout_id
        #: Each window's verdict (the ``window`` frame one server sends), by window number.
        self.windows: Dict[int, Dict[str, Any]] = {}
        self._per_window = per_window
        self._shares = shares
        self._judge = judge
        self._arrived: "queue.Queue[Any]" = queue.Queue()
        self._pending: Dict[int, Dict[int, Group]] = {}
        self._running = len(shares)
        self._closed = False
        self._readers = [threading.Thread(target=self._read, args=(share,), name="rollgym-share", daemon=True) for share in shares]
        for reader in self._readers:
            reader.start()

    def _read(self, share: Any) -> None:
        try:
            for group in share:
                self._arrived.put(group)
        except BaseException as error:  # handed to the consumer, which raises it
            self._arrived.put(error)
        finally:
            self._arrived.put(_END)

    def __iter__(self) -> Iterator[Group]:
        return self

    def __next__(self) -> Group:
        while True:
            if self._running == 0:
                raise StopIteration
            item = self._arrived.get()
            if item is _END:
                self._running -= 1
                continue
            if isinstance(item, BaseException):
                self.close()
                raise item
            return self._take(item)

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
            kept, failed = set(verdict["kept"]), set(verdict["failed_groups"])
            for g in groups:
                g.kept = g.group in kept
                g.failed = g.group in failed
        return group

    def close(self) -> None:
        """Cancel every share on its shard."""
        if self._closed:
            return
        self._closed = True
        for share in self._shares:
            share.close()

    def __enter__(self) -> "ShardedStream":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
