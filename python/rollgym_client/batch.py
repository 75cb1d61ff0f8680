"""What a rollout hands back: :class:`Group` (one finished env group, as it arrives) and
:class:`Batch` (the whole rollout with the filter's verdict and RAGEN metrics), plus
:class:`StepResult` for env hosting."""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Optional

import numpy as np

from .codec import array_dtype, decode_array
from .errors import ProtocolError
from .tokens import TOKEN_ARRAYS, TokenLog, token_logs_from_frame

#: The per-episode arrays every ``group`` frame carries: attribute name → wire field.
EPISODE_ARRAYS = {
    "env_ids": "env_ids_i32",
    "scores": "scores_f32",
    "rewards": "rewards_f32",
    "penalties": "penalties_f32",
    "success": "success_u8",
}

#: dtype of each per-episode array as the user sees it (``group_ids`` is derived).
ARRAY_DTYPES = {
    "env_ids": np.dtype(np.int32),
    "group_ids": np.dtype(np.int32),
    "scores": np.dtype(np.float32),
    "rewards": np.dtype(np.float32),
    "penalties": np.dtype(np.float32),
    "success": np.dtype(bool),
}


@dataclass
class Group:
    """One finished group of a rollout: ``group_size`` episodes of one tag and seed.

    The arrays have one entry per episode in env-id order and are read-only views of the
    frame's bytes (``numpy.frombuffer``); copy them to modify. ``kept`` is the filter's
    verdict: known on arrival in ``batch`` delivery, ``None`` until the rollout's verdict
    arrives in ``stream`` delivery (the client fills it in then).

    ``tokens`` is ``None`` unless the rollout was requested with ``tokens=True``; then it
    holds one :class:`~rollgym_client.tokens.TokenLog` per episode (views of the frame's
    token arrays, checked on arrival).
    """

    rollout: str
    group: int
    seq: int
    tag: str
    seed: int
    kept: Optional[bool]
    score: Optional[float]
    episodes: List[Dict[str, Any]]
    env_ids: np.ndarray
    scores: np.ndarray
    rewards: np.ndarray
    penalties: np.ndarray
    success: np.ndarray
    #: Every typed-array field of the frame by name without suffix (``env_ids``, ``scores`` ...,
    #: and any array a newer server adds).
    arrays: Dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    #: True when the verdict listed this group under ``failed_groups`` (an episode failed).
    failed: bool = False
    #: One token log per episode in token mode (``tokens=True``), else ``None``.
    tokens: Optional[List[TokenLog]] = field(default=None, repr=False)
    #: The oldest and newest weight-version ordinal that produced the group (PROTOCOL.md
    #: "Versions"); 0 until a trainer has begun an update, as the token logs' versions say.
    min_version: int = 0
    max_version: int = 0
    #: Endless streams: the window the group belongs to (its verdict is that window's).
    window: Optional[int] = None
    #: Rollouts with ``max_staleness``: ``{version, accepted, running, capacity}`` at admission.
    admitted: Optional[Dict[str, int]] = field(default=None, repr=False)

    def age(self, current: int) -> int:
        """Versions between the oldest that produced the group and ``current``, the ordinal in
        force (``client.version["ordinal"]``). A ``current`` older than the group's newest
        version raises ``ValueError``: the ordinals count from another start."""
        current = operator.index(current)
        if current < self.max_version:
            raise ValueError(
                f"current version {current} is older than group {self.group}'s max_version {self.max_version} "
                "(ordinals count from the server's version: start from client.version['ordinal'])"
            )
        return current - self.min_version

    @property
    def group_ids(self) -> np.ndarray:
        return np.full(len(self.episodes), self.group, dtype=np.int32)

    def __len__(self) -> int:
        return len(self.episodes)

    @classmethod
    def from_frame(cls, frame: Dict[str, Any]) -> "Group":
        try:
            episodes = frame["episodes"]
            if not isinstance(episodes, list):
                raise ProtocolError(f"group frame: episodes must be a list, got {type(episodes).__name__}")
            n = len(episodes)
            # Every typed array once, by wire name; the token logs reuse them.
            wire_arrays = {name: decode_array(name, value) for name, value in frame.items() if isinstance(name, str) and array_dtype(name) is not None}
            arrays: Dict[str, np.ndarray] = {name.rsplit("_", 1)[0]: array for name, array in wire_arrays.items()}
            per_episode = {}
            for attr, wire in EPISODE_ARRAYS.items():
                if wire not in wire_arrays:
                    raise ProtocolError(f"group frame lacks {wire!r}")
                array = wire_arrays[wire]
                if array.shape[0] != n:
                    raise ProtocolError(f"field {wire!r} has {array.shape[0]} entries, the frame has {n} episodes", field=wire)
                per_episode[attr] = array
            per_episode["success"] = per_episode["success"] != 0
            arrays["success"] = per_episode["success"]
            tokens = token_logs_from_frame(frame, n, wire_arrays)
            kept = frame.get("kept")
            score = frame.get("score")
            optional = {name: frame[name] for name in ("min_version", "max_version", "window", "admitted") if frame.get(name) is not None}
            return cls(
                rollout=str(frame["rollout"]),
                group=int(frame["group"]),
                seq=int(frame.get("seq", 0)),
                tag=str(frame.get("tag", "")),
                seed=int(frame.get("seed", 0)),
                kept=None if kept is None else bool(kept),
                score=None if score is None else float(score),
                episodes=episodes,
                arrays=arrays,
                tokens=tokens,
                **per_episode,
                **optional,
            )
        except KeyError as missing:
            raise ProtocolError(f"group frame lacks {missing.args[0]!r}") from None


