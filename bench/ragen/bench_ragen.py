#!/usr/bin/env python3
"""Measure RAGEN's Sokoban generation speed (SimpleSokoban: 6x6, 1 box, search_depth 300).

Run:  RAGEN_SRC=... taskset -c 0 python3 bench/ragen/bench_ragen.py [SECONDS]   (default 20)
Calls env.reset(seed) for seeds 0, 1, 2, ... until SECONDS have elapsed; prints rooms/s.
"""
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
# Checkouts of the three upstream projects (not part of this repo): RAGEN_SRC=dir containing
# RAGEN/, gym-sokoban/ and Gymnasium/ (RAGEN @20daedc, gym-sokoban @8e06e44, Gymnasium >= 1.2.1).
SRC = os.environ.get("RAGEN_SRC")
if not SRC:
    sys.exit("set RAGEN_SRC to a folder holding RAGEN/, gym-sokoban/ and Gymnasium/ checkouts")
sys.path[:0] = [os.path.join(HERE, "stubs"), os.path.join(SRC, "Gymnasium"),
                os.path.join(SRC, "gym-sokoban"), os.path.join(SRC, "RAGEN")]

import yaml  # noqa: E402
import ragen.env.sokoban.env as sokoban_env_mod  # noqa: E402
from ragen.env.sokoban.env import SokobanEnv  # noqa: E402
from ragen.env.sokoban.config import SokobanEnvConfig  # noqa: E402

budget = float(sys.argv[1]) if len(sys.argv) > 1 else 20.0

with open(os.path.join(SRC, "RAGEN", "config", "envs.yaml")) as f:
    env_config = yaml.safe_load(f)["custom_envs"]["SimpleSokoban"]["env_config"]
cfg = SokobanEnvConfig(**env_config)
assert cfg.dim_room == (6, 6) and cfg.num_boxes == 1 and cfg.search_depth == 300
env = SokobanEnv(cfg)

failures = [0]
_real = sokoban_env_mod.generate_room


def _count(*a, **k):
    try:
        return _real(*a, **k)
    except (RuntimeError, RuntimeWarning):
        failures[0] += 1
        raise


sokoban_env_mod.generate_room = _count

seed = 0
t0 = time.perf_counter()
while True:
    env.reset(seed=seed)
    seed += 1
    el = time.perf_counter() - t0
    if el >= budget:
        break
print(f"RAGEN SimpleSokoban (6x6, 1 box, search_depth 300): {seed} rooms (seeds 0..{seed - 1}) "
      f"in {el:.2f} s = {seed / el:.1f} rooms/s; generation failures (reseeded): {failures[0]}")
