"""The closed loop on a CPU: a tiny model learns RAGEN's Bandit through rollgym.

One command runs everything: ``rollgym sft`` writes demonstrations from the built-in oracle
(with a chosen arm mix), the trainer fine-tunes a :class:`rollgym_engine.TinyLM` on them (SFT
warm start), starts the engine (``python -m rollgym_engine``) and ``rollgym serve --llm`` in
front of it, then runs synchronous GRPO through rollgym's token stream:

    rollout(tokens=True) → pack_batch → on-policy check → PPO-clip step → save → pause/load/resume

each step, with RAGEN's reward-variance group filter under a named setting (or none, the
ablation), and validation on RAGEN's 512 validation seeds at temperature 1 every few steps.
It writes a learning curve (CSV, SVG) and a JSON summary, and exits non-zero when a check
fails: the on-policy check (the trainer's logprobs of the sampled tokens under the weights it
pushed equal the engine's recorded ones), the weight version the engine reports, or a group
lost between request and verdict.

    python python/examples/train_grpo.py --out runs/bandit-filter --filter top-quarter
    python python/examples/train_grpo.py --out runs/bandit-all --filter none
    python python/examples/train_grpo.py plot runs/bandit-filter/curve.csv runs/bandit-all/curve.csv -o curve.svg

Needs torch, numpy, msgpack and websockets (``.ci/run`` installs them into
``~/.cache/rollgym/train-venv``); ``rollgym`` is run from this checkout with its pinned node.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import random
import re
import resource
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON_DIR = os.path.dirname(HERE)
ROOT = os.path.dirname(PYTHON_DIR)
sys.path.insert(0, PYTHON_DIR)

from rollgym_client import Client, pack_batch  # noqa: E402
from rollgym_engine.model import ModelConfig, TinyLM  # noqa: E402
from rollgym_engine.vocab import PAD_ID, sft_example  # noqa: E402

#: Named group-filter settings (RAGEN's rollout_filter_*). "top-quarter" is RAGEN V1's
#: rollout_filter_ratio 0.25 by reward std (top_k 0.25, largest); "none" keeps every group.
FILTERS: Dict[str, Optional[Dict[str, object]]] = {
    "top-quarter": {"strategy": "top_k", "value": 0.25, "type": "largest", "metric": "reward_variance", "include_zero": True},
    # rollout_filter_ratio 0.125 (1 of 8 groups): on the Bandit the top quarter's push toward the
    # risky arm turns negative near p = 0.95, the top eighth's near 0.97 (bandit_gradient.py).
    "top-eighth": {"strategy": "top_k", "value": 0.125, "type": "largest", "metric": "reward_variance", "include_zero": True},
    "none": {"strategy": "top_p", "value": 1.0},
}
#: RAGEN's seed.val: validation episode i plays seed VAL_SEED + i.
VAL_SEED = 123
#: Deliberate bugs the test injects to show the checks catch them.
FAULTS = ("none", "shift-mask", "stale-weights")


class CheckFailed(RuntimeError):
    pass


# -- processes ---------------------------------------------------------------------------------


def node_binary() -> str:
    pinned = os.path.join(ROOT, "node_modules", ".bin", "node")
    return pinned if os.path.exists(pinned) else "node"


def rollgym_cmd(*args: str) -> List[str]:
    return [node_binary(), os.path.join(ROOT, "src", "cli", "main.ts"), *args]


def rollgym_env() -> Dict[str, str]:
    """The environment of a rollgym child: it stops on its own once this process has gone, even
    when that is a SIGKILL, which skips main's cleanup (docs/server.md "Shutdown")."""
    return dict(os.environ, ROLLGYM_EXIT_WITH_PARENT="1")


