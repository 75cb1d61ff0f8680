"""A tiny decoder-only transformer over the byte vocabulary (pre-norm blocks, rotary positions
as in Qwen and Llama, tied embeddings). The engine samples from it with a KV cache; the trainer
scores token logs with :meth:`TinyLM.suffix_logprobs` (each group's prompt run once), which,
like the plain whole-sequence :meth:`TinyLM.token_logprobs`, must give the engine's logprobs
back (the on-policy check), so every path shares every weight and the same float32 arithmetic."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from .vocab import VOCAB_SIZE


@dataclass
class ModelConfig:
    vocab_size: int = VOCAB_SIZE
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    d_ff: int = 256
    max_len: int = 1280

    def check(self) -> "ModelConfig":
        for name in ("vocab_size", "d_model", "n_layers", "n_heads", "d_ff", "max_len"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"model config {name} is {value!r}; allowed: a positive integer")
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model {self.d_model} must be a multiple of n_heads {self.n_heads}")
        return self


ROPE_BASE = 10000.0


def rotate(x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """Rotary position embedding (the half-split layout of GPT-NeoX, Llama and Qwen): pairs of
    channels turn by position × frequency, so attention scores depend on relative distance. A
    byte-level model needs that: its answers are spelled a byte at a time, each byte read off
    the few before it, wherever in the context the answer starts."""
    half = x.shape[-1] // 2
    freq = ROPE_BASE ** (-torch.arange(half, dtype=torch.float32) / half)
    angle = positions[:, None, :, None].float() * freq
    cos, sin = angle.cos(), angle.sin()
    a, b = x[..., :half], x[..., half:]
    return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)


class Block(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.n_heads = config.n_heads
        self.ln1 = nn.LayerNorm(config.d_model)
        self.qkv = nn.Linear(config.d_model, 3 * config.d_model)
        self.proj = nn.Linear(config.d_model, config.d_model)
        self.ln2 = nn.LayerNorm(config.d_model)
        self.up = nn.Linear(config.d_model, config.d_ff)
        self.down = nn.Linear(config.d_ff, config.d_model)

    def heads(self, x: torch.Tensor, positions: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Queries, keys and values ``[B, heads, T, head_dim]``, queries and keys rotated by their
        positions ``[B, T]``."""
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        shape = (b, t, self.n_heads, d // self.n_heads)
        q, k, v = (z.view(shape).transpose(1, 2) for z in (q, k, v))
        return rotate(q, positions), rotate(k, positions), v

    def finish(self, x: torch.Tensor, attended: torch.Tensor) -> torch.Tensor:
        b, _, t, _ = attended.shape
        x = x + self.proj(attended.transpose(1, 2).reshape(b, t, -1))
        return x + self.down(F.gelu(self.up(self.ln2(x))))


class TinyLM(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config.check()
        self.embed = nn.Embedding(config.vocab_size, config.d_model)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layers))
        self.ln = nn.LayerNorm(config.d_model)
        nn.init.normal_(self.embed.weight, std=0.02)
        for block in self.blocks:
            for layer in (block.proj, block.down):
                nn.init.normal_(layer.weight, std=0.02 / math.sqrt(2 * config.n_layers))

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        return self.ln(x) @ self.embed.weight.T

    def forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        """Logits of right-padded rows: causal attention, so padding after a row's tokens never
        reaches them."""
        x = self.embed(input_ids)
        for block in self.blocks:
            q, k, v = block.heads(x, position_ids)
            x = block.finish(x, F.scaled_dot_product_attention(q, k, v, is_causal=True))
        return self.logits(x)

    def token_logprobs(self, input_ids: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        """``[B, T]``: column t is log p(input_ids[:, t] | earlier tokens), 0 in column 0 (as
        pack_batch's ``old_logprobs`` are laid out)."""
        logp = torch.log_softmax(self(input_ids, position_ids)[:, :-1].float(), dim=-1)
        picked = logp.gather(-1, input_ids[:, 1:, None])[..., 0]
        return F.pad(picked, (1, 0))

    def suffix_logprobs(self, prefixes: List[List[int]], rows: List[Tuple[int, List[int]]],
                        prefix_logprobs: Optional[List[torch.Tensor]] = None) -> List[torch.Tensor]:
        """Logprobs of each row's suffix tokens, rows given as (index into ``prefixes``, suffix
        ids): every distinct prefix (a group's shared prompt) runs once and its keys and values
        serve all its rows, so a group of 8 costs about one prompt, not 8. Same result as
        :meth:`token_logprobs` on the concatenation (to float rounding); gradients flow into
        the prefix too. A list passed as ``prefix_logprobs`` receives each prefix's own token
        logprobs (from its second token on), for a loss on the prompts as well."""
        g, p = len(prefixes), max(len(x) for x in prefixes)
        b, s = len(rows), max(len(x) for _, x in rows)
        prefix_ids = torch.zeros(g, p, dtype=torch.long)
        prefix_len = torch.tensor([len(x) for x in prefixes])
        for i, x in enumerate(prefixes):
            prefix_ids[i, : len(x)] = torch.tensor(x)
        suffix_ids = torch.zeros(b, s, dtype=torch.long)
        for i, (_, x) in enumerate(rows):
            suffix_ids[i, : len(x)] = torch.tensor(x)
        owner = torch.tensor([k for k, _ in rows])
        own_len = prefix_len[owner]
        # Row r attends to its prefix's first own_len columns, then causally within its suffix.
        prefix_part = torch.arange(p)[None, None, :] < own_len[:, None, None]
        suffix_part = torch.ones(s, s, dtype=torch.bool).tril()[None]
        mask = torch.cat([prefix_part.expand(b, s, p), suffix_part.expand(b, s, s)], dim=2)[:, None]
        x, prefix_pos = self.embed(prefix_ids), torch.arange(p)[None].expand(g, p)
        y, suffix_pos = self.embed(suffix_ids), own_len[:, None] + torch.arange(s)[None]
        for block in self.blocks:
            q, k, v = block.heads(x, prefix_pos)
            qs, ks, vs = block.heads(y, suffix_pos)
            keys = torch.cat([k.contiguous()[owner], ks], dim=2)
            values = torch.cat([v.contiguous()[owner], vs], dim=2)
            y = block.finish(y, F.scaled_dot_product_attention(qs, keys, values, attn_mask=mask))
            x = block.finish(x, F.scaled_dot_product_attention(q, k, v, is_causal=True))
        if prefix_logprobs is not None:
            own = torch.log_softmax(self.logits(x[:, :-1]).float(), dim=-1).gather(-1, prefix_ids[:, 1:, None])[..., 0]
            prefix_logprobs.extend(own[i, : len(ids) - 1] for i, ids in enumerate(prefixes))
        last = x[torch.arange(g), prefix_len - 1].index_select(0, owner)[:, None]
        logp = torch.log_softmax(self.logits(torch.cat([last, y[:, :-1]], dim=1)).float(), dim=-1)
        picked = logp.gather(-1, suffix_ids[..., None])[..., 0]
        return [picked[i, : len(x)] for i, (_, x) in enumerate(rows)]

    # -- the engine's path: left-padded prefill, then one token per row per step ----------------

    def prefill(self, input_ids: torch.Tensor, valid: torch.Tensor, capacity: int) -> "Cache":
        """Runs left-padded prompts (``valid`` marks real tokens) and returns a cache with room for
        ``capacity`` columns in all, whose ``last`` holds each row's next-token logits."""
        b, t = input_ids.shape
        positions = (valid.long().cumsum(1) - 1).clamp(min=0)
        cache = Cache(self.config, b, capacity, valid)
        causal = torch.ones(t, t, dtype=torch.bool).tril()
        # A padding query may see only itself (an all-false row would give NaN).
        allowed = (causal & valid[:, None, :]) | torch.eye(t, dtype=torch.bool)
        mask = allowed[:, None]
        x = self.embed(input_ids)
        for layer, block in enumerate(self.blocks):
            q, k, v = block.heads(x, positions)
            cache.keys[layer][:, :, :t] = k
            cache.values[layer][:, :, :t] = v
            x = block.finish(x, F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
        cache.length = t
        cache.next_position = valid.long().sum(1)
        cache.last = self.logits(x[:, -1:])[:, 0]
        return cache

    def step(self, cache: "Cache", tokens: torch.Tensor) -> None:
        """Appends one token per row and leaves the next logits in ``cache.last``."""
        col = cache.length
        if col >= cache.capacity:
            raise RuntimeError("KV cache full")
        x = self.embed(tokens[:, None])
        cache.valid[:, col] = True
        mask = cache.valid[:, None, None, : col + 1]
        for layer, block in enumerate(self.blocks):
            q, k, v = block.heads(x, cache.next_position[:, None])
            cache.keys[layer][:, :, col : col + 1] = k
            cache.values[layer][:, :, col : col + 1] = v
            keys = cache.keys[layer][:, :, : col + 1]
            values = cache.values[layer][:, :, : col + 1]
            x = block.finish(x, F.scaled_dot_product_attention(q, keys, values, attn_mask=mask))
        cache.length = col + 1
        cache.next_position = cache.next_position + 1
        cache.last = self.logits(x)[:, 0]

    # -- weights on disk ------------------------------------------------------------------------

    def save(self, path: str, version: Optional[str] = None) -> None:
        torch.save({"config": asdict(self.config), "state_dict": self.state_dict(), "version": version}, path)

    @staticmethod
    def load(path: str) -> Tuple["TinyLM", Optional[str]]:
        saved = read_checkpoint(path)
        model = TinyLM(ModelConfig(**saved["config"]))
        model.load_state_dict(saved["state_dict"])
        return model, saved.get("version")


def read_checkpoint(path: str) -> Dict[str, Any]:
    saved = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(saved, dict) or "config" not in saved or "state_dict" not in saved:
        raise ValueError(f"{path} is not a rollgym_engine checkpoint (TinyLM.save writes one)")
    return saved


class Cache:
    """Keys and values per layer, ``[B, heads, capacity, head_dim]``; ``valid`` marks real columns."""

    def __init__(self, config: ModelConfig, batch: int, capacity: int, valid: torch.Tensor):
        head_dim = config.d_model // config.n_heads
        shape = (batch, config.n_heads, capacity, head_dim)
        self.capacity = capacity
        self.keys: List[torch.Tensor] = [torch.zeros(shape) for _ in range(config.n_layers)]
        self.values: List[torch.Tensor] = [torch.zeros(shape) for _ in range(config.n_layers)]
        self.valid = torch.zeros(batch, capacity, dtype=torch.bool)
        self.valid[:, : valid.shape[1]] = valid
        self.length = 0
        self.next_position = torch.zeros(batch, dtype=torch.long)
        self.last = torch.zeros(0)

    def select(self, rows: torch.Tensor) -> None:
        """Keeps (or repeats) the given rows, e.g. to give each request its own copy of a shared prompt."""
        self.keys = [k.index_select(0, rows) for k in self.keys]
        self.values = [v.index_select(0, rows) for v in self.values]
        self.valid = self.valid.index_select(0, rows)
        self.next_position = self.next_position.index_select(0, rows)
        self.last = self.last.index_select(0, rows)
