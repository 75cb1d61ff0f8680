"""Token-mode batches as a PPO/GRPO trainer consumes them: :func:`pack_batch` pads the
episodes' token logs into ``[B, T]`` arrays (verl's and OpenRLHF's multi-turn layout: one row
per episode, a loss mask over the model's own tokens), and :func:`grpo_advantages` computes
GRPO's outcome advantages. numpy only; rows are filled with one vectorised scatter."""

from __future__ import annotations

import operator
from typing import Any, Dict, List, Optional, Sequence, Union

import numpy as np

from .batch import Batch, Group, token_groups

#: The ``advantages=`` choices of :func:`pack_batch`.
ADVANTAGE_MODES = ("grpo", "scores", None)


def grpo_advantages(scores: np.ndarray, group_ids: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """GRPO's outcome advantage of each episode: ``(score − group mean) / (group std + eps)``.

    This is verl's ``compute_grpo_outcome_advantage`` (``verl/trainer/ppo/core_algos.py``, the
    GRPO RAGEN trains with): the std is the unbiased sample std (``torch.std``, ddof = 1, as
    in TRL's ``GRPOTrainer`` and OpenRLHF's group normalisation), ``eps = 1e-6``, and a group
    of one episode gets mean 0 and std 1, so its advantage is its score. Groups are the
    distinct values of ``group_ids``; a group whose scores are all equal gets 0. Computed in
    float64, returned as float32.
    """
    scores = np.asarray(scores, dtype=np.float64)
    group_ids = np.asarray(group_ids)
    if scores.ndim != 1 or scores.shape != group_ids.shape:
        raise ValueError(f"scores {scores.shape} and group_ids {group_ids.shape} must be 1-D and of the same length")
    if scores.shape[0] == 0:
        return np.empty(0, dtype=np.float32)
    _, inverse, counts = np.unique(group_ids, return_inverse=True, return_counts=True)
    inverse = inverse.reshape(-1)
    mean = np.bincount(inverse, weights=scores, minlength=counts.shape[0]) / counts
    squares = np.bincount(inverse, weights=(scores - mean[inverse]) ** 2, minlength=counts.shape[0])
    std = np.sqrt(squares / np.maximum(counts - 1, 1))
    single = counts == 1
    mean[single] = 0.0
    std[single] = 1.0
    return ((scores - mean[inverse]) / (std[inverse] + eps)).astype(np.float32)


def _groups_of(batch: Union[Batch, Group, Sequence[Group]]) -> List[Group]:
    if isinstance(batch, Batch):
        return batch.kept_groups
    if isinstance(batch, Group):
        return [batch]
    groups = list(batch)
    for g in groups:
        if not isinstance(g, Group):
            raise TypeError(f"pack_batch takes a Batch, a Group or a sequence of Groups, got a {type(g).__name__} in the sequence")
    return groups


def pack_batch(
    batch: Union[Batch, Group, Sequence[Group]],
    pad_id: int = 0,
    max_length: Optional[int] = None,
    advantages: Optional[str] = "grpo",
    left_pad: bool = False,
    truncate: bool = False,
    eps: float = 1e-6,
    current_version: Optional[int] = None,
) -> Dict[str, np.ndarray]:
    """Pad a token-mode batch into the ``[B, T]`` arrays a PPO/GRPO trainer consumes.

    One row per episode (a :class:`Batch`'s kept groups in env-id order, so row *i* ↔
    ``batch.episodes[i]``; or the given groups in order, e.g. from a stream). Each row is the
    episode's whole token log — first prompt, sampled ids, inserted ids, … — so a multi-turn
    episode is one sequence and only its sampled ids are trained on (verl's ``response_mask``,
    OpenRLHF's ``action_mask``).

    Args:
        batch: a :class:`Batch` from a rollout requested with ``tokens=True``, one
            :class:`Group`, or a sequence of groups. Every group needs token logs
            (``ValueError`` otherwise).
        pad_id: the id in padding positions.
        max_length: the width ``T`` of every row (default: the longest episode). An episode
            longer than it raises ``ValueError`` unless ``truncate=True``.
        advantages: ``"grpo"`` — :func:`grpo_advantages` of the episodes' scores within each
            group (one :class:`Group` = one GRPO group, so groups of different rollouts never
            mix); ``"scores"`` — the scores as they are (e.g. when the server's
            ``reward_normalization`` already normalised them); ``None`` — no ``advantages``
            key (compute your own, e.g. GAE from ``token_rewards`` and a critic).
            Broadcast over the episode's loss-mask positions, 0 elsewhere.
        left_pad: pad on the left (tokens flush right, as for generation) instead of the right.
        truncate: cut episodes longer than ``max_length`` to their first ``max_length`` tokens
            (their later turns leave the loss; ``truncated`` marks them).
        eps: GRPO's std epsilon.
        current_version: the ordinal of the weights being trained (e.g. ``client.version
            ["ordinal"]``); ``ages`` counts versions from each token's (a log without versions was
            played before any update: ordinal 0). One older than a group's ``max_version`` or
            a token's version raises ``ValueError`` naming both (the ordinals would count from
            another start, and ages would be negative).

    Returns:
        A dict of numpy arrays, ``[B, T]`` unless noted. Column *t* of every per-token array
        describes ``input_ids[:, t]``; a causal LM scores that token with the logits of
        column *t − 1*, so compare ``log_softmax(logits[:, :-1]).gather(input_ids[:, 1:])``
        with ``old_logprobs[:, 1:]`` under ``loss_mask[:, 1:]``.

        - ``input_ids`` int64: the token logs, padded with ``pad_id``.
        - ``attention_mask`` int64: 1 at real tokens.
        - ``loss_mask`` int64: 1 at sampled ids (the episode's ``loss_mask``), 0 at prompt,
          inserted and padding tokens.
        - ``position_ids`` int64: ``clip(cumsum(attention_mask) − 1, 0)``, verl's
          ``compute_position_id_with_mask``: 0 … len − 1 over the real tokens (padding gets 0
          on the left, len − 1 on the right).
        - ``old_logprobs`` float32: the engine's logprob of each sampled id, 0 elsewhere (also 0
          where the engine reported none: see ``logprob_mask``).
        - ``logprob_mask`` int64: 1 at sampled ids whose logprob the engine reported; leave the
          others out of importance ratios (equal to ``loss_mask`` on vLLM).
        - ``token_rewards`` float32: each turn's reward on its last sampled id, 0 elsewhere.
        - ``advantages`` float32 (unless ``advantages=None``): the episode's advantage at its
          loss-mask positions, 0 elsewhere.
        - ``scores`` float32 [B], ``group_ids`` int32 [B], ``env_ids`` int32 [B].
        - ``lengths`` int64 [B]: real tokens in the row; ``prompt_lengths`` int64 [B];
          ``truncated`` bool [B].
        - Once a trainer has begun a weight update (every log has ``versions``):
          ``versions`` int64: the ordinal that sampled each id, -1 at prompt, inserted and
          padding tokens; with ``current_version`` also ``ages`` int64: ``current_version −
          versions`` at sampled ids, 0 elsewhere, for importance-sampling corrections and
          staleness masks (e.g. ``loss_mask & (ages <= 2)``); ``min_versions`` int64 [B]: each
          episode's oldest sampled ordinal (-1 when it has none).

        ``input_ids[loss_mask == 1]`` is every episode's sampled ids, turn after turn, episode
        after episode, and ``old_logprobs[loss_mask == 1]`` their logprobs in the same order
        (cut after ``max_length`` tokens for truncated episodes).
    """
    if advantages not in ADVANTAGE_MODES:
        raise ValueError(f'advantages must be "grpo", "scores" or None, not {advantages!r}')
    pad_id = operator.index(pad_id)
    if max_length is not None:
        max_length = operator.index(max_length)
        if max_length < 1:
            raise ValueError(f"max_length must be >= 1, got {max_length}")
    groups = token_groups(_groups_of(batch))
    logs = [log for g in groups for log in g.tokens or ()]
    b = len(logs)
    full = np.array([len(log) for log in logs], dtype=np.int64)
    if max_length is None:
        width = int(full.max()) if b else 0
    else:
        width = max_length
        over = np.flatnonzero(full > width)
        if over.size and not truncate:
            env_ids = np.concatenate([g.env_ids for g in groups])
            i = int(over[0])
            raise ValueError(
                f"{over.size} episode(s) are longer than max_length={width}, e.g. row {i} (env {int(env_ids[i])}) "
                f"with {int(full[i])} tokens: raise max_length or pass truncate=True"
            )
    lengths = np.minimum(full, width)

    # Where each kept token goes: row = its episode, column = its position (+ left padding).
    rows = np.repeat(np.arange(b), lengths)
    first = np.concatenate(([0], np.cumsum(lengths)[:-1])) if b else np.zeros(0, np.int64)
    cols = np.arange(rows.shape[0], dtype=np.int64) - np.repeat(first, lengths)
    if left_pad:
        cols += (width - lengths)[rows]

    def flat(attr: str) -> np.ndarray:
        parts = [getattr(log, attr)[:width] for log in logs]
        return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)

    mask = flat("loss_mask")
    dest = rows * width + cols  # flat index into a [B, T] array

    def scatter(values: Union[np.ndarray, int], dtype: Any, fill: int = 0) -> np.ndarray:
        array = np.full((b, width), fill, dtype=dtype)
        array.reshape(-1)[dest] = values
        return array

    out: Dict[str, np.ndarray] = {}
    out["input_ids"] = scatter(flat("ids"), np.int64, pad_id)
    out["attention_mask"] = scatter(1, np.int64)
    out["loss_mask"] = scatter(mask, np.int64)
    out["position_ids"] = np.clip(np.cumsum(out["attention_mask"], axis=1) - 1, 0, None)
    logprobs = flat("logprobs")
    out["old_logprobs"] = scatter(np.where(np.isnan(logprobs), np.float32(0), logprobs), np.float32)
    out["logprob_mask"] = scatter(flat("logprob_mask"), np.int64)
    out["token_rewards"] = scatter(flat("rewards"), np.float32)

    scores = np.concatenate([g.scores for g in groups]).astype(np.float32) if groups else np.empty(0, np.float32)
    if advantages is not None:
        if advantages == "grpo":
            # One Group is one GRPO group (group ids repeat across rollouts and streams).
            segment = np.repeat(np.arange(len(groups)), [len(g.tokens or ()) for g in groups])
            per_episode = grpo_advantages(scores, segment, eps)
        else:
            per_episode = scores
        out["advantages"] = scatter(np.where(mask != 0, per_episode[rows], np.float32(0)), np.float32)

    if b and (current_version is not None or all(log.versions is not None for log in logs)):
        # A log without versions was played before any update: ordinal 0 at its sampled ids.
        parts = [
            (log.versions if log.versions is not None else np.where(log.loss_mask != 0, 0, -1))[:width]
            for log in logs
        ]
        versions = scatter(np.concatenate(parts).astype(np.int64), np.int64, -1)
        sampled_versions = np.where(out["loss_mask"] != 0, versions, -1)
        out["versions"] = sampled_versions
        oldest = np.where(sampled_versions >= 0, sampled_versions, np.iinfo(np.int64).max).min(axis=1)
        out["min_versions"] = np.where(oldest == np.iinfo(np.int64).max, -1, oldest)
        if current_version is not None:
            current = operator.index(current_version)
            _check_current(current, groups, sampled_versions)
            out["ages"] = np.where(sampled_versions >= 0, current - sampled_versions, 0)

    def per_group(attr: str, dtype) -> np.ndarray:
        return np.concatenate([getattr(g, attr) for g in groups]).astype(dtype) if groups else np.empty(0, dtype)

    out["scores"] = scores
    out["group_ids"] = per_group("group_ids", np.int32)
    out["env_ids"] = per_group("env_ids", np.int32)
    out["lengths"] = lengths
    out["prompt_lengths"] = np.minimum(np.array([log.prompt_length for log in logs], dtype=np.int64), width)
    out["truncated"] = full > width
    return out


def _check_current(current: int, groups: Sequence[Group], sampled_versions: np.ndarray) -> None:
    """``current`` is at least every version that played a group (or ages would be negative)."""
    for g in groups:
        if current < g.max_version:
            raise ValueError(
                f"current_version={current} is older than group {g.group}'s max_version {g.max_version} "
                f"(rollout {g.rollout!r}): pass the ordinal in force, client.version['ordinal']"
            )
    if sampled_versions.size and current < int(sampled_versions.max()):
        row = int(np.flatnonzero((sampled_versions > current).any(axis=1))[0])
        raise ValueError(
            f"current_version={current} is older than version {int(sampled_versions[row].max())} that sampled "
            f"tokens of row {row}: pass the ordinal in force, client.version['ordinal']"
        )
