"""Token logs of a token-mode rollout (``tokens=True``): :class:`TokenLog`, one per episode,
made of numpy views of a ``group`` frame's typed arrays (PROTOCOL.md, "Token logs").

A group frame of a token-mode rollout carries every episode's log concatenated:

- ``token_offsets_i32``: n_episodes + 1 offsets; episode *i* is ``[off[i], off[i + 1])`` of
  the four per-token arrays below.
- ``token_ids_i32``: the first prompt, then per turn the exact sampled ids and the ids
  inserted before the next turn.
- ``loss_mask_u8``: 1 exactly at sampled ids, 0 elsewhere.
- ``logprobs_f32``: the engine's logprob of each sampled id, 0 elsewhere.
- ``token_rewards_f32``: each turn's reward on the turn's last sampled id, 0 elsewhere.
- ``prompt_lengths_i32``: per episode, the length of the first prompt.
- ``turn_counts_i32``: per episode, the number of model turns.
- ``turn_starts_i32``, ``turn_ends_i32``: concatenated over episodes (episode *i* owns the
  next ``turn_counts[i]`` entries): ``[start, end)`` of each turn's sampled ids, relative to
  the episode's first token.

:func:`token_logs_from_frame` checks all of that (vectorised, no per-token loops) and slices
the arrays per episode without copying.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Dict, List, Optional

import numpy as np

from .codec import decode_array
from .errors import ProtocolError

#: The token-log arrays of a token-mode ``group`` frame: name (as in ``Group.arrays``) → wire field.
TOKEN_ARRAYS = {
    "token_offsets": "token_offsets_i32",
    "token_ids": "token_ids_i32",
    "loss_mask": "loss_mask_u8",
    "logprobs": "logprobs_f32",
    "token_rewards": "token_rewards_f32",
    "prompt_lengths": "prompt_lengths_i32",
    "turn_counts": "turn_counts_i32",
    "turn_starts": "turn_starts_i32",
    "turn_ends": "turn_ends_i32",
}
_WIRES = tuple(TOKEN_ARRAYS.values())


@dataclass(frozen=True, eq=False)
class TokenLog:
    """One episode's token log: a single sequence that only ever grew during the episode.

    Every array is a read-only view of the ``group`` frame's bytes (copy it to modify);
    all have one entry per token except ``turn_starts``/``turn_ends`` (one per model turn).

    Attributes:
        ids: int32 token ids: the first prompt, then per turn the exact sampled ids followed
            by the ids inserted before the next turn (env feedback, chat-template glue).
        loss_mask: uint8, 1 exactly at sampled ids (the tokens to train on), 0 elsewhere.
        logprobs: float32, the engine's logprob of each sampled id, 0 elsewhere; NaN at a
            sampled id whose logprob the engine did not report (llama.cpp leaves out tokens
            that end inside a UTF-8 character). ``logprob_mask`` marks the known ones.
        rewards: float32, each turn's reward on that turn's last sampled id, 0 elsewhere.
        turn_starts, turn_ends: int32, ``ids[turn_starts[k]:turn_ends[k]]`` are turn *k*'s
            sampled ids (positions relative to the episode's first token).
        prompt_length: the length of the first prompt (``ids[:prompt_length]``).
        versions: int32, the weight-version ordinal that sampled each id, -1 at prompt and
            inserted ids; ``None`` until a trainer has begun an update (PROTOCOL.md "Versions").
    """

    ids: np.ndarray
    loss_mask: np.ndarray
    logprobs: np.ndarray
    rewards: np.ndarray
    turn_starts: np.ndarray
    turn_ends: np.ndarray
    prompt_length: int
    versions: Optional[np.ndarray] = None

    def __len__(self) -> int:
        return int(self.ids.shape[0])

    @property
    def num_turns(self) -> int:
        return int(self.turn_starts.shape[0])

    @property
    def prompt_ids(self) -> np.ndarray:
        """The first prompt's ids (a view)."""
        return self.ids[: self.prompt_length]

    @property
    def logprob_mask(self) -> np.ndarray:
        """uint8, 1 at sampled ids whose logprob the engine reported (``loss_mask`` less the NaNs)."""
        return ((self.loss_mask != 0) & ~np.isnan(self.logprobs)).astype(np.uint8)

    @property
    def sampled_ids(self) -> np.ndarray:
        """Every sampled id, turn after turn (a copy: ``ids[loss_mask == 1]``)."""
        return self.ids[self.loss_mask != 0]

    def turn(self, k: int) -> np.ndarray:
        """Turn *k*'s sampled ids (a view)."""
        return self.ids[int(self.turn_starts[k]) : int(self.turn_ends[k])]

    def __repr__(self) -> str:
        return (
            f"TokenLog(tokens={len(self)}, prompt_length={self.prompt_length}, turns={self.num_turns}, "
            f"sampled={int(np.count_nonzero(self.loss_mask))})"
        )


def _bad(field: str, message: str) -> ProtocolError:
    return ProtocolError(f"group frame: {field}: {message}", field=field)


def _first(condition: np.ndarray) -> int:
    return int(np.flatnonzero(condition)[0])


def token_logs_from_frame(
    frame: Dict[str, Any], n_episodes: int, arrays: Optional[Dict[str, np.ndarray]] = None
) -> Optional[List[TokenLog]]:
    """The episodes' :class:`TokenLog` s from a ``group`` frame, or ``None`` when the frame has
    no token log (the rollout was not requested with ``tokens=True``).

    ``arrays`` may hold the frame's typed arrays already decoded, by wire field name (what
    :meth:`Group.from_frame` has at hand), so they are not decoded twice.

    Raises :class:`ProtocolError` (its ``field`` names the wire field) when only some token
    fields are present, when lengths or offsets disagree, or when the loss mask, logprobs or
    token rewards are not where the turn boundaries say.
    """
    present = [wire for wire in _WIRES if wire in frame]
    if not present:
        return None
    if len(present) != len(_WIRES):
        missing = next(wire for wire in _WIRES if wire not in frame)
        raise _bad(missing, f"missing (the frame has {present[0]!r}: token logs need all of {list(_WIRES)})")
    if arrays is None:
        a = {name: decode_array(wire, frame[wire]) for name, wire in TOKEN_ARRAYS.items()}
    else:
        a = {name: arrays[wire] for name, wire in TOKEN_ARRAYS.items()}
    n = n_episodes
    # Array methods (x.any()) rather than np.any(x) throughout: a frame has few episodes, so
    # numpy's per-call overhead, not the element work, is most of the cost here.

    # Offsets: n + 1 of them, from 0, never decreasing, ending at the token count.
    off = a["token_offsets"]
    total = a["token_ids"].shape[0]
    if off.shape[0] != n + 1:
        raise _bad("token_offsets_i32", f"{off.shape[0]} entries, expected n_episodes + 1 = {n + 1}")
    if off[0] != 0:
        raise _bad("token_offsets_i32", f"starts at {int(off[0])}, not 0")
    off64 = off.astype(np.int64)
    lengths = off64[1:] - off64[:-1]
    if (lengths < 0).any():
        i = _first(lengths < 0)
        raise _bad("token_offsets_i32", f"decreases at episode {i} ({int(off[i])} → {int(off[i + 1])})")
    if off[-1] != total:
        raise _bad("token_offsets_i32", f"ends at {int(off[-1])}, but token_ids_i32 has {total} ids")
    for name in ("loss_mask", "logprobs", "token_rewards"):
        if a[name].shape[0] != total:
            raise _bad(TOKEN_ARRAYS[name], f"{a[name].shape[0]} entries, token_ids_i32 has {total}")

    # Per-episode arrays.
    prompt = a["prompt_lengths"]
    counts = a["turn_counts"]
    for name, values in (("prompt_lengths", prompt), ("turn_counts", counts)):
        if values.shape[0] != n:
            raise _bad(TOKEN_ARRAYS[name], f"{values.shape[0]} entries, the frame has {n} episodes")
        if (values < 0).any():
            raise _bad(TOKEN_ARRAYS[name], f"negative at episode {_first(values < 0)}")
    if (prompt > lengths).any():
        i = _first(prompt > lengths)
        raise _bad("prompt_lengths_i32", f"episode {i}'s prompt ({int(prompt[i])} ids) is longer than its log ({int(lengths[i])} ids)")

    # Turns: sum(turn_counts) of each; inside the episode, after the prompt, in order.
    starts = a["turn_starts"].astype(np.int64)
    ends = a["turn_ends"].astype(np.int64)
    n_turns = int(counts.sum(dtype=np.int64))
    for name, values in (("turn_starts", starts), ("turn_ends", ends)):
        if values.shape[0] != n_turns:
            raise _bad(TOKEN_ARRAYS[name], f"{values.shape[0]} entries, turn_counts_i32 sums to {n_turns}")
    episode_of = np.arange(n).repeat(counts)
    if (starts < prompt[episode_of]).any():
        k = _first(starts < prompt[episode_of])
        raise _bad("turn_starts_i32", f"turn {k} (episode {int(episode_of[k])}) starts at {int(starts[k])}, inside the prompt")
    if (ends < starts).any():
        k = _first(ends < starts)
        raise _bad("turn_ends_i32", f"turn {k} (episode {int(episode_of[k])}) ends at {int(ends[k])} before it starts at {int(starts[k])}")
    if (ends > lengths[episode_of]).any():
        k = _first(ends > lengths[episode_of])
        raise _bad("turn_ends_i32", f"turn {k} (episode {int(episode_of[k])}) ends at {int(ends[k])}, past the episode's {int(lengths[episode_of[k]])} ids")
    overlap = (episode_of[1:] == episode_of[:-1]) & (starts[1:] < ends[:-1])
    if overlap.any():
        k = _first(overlap) + 1
        raise _bad("turn_starts_i32", f"turn {k} (episode {int(episode_of[k])}) starts at {int(starts[k])}, before the previous turn ends")

    # The loss mask is 1 exactly inside the turns; logprobs and rewards are 0 outside them.
    # The checks above make the non-empty turns disjoint intervals of the frame's tokens, in
    # order, so each starts and ends at a position of its own (a start may meet the previous
    # turn's end): +1 at starts and -1 at ends are the steps of the expected mask. The mask
    # matches exactly when its own steps (differences, wrapping in int8 as a running sum
    # would) are these, which spares the running sum on the way that succeeds.
    first = off64[:-1][episode_of]
    nonempty = ends > starts
    abs_starts, abs_ends = (first + starts)[nonempty], (first + ends)[nonempty]
    edges = np.zeros(total + 1, dtype=np.int8)
    edges[abs_starts] = 1
    edges[abs_ends] -= 1
    mask = a["loss_mask"]
    steps = np.empty(total + 1, dtype=np.int8)
    signed = mask.view(np.int8)
    if total:
        steps[0] = signed[0]
        np.subtract(signed[1:], signed[:-1], out=steps[1:total])
        steps[total] = -signed[-1]
    else:
        steps[0] = 0
    if (steps != edges).any():
        inside = edges[:total].cumsum(dtype=np.int8).view(np.uint8)
        t = _first(mask != inside)
        i = int(np.searchsorted(off, t, side="right")) - 1
        raise _bad("loss_mask_u8", f"{int(mask[t])} at token {t - int(off[i])} of episode {i}, where the turn boundaries say {int(inside[t])}")
    sampled = mask.view(np.bool_)  # now known to hold only 0 and 1
    if ((a["logprobs"] != 0) > sampled).any():
        t = _first((a["logprobs"] != 0) > sampled)
        raise _bad("logprobs_f32", f"nonzero at token {t}, which was not sampled")
    last = np.zeros(total, dtype=bool)
    last[abs_ends - 1] = True
    if ((a["token_rewards"] != 0) > last).any():
        t = _first((a["token_rewards"] != 0) > last)
        raise _bad("token_rewards_f32", f"nonzero at token {t}, which is not the last sampled id of a turn")

    # Versions (once a trainer has used updates): one per token, -1 or an ordinal.
    versions = None
    if "token_versions_i32" in frame:
        versions = arrays["token_versions_i32"] if arrays is not None and "token_versions_i32" in arrays else decode_array("token_versions_i32", frame["token_versions_i32"])
        if versions.shape[0] != total:
            raise _bad("token_versions_i32", f"{versions.shape[0]} entries, token_ids_i32 has {total}")
        if (versions < -1).any():
            raise _bad("token_versions_i32", f"{int(versions[_first(versions < -1)])} at token {_first(versions < -1)}; ordinals are >= 0, -1 where none")

    # One view per episode (plain ints for the bounds: numpy scalars make slicing slower).
    bounds = off.tolist()
    turn_bounds = [0, *itertools.accumulate(counts.tolist())]
    prompts = prompt.tolist()
    ids, lp, rw = a["token_ids"], a["logprobs"], a["token_rewards"]
    ts, te = a["turn_starts"], a["turn_ends"]
    logs = []
    for i in range(n):
        lo, hi = bounds[i], bounds[i + 1]
        tlo, thi = turn_bounds[i], turn_bounds[i + 1]
        logs.append(
            TokenLog(
                ids[lo:hi], mask[lo:hi], lp[lo:hi], rw[lo:hi], ts[tlo:thi], te[tlo:thi], prompts[i], None if versions is None else versions[lo:hi]
            )
        )
    return logs