def start(cmd: List[str], pattern: str, children: List[subprocess.Popen],
          env: Optional[Dict[str, str]] = None) -> Tuple[subprocess.Popen, str]:
    """Starts a server and returns it with the URL it prints when listening. It joins `children`
    at once, so a run ended while the server starts still stops it."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env, cwd=ROOT)
    children.append(proc)
    assert proc.stdout is not None
    for line in proc.stdout:
        match = re.search(pattern, line)
        if match:
            return proc, match.group(1)
    raise RuntimeError(f"{' '.join(cmd[:3])} … exited before listening (exit {proc.wait()})")


def post(url: str, body: Optional[dict] = None) -> dict:
    data = json.dumps(body or {}).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(request, timeout=60) as answer:
        return json.loads(answer.read())


def get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=60) as answer:
        return json.loads(answer.read())


def cpu_seconds(children: Sequence[subprocess.Popen]) -> float:
    """CPU time (user + system) of this process, of the children it has waited for (``rollgym
    sft``) and of the running engine and server."""
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = time.process_time() + reaped.ru_utime + reaped.ru_stime
    tick = os.sysconf("SC_CLK_TCK")
    for child in children:
        try:
            with open(f"/proc/{child.pid}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick
        except OSError:
            pass
    return total


class Progress:
    """One line, redrawn: the phase, a bar, and the latest figures."""

    def __init__(self, quiet: bool):
        self.quiet = quiet

    def show(self, phase: str, done: int, total: int, note: str) -> None:
        if self.quiet:
            return
        width = 24
        filled = int(width * done / max(total, 1))
        sys.stderr.write(f"\r{phase:>4} [{'#' * filled}{'-' * (width - filled)}] {done}/{total} {note}\x1b[K")
        sys.stderr.flush()

    def end(self) -> None:
        if not self.quiet:
            sys.stderr.write("\n")


# -- SFT -----------------------------------------------------------------------------------------


def load_sft(path: str) -> List[Tuple[List[int], List[int]]]:
    examples = []
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                examples.append(sft_example(json.loads(line)["messages"]))
    return examples


def split_rows(rows: Sequence[Tuple[List[int], int]]) -> Tuple[List[List[int]], List[Tuple[int, List[int]]]]:
    """Rows (ids, split) as distinct prefixes ids[:split] and (prefix index, suffix) pairs."""
    index: Dict[Tuple[int, ...], int] = {}
    pairs = []
    for ids, split in rows:
        key = tuple(ids[:split])
        pairs.append((index.setdefault(key, len(index)), list(ids[split:])))
    return [list(k) for k in index], pairs


def sft(model: TinyLM, examples, steps: int, batch: int, prompts: int, lr: float, seed: int, progress: Progress,
        prompt_loss: float = 0.0) -> List[float]:
    """Next-token loss on the assistant tokens, plus ``prompt_loss`` times the loss on the prompt
    tokens (TRL's default of training on the whole conversation; a model that starts from
    random weights learns to copy the arm names from the prompt much sooner with it); each
    batch is ``prompts`` distinct first prompts with ``batch / prompts`` examples each, so a
    prompt's forward pass serves several examples."""
    rng = random.Random(seed)
    by_prompt: Dict[Tuple[int, ...], list] = {}
    for ids, mask in examples:
        by_prompt.setdefault(tuple(ids[: mask.index(1)]), []).append((ids, mask))
    keys = sorted(by_prompt)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    # Linear decay to a tenth: the last steps polish the answers' spelling.
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda k: 1 - 0.9 * k / max(steps, 1))
    losses = []
    model.train()
    for step in range(steps):
        picked = rng.sample(keys, min(prompts, len(keys)))
        chosen = [rng.choice(by_prompt[picked[i % len(picked)]]) for i in range(batch)]
        rows = [(ids, mask.index(1)) for ids, mask in chosen]
        prefixes, pairs = split_rows(rows)
        prompt_logps: List[torch.Tensor] = []
        logps = model.suffix_logprobs(prefixes, pairs, prompt_logps if prompt_loss else None)
        masks = [torch.tensor(mask[split:], dtype=torch.float32) for (ids, mask), (_, split) in zip(chosen, rows)]
        loss = -sum((lp * m).sum() for lp, m in zip(logps, masks)) / sum(m.sum() for m in masks)
        if prompt_loss:
            loss = loss - prompt_loss * torch.cat(prompt_logps).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
        losses.append(loss.item())
        progress.show("sft", step + 1, steps, f"loss {float(loss):.4f}")
    progress.end()
    return losses


# -- GRPO ----------------------------------------------------------------------------------------


@dataclass
class StepFigures:
    loss: float
    onpolicy_max_diff: float
    rows: int
    kept_groups: int
    train_high: float
    train_score: float


