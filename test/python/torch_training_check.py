"""Token mode end to end on the trainer side: group frames with token logs → the client's
decoder → pack_batch → a tiny torch model's PPO-clip step (run by python-tokens.test.ts).

1. A tiny causal LM (token + position embedding → linear head) plays the part of the engine:
   each synthetic episode's logprobs at its sampled positions are that model's logprobs,
   computed on the episode alone (no padding, positions 0 … n − 1).
2. The episodes travel as msgpack group frames in the wire format (PROTOCOL.md "Token logs"),
   are decoded by rollgym_client (Group.from_frame, Batch over the kept groups) and packed
   with pack_batch (right and left padding, two pad ids).
3. On the padded batch the model's logprobs of the sampled ids must equal old_logprobs at the
   loss-mask positions (ratio 1: ids, logprobs and position_ids are where they belong); the
   masked PPO-clip loss with GRPO advantages (checked against verl's formula in torch) is the
   same for every padding; backward gives finite gradients, none on the padding token's
   embedding; a few optimizer steps lower the loss.

Exits non-zero with a message when an invariant breaks; prints one JSON line when all hold.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, Dict, List, Tuple

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "python"))

try:
    import torch
except ImportError:
    sys.exit("torch is missing: this check needs Debian's python3-torch (apt-get install python3-torch)")

import fake_server  # noqa: E402

from rollgym_client import Batch, Group, pack_batch  # noqa: E402
from rollgym_client.codec import decode  # noqa: E402

VOCAB = fake_server.VOCAB
PAD = VOCAB  # an id no episode uses
GROUPS, GROUP_SIZE, DROPPED = 5, 6, 2
CLIP = 0.2


def check(condition: bool, message: str) -> None:
    if not condition:
        raise AssertionError(message)


class TinyLM(torch.nn.Module):
    """Logits at column t depend on (input_ids[t], position_ids[t]) only: a causal LM without
    attention, so a token's logprob is the same in any batch if ids and positions are right."""

    def __init__(self, vocab: int, max_positions: int = 256, dim: int = 16):
        super().__init__()
        self.tokens = torch.nn.Embedding(vocab, dim)
        self.positions = torch.nn.Embedding(max_positions, dim)
        self.head = torch.nn.Linear(dim, vocab)

    def forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        return self.head(torch.tanh(self.tokens(input_ids) + self.positions(position_ids)))


