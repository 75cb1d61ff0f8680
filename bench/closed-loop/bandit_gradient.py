"""Which way does GRPO push the Bandit's arm choice, with and without RAGEN's group filter?

A policy that answers validly with probability ``valid`` and pulls the high-risk arm with
probability ``p`` among valid answers plays rollgym's Bandit: every member of a group shares
the seed, so a group's high-arm pulls all pay 1.0 (a quarter of the groups) or all pay 0, the
safe arm pays 0.1, an invalid answer scores the format penalty −0.1. For each ``p`` this
samples many steps of ``groups × group_size`` episodes, computes GRPO advantages (pack_batch's
``grpo_advantages``: unbiased std, eps 1e-6), keeps the groups the filter keeps, and averages
the policy gradient on the arm logit, Σ A·(1[high] − p) over valid kept episodes per step.
Positive: toward the high-risk arm.

    python bench/closed-loop/bandit_gradient.py --steps 2000          # the table in bench/RESULTS.md
    python bench/closed-loop/bandit_gradient.py --steps 2000 --groups 16 --group-size 8
    python bench/closed-loop/bandit_gradient.py --steps 2000 --kl-coef 0.1     # with the trainer's KL penalty
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
from rollgym_client.pack import grpo_advantages  # noqa: E402


#: The trainer's --filter settings as RAGEN's rollout_filter_ratio (top_k by reward std, largest).
RATIOS = {"none": 1.0, "top-quarter": 0.25, "top-eighth": 0.125}


def kept_groups(std: np.ndarray, strategy: str) -> np.ndarray:
    """Indices of the groups RAGEN's filter keeps: top_k by reward std (largest, include_zero),
    k = int(ratio × groups); ``none`` every group."""
    if strategy == "none":
        return np.arange(len(std))
    k = max(1, int(RATIOS[strategy] * len(std)))
    return np.argsort(-std, kind="stable")[:k]


def gradient(p: float, valid: float, groups: int, size: int, strategy: str, steps: int, rng: np.random.Generator,
             shared_payout: bool = True, kl_coef: float = 0.0, kl_ref: float = 0.5) -> float:
    total = 0.0
    for _ in range(steps):
        ok = rng.random((groups, size)) < valid
        high = ok & (rng.random((groups, size)) < p)
        if shared_payout:
            pays = np.repeat(rng.random((groups, 1)) < 0.25, size, axis=1)
        else:
            pays = rng.random((groups, size)) < 0.25
        scores = np.where(~ok, -0.1, np.where(high, np.where(pays, 1.0, 0.0), 0.1))
        adv = grpo_advantages(scores.reshape(-1), np.repeat(np.arange(groups), size)).reshape(groups, size)
        keep = kept_groups(scores.std(axis=1, ddof=1), strategy)
        push = adv * (high - p) * ok
        # The k3 KL term to a reference with p(high) = kl_ref: its gradient on the arm logit,
        # in expectation over the sampled arm, is kl_coef × (p − kl_ref) per valid episode.
        total += push[keep].sum() - kl_coef * (p - kl_ref) * ok[keep].sum()
    return total / steps


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--groups", type=int, default=8)
    parser.add_argument("--group-size", type=int, default=16)
    parser.add_argument("--valid", type=float, default=1.0, help="share of valid answers")
    parser.add_argument("--steps", type=int, default=4000, help="sampled steps per point")
    parser.add_argument("--kl-coef", type=float, default=0.0, help="the trainer's --kl-coef (toward the SFT policy)")
    parser.add_argument("--kl-ref", type=float, default=0.5, help="the SFT policy's p(high) among valid answers")
    parser.add_argument("--independent", action="store_true", help="each episode draws its own payout (RAGEN's per-instance seeds)")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    print(f"groups {args.groups} x {args.group_size}, valid {args.valid:g}, kl {args.kl_coef:g} to p = {args.kl_ref:g}, "
          f"payout {'independent' if args.independent else 'shared per group'}")
    print("| p(high) | " + " | ".join(f"filter {s}" for s in RATIOS) + " |")
    print("| --- |" + " --- |" * len(RATIOS))
    for p in (0.1, 0.3, 0.5, 0.7, 0.8, 0.9, 0.93, 0.95, 0.97, 0.98):
        row = [gradient(p, args.valid, args.groups, args.group_size, s, args.steps, rng, not args.independent,
                        args.kl_coef, args.kl_ref) for s in RATIOS]
        print(f"| {p:g} | " + " | ".join(f"{g:+.2f}" for g in row) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