def on_policy_check(recomputed: np.ndarray, recorded: np.ndarray, tolerance: float, step: int) -> float:
    diff = float(np.max(np.abs(recomputed - recorded))) if recomputed.size else 0.0
    if not diff <= tolerance:
        raise CheckFailed(
            f"on-policy check failed at step {step}: the trainer's masked logprobs differ from the engine's recorded ones "
            f"by up to {diff:.3g} over {recomputed.size} positions (tolerance {tolerance:g})"
        )
    return diff


def check_groups(batch, groups: int, group_size: int, step: int) -> None:
    """Every group requested comes back, kept or dropped, whole, and none failed."""
    seen = sorted(list(batch.kept) + list(batch.dropped))
    if seen != list(range(groups)) or batch.failed_groups:
        raise CheckFailed(
            f"step {step}: groups lost: asked for {groups}, verdict kept {sorted(batch.kept)} dropped {sorted(batch.dropped)} "
            f"failed {sorted(batch.failed_groups)}"
        )
    for group in batch.kept_groups:
        if group.tokens is None or len(group.tokens) != group_size:
            raise CheckFailed(f"step {step}: group {group.group} has {len(group.tokens or ())} token logs, not {group_size}")


def grpo_step(model, optimizer, batch, args, step: int, reference: Optional[TinyLM] = None) -> StepFigures:
    packed = pack_batch(batch, pad_id=PAD_ID, advantages=args.advantages)
    mask = packed["loss_mask"].copy()
    if args.fault == "shift-mask":
        mask = np.pad(mask[:, :-1], ((0, 0), (1, 0)))  # the off-by-one the check exists to catch
    lengths, splits = packed["lengths"], packed["prompt_lengths"]
    rows = [(packed["input_ids"][b, : lengths[b]].tolist(), int(splits[b])) for b in range(len(lengths))]
    prefixes, pairs = split_rows(rows)

    def masked(array: np.ndarray) -> List[torch.Tensor]:
        return [torch.from_numpy(array[b, splits[b] : lengths[b]].astype(np.float32)) for b in range(len(lengths))]

    masks, old, adv = masked(mask), masked(packed["old_logprobs"]), masked(packed["advantages"])
    if reference is not None:
        with torch.no_grad():
            ref = reference.suffix_logprobs(prefixes, pairs)
    model.train()
    diff = 0.0
    loss_value = 0.0
    for epoch in range(args.ppo_epochs):
        logps = model.suffix_logprobs(prefixes, pairs)
        if epoch == 0:
            # Over every position after the prompt, masked: the recorded logprobs are 0 off the
            # sampled tokens, so a mask off by one either way shows up at a turn's edge.
            recomputed = torch.cat([lp.detach() * m for lp, m in zip(logps, masks)]).numpy()
            recorded = torch.cat(old).numpy()
            diff = on_policy_check(recomputed, recorded, args.tolerance, step)
        total = sum(m.sum() for m in masks)
        loss = 0.0
        for lp, o, a, m in zip(logps, old, adv, masks):
            ratio = torch.exp(lp - o)
            clipped = torch.clamp(ratio, 1 - args.clip, 1 + args.clip)
            loss = loss + (torch.maximum(-a * ratio, -a * clipped) * m).sum()
        if reference is not None:
            # GRPO's KL to the SFT policy (verl's use_kl_loss, the k3 estimator "low_var_kl")
            # on the sampled tokens: it holds the spelling the SFT taught while the arm moves.
            for lp, r, m in zip(logps, ref, masks):
                delta = r - lp
                loss = loss + args.kl_coef * ((torch.exp(delta) - delta - 1) * m).sum()
        loss = loss / total
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        loss_value = float(loss)
    scores = packed["scores"]
    return StepFigures(loss_value, diff, len(rows), len(batch.kept), float(np.mean(batch.success)), float(np.mean(scores)))


def rl_optimizer(model: TinyLM, args) -> torch.optim.Optimizer:
    """AdamW (``--optimizer sgd`` for plain SGD). Both break the format the SFT taught when the
    step is large: on the Bandit from the SFT start, Adam at lr 1e-3 left no training answer
    parsable by step 3, at 1e-4 valid validation answers fell from 94% to 74% in 20 steps, and
    SGD at 0.05 to 53% in 10; ``--kl-coef`` holds the policy near the SFT's."""
    if args.optimizer == "sgd":
        return torch.optim.SGD(model.parameters(), lr=args.lr)
    return torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)