def token_groups(groups: Iterable[Group]) -> List[Group]:
    """The groups, after checking that each carries token logs (``ValueError`` otherwise)."""
    groups = list(groups)
    missing = [g.group for g in groups if g.tokens is None]
    if missing:
        raise ValueError(
            f"group(s) {missing} carry no token logs: request the rollout with tokens=True "
            "(a failed group may lack them when an episode failed before its first prompt)"
        )
    return groups


def _concat(groups: List[Group], attr: str) -> np.ndarray:
    if not groups:
        return np.empty(0, dtype=ARRAY_DTYPES[attr])
    return np.concatenate([getattr(g, attr) for g in groups]).astype(ARRAY_DTYPES[attr], copy=False)


class Batch:
    """A finished rollout.

    ``groups`` holds every group the client received, by group id: in ``batch`` delivery
    the server sends the kept groups only; in ``stream`` delivery it sends every finished
    group (kept, dropped and failed). The numpy arrays and :attr:`episodes` cover the **kept
    groups only**, concatenated in group-id (= env-id) order, so row *i* of every array
    belongs to ``episodes[i]`` and everything is ready for a GRPO/PPO update;
    :meth:`arrays` ``(which="all")`` and :attr:`all_episodes` cover every received group.

    Attributes:
        rollout: the rollout id.
        delivery: ``"batch"`` or ``"stream"``.
        groups: every received :class:`Group`, by group id.
        kept, dropped, failed_groups: group ids from the server's verdict.
        metrics: RAGEN-named metrics (``train/<tag>/success``, ``rollout/filter_kept_ratio`` ...).
        num_episodes: episodes the rollout played (the verdict's ``episodes``).
        failed: episodes that failed (inference failed for good, or cancelled).
        env_ids, group_ids (int32), scores, rewards, penalties (float32), success (bool):
            one entry per episode of the kept groups.
        tokens: token mode (``tokens=True``) only: one :class:`TokenLog` per episode of the
            kept groups (``None`` otherwise); :meth:`token_arrays` has them concatenated and
            :func:`rollgym_client.pack_batch` padded for a trainer.
    """

    def __init__(self, rollout: str, delivery: str, groups: Iterable[Group], verdict: Dict[str, Any]):
        self.rollout = rollout
        self.delivery = delivery
        self.groups: List[Group] = sorted(groups, key=lambda g: g.group)
        self.kept: List[int] = [int(g) for g in verdict.get("kept", [])]
        self.dropped: List[int] = [int(g) for g in verdict.get("dropped", [])]
        self.failed_groups: List[int] = [int(g) for g in verdict.get("failed_groups", [])]
        self.metrics: Dict[str, float] = dict(verdict.get("metrics", {}))
        self.num_episodes: int = int(verdict.get("episodes", 0))
        self.failed: int = int(verdict.get("failed", 0))
        self.verdict = verdict
        kept = set(self.kept)
        failed = set(self.failed_groups)
        for g in self.groups:
            g.kept = g.group in kept
            g.failed = g.group in failed
        self.kept_groups: List[Group] = [g for g in self.groups if g.kept]
        self.episodes: List[Dict[str, Any]] = [e for g in self.kept_groups for e in g.episodes]
        for attr in ARRAY_DTYPES:
            setattr(self, attr, _concat(self.kept_groups, attr))
        self._tokens: Optional[List[TokenLog]] = None

    @property
    def tokens(self) -> Optional[List[TokenLog]]:
        """Token mode: one :class:`TokenLog` per episode of the kept groups, row *i* ↔
        ``episodes[i]``; ``None`` when the kept groups carry no token logs (no ``tokens=True``),
        ``ValueError`` when only some do."""
        if self._tokens is None:
            if self.kept_groups and all(g.tokens is None for g in self.kept_groups):
                return None
            self._tokens = [log for g in token_groups(self.kept_groups) for log in g.tokens or ()]
        return self._tokens

    def token_arrays(self, which: str = "kept") -> Dict[str, np.ndarray]:
        """Token mode: the groups' token arrays concatenated as on the wire, over ``"kept"``
        groups or ``"all"`` received groups. Names drop the dtype suffix: ``token_offsets``
        (n_episodes + 1, rebased over the whole batch, so usable as ``cu_seqlens``),
        ``token_ids``, ``loss_mask``, ``logprobs``, ``token_rewards``, ``prompt_lengths``,
        ``turn_counts``, ``turn_starts``, ``turn_ends`` (still relative to each episode's start).
        Raises ``ValueError`` when a group has no token logs."""
        if which not in ("kept", "all"):
            raise ValueError(f'which must be "kept" or "all", not {which!r}')
        groups = token_groups(self.kept_groups if which == "kept" else self.groups)
        out: Dict[str, np.ndarray] = {}
        for name, wire in TOKEN_ARRAYS.items():
            dtype = array_dtype(wire).newbyteorder("=")
            if name == "token_offsets":
                lengths = [np.diff(g.arrays[name].astype(np.int64)) for g in groups] or [np.empty(0, np.int64)]
                offsets = np.concatenate(([0], np.cumsum(np.concatenate(lengths))))
                if offsets[-1] > np.iinfo(np.int32).max:
                    raise ValueError(f"{int(offsets[-1])} tokens do not fit int32 offsets")
                out[name] = offsets.astype(dtype)
            else:
                parts = [g.arrays[name] for g in groups]
                out[name] = np.concatenate(parts).astype(dtype, copy=False) if parts else np.empty(0, dtype)
        return out

    @property
    def all_episodes(self) -> List[Dict[str, Any]]:
        """Episodes of every received group (stream delivery: dropped and failed ones too)."""
        return [e for g in self.groups for e in g.episodes]

    def arrays(self, which: str = "kept") -> Dict[str, np.ndarray]:
        """The per-episode arrays as a dict, over ``"kept"`` groups or ``"all"`` received groups."""
        if which not in ("kept", "all"):
            raise ValueError(f'which must be "kept" or "all", not {which!r}')
        groups = self.kept_groups if which == "kept" else self.groups
        return {attr: _concat(groups, attr) for attr in ARRAY_DTYPES}

    def group(self, group_id: int) -> Group:
        for g in self.groups:
            if g.group == group_id:
                return g
        raise KeyError(f"group {group_id} was not received (kept: {self.kept})")

    def __len__(self) -> int:
        return len(self.episodes)

    def __repr__(self) -> str:
        return (
            f"Batch(rollout={self.rollout!r}, groups={len(self.groups)}, kept={len(self.kept)}, "
            f"dropped={len(self.dropped)}, failed_groups={len(self.failed_groups)}, episodes={len(self.episodes)})"
        )


@dataclass
class StepResult:
    """One episode's outcome of an ``env_step``: what RAGEN's env manager computed."""

    env_id: int
    parsed: List[str]
    actions: List[str]
    reward: float
    reward_text: str
    format_penalty: bool
    done: bool
    success: bool
    #: The full chat for the next turn; ``None`` once the episode is done.
    messages: Optional[List[Dict[str, str]]]

    @classmethod
    def from_wire(cls, item: Dict[str, Any]) -> "StepResult":
        try:
            return cls(
                env_id=int(item["env_id"]),
                parsed=list(item.get("parsed", [])),
                actions=list(item.get("actions", [])),
                reward=float(item.get("reward", 0.0)),
                reward_text=str(item.get("reward_text", "")),
                format_penalty=bool(item.get("format_penalty", False)),
                done=bool(item["done"]),
                success=bool(item.get("success", False)),
                messages=item.get("messages"),
            )
        except KeyError as missing:
            raise ProtocolError(f"env_stepped result lacks {missing.args[0]!r}") from None
