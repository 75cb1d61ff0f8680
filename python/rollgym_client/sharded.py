"""One rollout over several rollgym servers (shards): :class:`ShardedClient` (issue 34).

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

The shards must run with the same configuration (``rollgym_client.ray.ShardGroup`` starts them
so), and a train rollout needs a seed they agree on: ``seed=``, or ``step=`` with a configured
``seed.train`` (RAGEN's default, 10000).
"""

from __future__ import annotations

import concurrent.futures
import uuid
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from .aio import TagsArg, normalize_tags
from .batch import Batch, Group
from .sync import Client

__all__ = ["ShardedClient", "shard_ranges"]

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
    """:meth:`Client.rollout <rollgym_client.sync.Client.rollout>` over several servers.

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
        for paced in ("endless", "max_staleness", "strict_staleness", "groups_per_step", "drop_older_than", "group_range", "played_episodes"):
            if options.get(paced) is not None:
                raise TypeError(f"ShardedClient.rollout does not take {paced}")
        tag_list = normalize_tags(tags, tag, groups)
        total = sum(t["groups"] for t in tag_list)
        rid = rollout_id if rollout_id is not None else f"sharded-{uuid.uuid4().hex[:12]}"
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
            for i, (client, (first, count)) in enumerate(zip(self.clients, shard_ranges(total, len(self.clients))))
            if count > 0
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