def validate(client: Client, args) -> Tuple[float, float]:
    """Share of RAGEN's validation episodes that succeed (Bandit: pull the high-risk arm; Sokoban: solve the
    puzzle), and whose first answer is valid."""
    # Token mode: the engine speaks only the completions route, as rollgym's token mode uses it.
    # In chunks when asked: a whole multi-turn validation in one rollout can exceed the server's
    # per-session memory share. Validation seeds are seed.val (RAGEN's 123) + episode index.
    chunk = args.val_chunk or args.val_episodes
    success: List[float] = []
    valid: List[bool] = []
    for start in range(0, args.val_episodes, chunk):
        size = min(chunk, args.val_episodes - start)
        seed = {"seed": VAL_SEED + start} if chunk < args.val_episodes else {}
        batch = client.rollout(tag=args.tag, groups=size, group_size=1, mode="val", max_turn=args.max_turn, tokens=True,
                               sampling={"temperature": args.val_temperature, "max_tokens": args.max_tokens}, **seed)
        if batch.failed_groups:
            raise CheckFailed(f"validation: {len(batch.failed_groups)} of {size} episodes failed")
        success.extend(batch.success)
        valid.extend(bool(e["turns"][0]["actions"]) for e in batch.episodes)
    return float(np.mean(success)), float(np.mean(valid))


def push_weights(model: TinyLM, engine: str, path: str, version: str) -> None:
    """Synchronous update: pause (nothing is in flight), load from disk, resume, verify."""
    model.save(path, version)
    post(f"{engine}/pause?mode=keep")
    post(f"{engine}/update_weights_from_disk", {"model_path": path, "weight_version": version})
    post(f"{engine}/resume")
    loaded = get(f"{engine}/weight_info")["weight_version"]
    if loaded != version:
        raise CheckFailed(f"the engine reports weights {loaded!r} after loading {version!r}")


# -- curves --------------------------------------------------------------------------------------


def svg_curve(series: Dict[str, List[Tuple[float, float]]], title: str, xlabel: str, ylabel: str) -> str:
    """A line chart as a standalone SVG (no plotting library needed)."""
    w, h, left, bottom, top, right = 640, 360, 56, 44, 30, 150
    xs = [x for points in series.values() for x, _ in points] or [0.0, 1.0]
    x0, x1 = min(xs), max(max(xs), min(xs) + 1)
    sx = lambda x: left + (x - x0) / (x1 - x0) * (w - left - right)  # noqa: E731
    sy = lambda y: h - bottom - y * (h - bottom - top)  # noqa: E731
    colours = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"]
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12" role="img">',
           f"<title>{title}</title>",
           f'<rect width="{w}" height="{h}" fill="white"/>',
           f'<text x="{w / 2}" y="18" text-anchor="middle" font-size="14">{title}</text>']
    for tick in (0, 0.25, 0.5, 0.6, 0.75, 0.9, 1.0):
        y = sy(tick)
        dash = ' stroke-dasharray="4 3"' if tick in (0.6, 0.9) else ""
        out.append(f'<line x1="{left}" x2="{w - right}" y1="{y}" y2="{y}" stroke="#ddd"{dash}/>')
        out.append(f'<text x="{left - 6}" y="{y + 4}" text-anchor="end">{tick:g}</text>')
    for k in range(6):
        x = x0 + (x1 - x0) * k / 5
        out.append(f'<text x="{sx(x)}" y="{h - bottom + 16}" text-anchor="middle">{x:.0f}</text>')
    out.append(f'<text x="{(left + w - right) / 2}" y="{h - 8}" text-anchor="middle">{xlabel}</text>')
    out.append(f'<text x="14" y="{(h - bottom + top) / 2}" text-anchor="middle" transform="rotate(-90 14 {(h - bottom + top) / 2})">{ylabel}</text>')
    for i, (name, points) in enumerate(series.items()):
        colour = colours[i % len(colours)]
        path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in points)
        out.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{path}"/>')
        for x, y in points:
            out.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="2.5" fill="{colour}"/>')
        out.append(f'<text x="{w - right + 10}" y="{top + 16 + 18 * i}" fill="{colour}">{name}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def read_curve(path: str) -> List[Tuple[float, float]]:
    with open(path, newline="") as handle:
        return [(float(r["cpu_minutes"]), float(r["val_high_arm"])) for r in csv.DictReader(handle) if r["val_high_arm"]]


def plot_main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="train_grpo.py plot", description="overlay learning curves (CSV) as one SVG")
    parser.add_argument("csv", nargs="+")
    parser.add_argument("-o", "--out", required=True)
    parser.add_argument("--names", help="comma-separated legend names (default: the CSV's directory names)")
    args = parser.parse_args(argv)
    names = args.names.split(",") if args.names else [os.path.basename(os.path.dirname(os.path.abspath(p))) for p in args.csv]
    series = {name: read_curve(path) for name, path in zip(names, args.csv)}
    with open(args.out, "w") as handle:
        handle.write(svg_curve(series, "Bandit: validation episodes pulling the high-risk arm (T = 1)", "CPU minutes", "share"))
    return 0


