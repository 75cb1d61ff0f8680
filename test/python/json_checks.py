"""What the Python check scripts share: a check that names what failed, JSON as JavaScript
writes it (NaN and infinities become null), to compare a batch with what the server sent, and
a group as comparable JSON with the first place two such values differ."""

from __future__ import annotations

import math

# Fields that differ between processes and are left out of the comparison: the rollout id
# (each shard plays its own share id) and each group frame's seq (a per-session counter).
PER_PROCESS = ("rollout", "seq")


def check(condition: bool, message: str) -> None:
    if not condition:
        raise AssertionError(message)


def clean(value):
    """JSON as JavaScript writes it: NaN and infinities become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [clean(v) for v in value]
    return value


def comparable_group(g) -> dict:
    return clean({
        "group": g.group, "tag": g.tag, "seed": g.seed, "kept": g.kept, "score": g.score, "failed": g.failed,
        "window": g.window, "episodes": g.episodes, "arrays": {k: v.tolist() for k, v in sorted(g.arrays.items())},
    })


def diff(a, b, path="") -> str:
    """The first place two JSON values differ."""
    if type(a) is not type(b):
        return f"{path}: {a!r} != {b!r}"
    if isinstance(a, dict):
        for k in sorted(set(a) | set(b)):
            if a.get(k) != b.get(k):
                return diff(a.get(k), b.get(k), f"{path}.{k}")
    if isinstance(a, list):
        if len(a) != len(b):
            return f"{path}: {len(a)} items != {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            if x != y:
                return diff(x, y, f"{path}[{i}]")
    return f"{path}: {a!r} != {b!r}"
