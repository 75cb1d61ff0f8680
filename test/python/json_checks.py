"""What the Python check scripts share: a check that names what failed, and JSON as JavaScript
writes it (NaN and infinities become null), to compare a batch with what the server sent."""

from __future__ import annotations

import math


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