# -- main ----------------------------------------------------------------------------------------


def parse(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="run directory: curve.csv, curve.svg, summary.json, weights")
    p.add_argument("--tag", default="Bandit")
    p.add_argument("--filter", choices=sorted(FILTERS), default="top-quarter", help="group filter (named RAGEN setting)")
    p.add_argument("--init-weights", help="start from this checkpoint instead of SFT (e.g. an earlier run's sft.pt)")
    p.add_argument("--sft-data", help="SFT JSON lines (default: rollgym sft --arm-mix --sft-episodes)")
    p.add_argument("--sft-episodes", type=int, default=1024)
    p.add_argument("--arm-mix", type=float, default=0.5, help="Bandit tags: share of SFT answers on the high-risk arm")
    p.add_argument("--max-turn", type=int, default=1, help="model turns per episode (SFT data, training, validation)")
    p.add_argument("--sft-steps", type=int, default=700)
    p.add_argument("--sft-batch", type=int, default=16)
    p.add_argument("--sft-prompts", type=int, default=8, help="distinct first prompts per SFT batch")
    p.add_argument("--sft-lr", type=float, default=4e-3)
    p.add_argument("--sft-prompt-loss", type=float, default=1.0,
                   help="weight of the loss on the prompt tokens beside the answer's (0: answers only); the prompt "
                        "names the arms three times, so predicting it teaches the model to copy names from context")
    p.add_argument("--d-model", type=int, default=ModelConfig.d_model)
    p.add_argument("--layers", type=int, default=ModelConfig.n_layers)
    p.add_argument("--heads", type=int, default=ModelConfig.n_heads)
    p.add_argument("--max-len", type=int, default=ModelConfig.max_len,
                   help="context in tokens (bytes): multi-turn Sokoban conversations need about 4096")
    p.add_argument("--steps", type=int, default=200, help="GRPO steps (at most)")
    p.add_argument("--groups", type=int, default=8, help="groups per step (RAGEN's env_groups)")
    p.add_argument("--group-size", type=int, default=16, help="episodes per group (RAGEN's group_size)")
    p.add_argument("--optimizer", choices=("adam", "sgd"), default="adam", help="the RL step's optimizer")
    p.add_argument("--lr", type=float, default=1e-4, help="RL learning rate")
    p.add_argument("--advantages", choices=("grpo", "scores"), default="grpo",
                   help="pack_batch's advantages: GRPO's group-normalised scores, or the raw scores (REINFORCE, no baseline)")
    p.add_argument("--kl-coef", type=float, default=0.0,
                   help="weight of the KL penalty to the SFT (step-0) policy on the sampled tokens (0: none)")
    p.add_argument("--ppo-epochs", type=int, default=1)
    p.add_argument("--clip", type=float, default=0.2)
    p.add_argument("--max-tokens", type=int, default=100,
                   help="tokens per answer (RAGEN's Bandit prompt says 100); a byte-level answer naming a long arm, "
                        "'Pulling VentureCapitalist.</think><answer>VentureCapitalist</answer>', takes 69")
    p.add_argument("--val-every", type=int, default=10, help="validate every N steps (0: only after the last)")
    p.add_argument("--val-episodes", type=int, default=512)
    p.add_argument("--val-chunk", type=int, default=0, help="validation episodes per rollout (0: all in one)")
    p.add_argument("--val-temperature", type=float, default=1.0)
    p.add_argument("--target", type=float, default=0.9, help="stop once validation reaches this share (0: never)")
    p.add_argument("--budget-minutes", type=float, default=30.0, help="stop after this many CPU minutes")
    p.add_argument("--tolerance", type=float, default=1e-3, help="on-policy check: max |logprob difference|")
    p.add_argument("--fault", choices=FAULTS, default="none", help="inject a bug the checks must catch (tests)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1,
                   help="torch threads of the trainer and of the engine (1: on a shared 2-core machine more threads only contend)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    args = p.parse_args(argv)
    if args.val_every < 0:
        p.error(f"--val-every: {args.val_every} is not a number of steps (0 or more; 0: only after the last)")
    return args


def main(argv: Sequence[str]) -> int:
    if argv[:1] == ["plot"]:
        return plot_main(argv[1:])
    args = parse(argv)
    torch.set_num_threads(args.threads)
    os.makedirs(args.out, exist_ok=True)
    torch.manual_seed(args.seed)
    progress = Progress(args.quiet)
    children: List[subprocess.Popen] = []
    rows: List[Dict[str, object]] = []
    summary: Dict[str, object] = {"args": vars(args)}
    curve_path = os.path.join(args.out, "curve.csv")
    started = time.time()

    def record(**row: object) -> None:
        row.setdefault("cpu_minutes", round(sft_cpu + cpu_seconds(children) / 60, 3))
        row.setdefault("wall_minutes", round((time.time() - started) / 60, 3))
        rows.append(row)
        fields = ["phase", "step", "version", "cpu_minutes", "wall_minutes", "val_high_arm", "val_valid", "train_high_arm",
                  "train_score", "kept_groups", "rows", "onpolicy_max_diff", "loss"]
        with open(curve_path, "w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=fields)
            writer.writeheader()
            for r in rows:
                writer.writerow({k: r.get(k, "") for k in fields})

    # CPU minutes of the SFT that made --init-weights, from the sft.json beside them, so that
    # a run from saved SFT weights is charged for them as a run that trains them is.
    sft_cpu = 0.0
    try:
        if args.init_weights:
            model, _ = TinyLM.load(args.init_weights)
            losses: List[float] = []
            sidecar = os.path.splitext(args.init_weights)[0] + ".json"
            if os.path.exists(sidecar):
                with open(sidecar) as handle:
                    sft_cpu = float(json.load(handle)["cpu_minutes"])
        else:
            data = args.sft_data
            if data is None:
                # SFT seeds from 100000, as RAGEN's SFT pipeline, away from the train and val seeds.
                data = os.path.join(args.out, "sft.jsonl")
                mix = ["--arm-mix", str(args.arm_mix)] if "bandit" in args.tag.lower() else []
                subprocess.run(rollgym_cmd("sft", "--tag", args.tag, "--groups", str(args.sft_episodes), *mix,
                                           "--max-turn", str(args.max_turn), "--seed", "100000", "--out", data),
                               check=True, cwd=ROOT, env=rollgym_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            model = TinyLM(ModelConfig(d_model=args.d_model, n_layers=args.layers, n_heads=args.heads, d_ff=4 * args.d_model,
                                       max_len=args.max_len))
            losses = sft(model, load_sft(data), args.sft_steps, args.sft_batch, args.sft_prompts, args.sft_lr, args.seed, progress,
                         args.sft_prompt_loss)
            model.save(os.path.join(args.out, "sft.pt"), "step-0")
            with open(os.path.join(args.out, "sft.json"), "w") as handle:
                json.dump({"cpu_minutes": round(cpu_seconds(children) / 60, 3), "steps": args.sft_steps,
                           "final_loss": losses[-1] if losses else None}, handle)
        weights = os.path.join(args.out, "weights.pt")
        model.save(weights, "step-0")
        summary["sft_final_loss"] = losses[-1] if losses else None
        summary["sft_cpu_minutes"] = sft_cpu if args.init_weights else round(cpu_seconds(children) / 60, 3)

        env = dict(os.environ, PYTHONPATH=PYTHON_DIR + os.pathsep + os.environ.get("PYTHONPATH", ""))
        _, engine = start([sys.executable, "-m", "rollgym_engine", "--weights", weights, "--model", "rollgym-tiny",
                           "--threads", str(args.threads)],
                          r"serving on (http://\S+)/v1", children, env)
        _, server = start(rollgym_cmd("serve", "--port", "0", "--llm", f"{engine}/v1", "--model", "rollgym-tiny"),
                          r"serving on (http://\S+)", children, rollgym_env())
        optimizer = rl_optimizer(model, args)
        reference = TinyLM.load(weights)[0].eval() if args.kl_coef > 0 else None
        with Client(server) as client:
            progress.show("val", 0, 1, "after SFT")
            high, valid = validate(client, args)
            progress.end()
            record(phase="sft", step=0, version="step-0", val_high_arm=high, val_valid=valid, loss=summary["sft_final_loss"])
            summary["after_sft"] = {"val_high_arm": high, "val_valid": valid}
            reached = None
            for step in range(args.steps):
                batch = client.rollout(tag=args.tag, groups=args.groups, group_size=args.group_size, step=step, tokens=True,
                                       max_turn=args.max_turn, sampling={"temperature": 1.0, "max_tokens": args.max_tokens},
                                       filter=FILTERS[args.filter])
                check_groups(batch, args.groups, args.group_size, step)
                figures = grpo_step(model, optimizer, batch, args, step, reference)
                version = f"step-{step + 1}"
                if args.fault == "stale-weights" and step >= 1:
                    model.save(weights + ".unpushed", version)  # the bug: the engine keeps sampling old weights
                else:
                    push_weights(model, engine, weights, version)
                row = dict(phase="rl", step=step + 1, version=version, train_high_arm=figures.train_high,
                           train_score=figures.train_score, kept_groups=figures.kept_groups, rows=figures.rows,
                           onpolicy_max_diff=figures.onpolicy_max_diff, loss=figures.loss)
                if (args.val_every > 0 and (step + 1) % args.val_every == 0) or step + 1 == args.steps:
                    high, valid = validate(client, args)
                    row.update(val_high_arm=high, val_valid=valid)
                record(**row)
                last_val = next((r["val_high_arm"] for r in reversed(rows) if r.get("val_high_arm") is not None), high)
                cpu = rows[-1]["cpu_minutes"]
                progress.show("rl", step + 1, args.steps,
                              f"val {last_val:.3f} train {figures.train_high:.2f} kept {figures.kept_groups} Δlogp {figures.onpolicy_max_diff:.1e} cpu {cpu:.1f}m")
                if "val_high_arm" in row and args.target and row["val_high_arm"] >= args.target:
                    reached = row
                    break
                if cpu >= args.budget_minutes:
                    break
            progress.end()
        summary["final"] = next((r for r in reversed(rows) if r.get("val_high_arm") is not None), None)
        summary["reached_target"] = reached
        summary["steps"] = rows[-1]["step"]
        summary["max_onpolicy_diff"] = max((float(r["onpolicy_max_diff"]) for r in rows if r.get("onpolicy_max_diff") is not None), default=0.0)
        summary["ok"] = True
    except CheckFailed as failure:
        progress.end()
        summary["ok"] = False
        summary["failure"] = str(failure)
        print(f"train_grpo: {failure}", file=sys.stderr)
    finally:
        for child in reversed(children):
            child.terminate()
        for child in children:
            try:
                child.wait(timeout=15)
            except subprocess.TimeoutExpired:  # a server still draining a rollout: it has had its chance
                child.kill()
                child.wait()
        with open(os.path.join(args.out, "summary.json"), "w") as handle:
            json.dump(summary, handle, indent=1, default=str)
        curve = [(float(r["cpu_minutes"]), float(r["val_high_arm"])) for r in rows if r.get("val_high_arm") is not None]
        if curve:
            with open(os.path.join(args.out, "curve.svg"), "w") as handle:
                handle.write(svg_curve({f"filter {args.filter}": curve}, f"{args.tag}: validation high-risk arm share (T = {args.val_temperature:g})",
                                       "CPU minutes", "share"))
    print(json.dumps({k: summary.get(k) for k in ("ok", "failure", "after_sft", "final", "steps", "max_onpolicy_diff")}, default=str))
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    # SIGTERM ends the run through main's cleanup (Python's default skips it, leaving the engine
    # and server it started running): exit status 143, as the shell reports a TERM.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    sys.exit(main(sys.argv[1:]))