def token_logprobs(model: TinyLM, input_ids: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
    """[B, T − 1]: log p(input_ids[:, t] | column t − 1), the usual causal shift."""
    logits = model(input_ids, position_ids)[:, :-1]
    return torch.log_softmax(logits.float(), dim=-1).gather(-1, input_ids[:, 1:, None])[..., 0]


@torch.no_grad()
def engine_logprobs(model: TinyLM, ids: List[int]) -> List[float]:
    """What the engine reports for one episode: per token, its logprob (0 for the first)."""
    x = torch.tensor([ids])
    lp = token_logprobs(model, x, torch.arange(len(ids))[None])[0]
    return [0.0] + lp.tolist()


def verl_grpo(scores: torch.Tensor, index: List[int], eps: float = 1e-6) -> torch.Tensor:
    """verl's compute_grpo_outcome_advantage (verl/trainer/ppo/core_algos.py), per episode."""
    by: Dict[int, List[torch.Tensor]] = {}
    for i, g in enumerate(index):
        by.setdefault(g, []).append(scores[i])
    stats = {}
    for g, values in by.items():
        if len(values) == 1:
            stats[g] = (torch.tensor(0.0), torch.tensor(1.0))
        else:
            t = torch.stack(values)
            stats[g] = (torch.mean(t), torch.std(t))
    return torch.stack([(scores[i] - stats[g][0]) / (stats[g][1] + eps) for i, g in enumerate(index)])


def make_batch(model: TinyLM) -> Tuple[Batch, List[Dict[str, Any]]]:
    """Group frames as the server sends them, decoded by the client; and the kept episodes' logs."""
    groups, kept_logs = [], []
    for g in range(GROUPS):
        eps = [fake_server.episode(g * GROUP_SIZE + i, g, "Fake", 300 + g) for i in range(GROUP_SIZE)]
        logs = []
        for e in eps:
            log = fake_server.token_log(e["env_id"], e["seed"], e["reward"])
            lp = engine_logprobs(model, log["ids"])
            log["logprobs"] = [lp[t] if m else 0.0 for t, m in enumerate(log["loss_mask"])]
            logs.append(log)
        frame = fake_server.group_frame("torch", g, eps, None, None)
        frame.update(fake_server.token_fields(logs))
        groups.append(Group.from_frame(decode(fake_server.encode(frame))))
        if g != DROPPED:
            kept_logs += logs
    kept = [g for g in range(GROUPS) if g != DROPPED]
    verdict = {"type": "batch", "kept": kept, "dropped": [DROPPED], "failed_groups": [], "metrics": {}, "episodes": GROUPS * GROUP_SIZE, "failed": 0}
    return Batch("torch", "stream", groups, verdict), kept_logs


def ppo_clip_loss(model: TinyLM, t: Dict[str, torch.Tensor]) -> torch.Tensor:
    """verl's clipped policy loss, token-mean over the loss mask (shifted like the logprobs)."""
    new = token_logprobs(model, t["input_ids"], t["position_ids"])
    mask = t["loss_mask"][:, 1:].float()
    old = t["old_logprobs"][:, 1:]
    adv = t["advantages"][:, 1:]
    ratio = torch.exp(new - old)
    loss = torch.maximum(-adv * ratio, -adv * torch.clamp(ratio, 1 - CLIP, 1 + CLIP))
    return (loss * mask).sum() / mask.sum()


def main() -> None:
    torch.manual_seed(0)
    model = TinyLM(VOCAB + 1)
    batch, logs = make_batch(model)
    check(len(batch) == (GROUPS - 1) * GROUP_SIZE, f"the batch has {len(batch)} episodes")
    sampled_ids = np.array([i for log in logs for i, m in zip(log["ids"], log["loss_mask"]) if m], dtype=np.int64)
    sampled_lp = np.array([x for log in logs for x, m in zip(log["logprobs"], log["loss_mask"]) if m], dtype=np.float32)
    check(sampled_ids.size > 50, "too few sampled tokens to mean anything")

    reference = verl_grpo(torch.from_numpy(batch.scores.copy()), batch.group_ids.tolist())
    results = {}
    for left_pad in (False, True):
        for pad_id in (PAD, 0):
            packed = pack_batch(batch, pad_id=pad_id, left_pad=left_pad)
            name = f"{'left' if left_pad else 'right'}-pad {pad_id}"
            mask = packed["loss_mask"] == 1
            # the guarantee, against the logs the frames were built from
            check(np.array_equal(packed["input_ids"][mask], sampled_ids), f"{name}: input_ids[loss_mask == 1] are not the sampled ids in order")
            check(np.array_equal(packed["old_logprobs"][mask], sampled_lp), f"{name}: old_logprobs are not at the sampled ids")
            check(np.all(packed["old_logprobs"][~mask] == 0), f"{name}: old_logprobs outside the loss mask")
            rows = np.nonzero(mask)[0]
            check(
                np.allclose(packed["advantages"][mask], reference.numpy()[rows], rtol=1e-5, atol=1e-6),
                f"{name}: advantages differ from verl's GRPO: {packed['advantages'][mask][:5]} vs {reference.numpy()[rows][:5]}",
            )
            check(np.all(packed["advantages"][~mask] == 0), f"{name}: advantages outside the loss mask")

            t = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in packed.items()}
            with torch.no_grad():
                new = token_logprobs(model, t["input_ids"], t["position_ids"])
            shifted = t["loss_mask"][:, 1:] == 1
            check(not bool(t["loss_mask"][:, 0].any()), f"{name}: a sampled id in column 0 has no logits to come from")
            gap = (new - t["old_logprobs"][:, 1:])[shifted].abs().max().item()
            check(gap < 1e-5, f"{name}: the model's logprobs on the packed batch differ from old_logprobs by {gap} (misaligned ids/positions)")

            model.zero_grad()
            loss = ppo_clip_loss(model, t)
            loss.backward()
            grads = torch.cat([p.grad.flatten() for p in model.parameters()])
            check(bool(torch.isfinite(loss)) and bool(torch.isfinite(grads).all()), f"{name}: non-finite loss or gradients")
            check(grads.abs().sum().item() > 0, f"{name}: no gradient")
            check(model.tokens.weight.grad[PAD].abs().sum().item() == 0, f"{name}: padding tokens reached the loss")
            # ratio 1: the loss is minus the masked mean advantage
            expected = -(t["advantages"][:, 1:] * shifted).sum() / shifted.sum()
            check(abs(loss.item() - expected.item()) < 1e-5, f"{name}: loss {loss.item()} at ratio 1, expected {expected.item()}")
            results[name] = (loss.item(), grads.clone())

    losses = [loss for loss, _ in results.values()]
    first_grads = next(iter(results.values()))[1]
    check(max(losses) - min(losses) < 1e-6, f"the loss depends on padding: {losses}")
    for name, (_, grads) in results.items():
        check(torch.allclose(grads, first_grads, atol=1e-6), f"{name}: gradients depend on padding")

    # A few PPO steps on the same batch lower the clipped loss.
    packed = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in pack_batch(batch, pad_id=PAD).items()}
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    start = ppo_clip_loss(model, packed).item()
    for _ in range(5):
        optimizer.zero_grad()
        loss = ppo_clip_loss(model, packed)
        loss.backward()
        optimizer.step()
    end = ppo_clip_loss(model, packed).item()
    check(end < start, f"PPO steps did not lower the loss: {start} → {end}")

    print(json.dumps({
        "ok": True,
        "torch": torch.__version__,
        "episodes": len(batch),
        "width": int(packed["input_ids"].shape[1]),
        "sampled_tokens": int(sampled_ids.size),
        "loss_before": start,
        "loss_after": end,
    }))


if __name__ == "__main__":
    main()
