"""What the engine check scripts share: python on the import path, and a counting
assert whose failure message ends the script with a non-zero exit."""

from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "python"))

made = 0


def check(condition: bool, message: str) -> None:
    global made
    made += 1
    if not condition:
        raise AssertionError(message)
