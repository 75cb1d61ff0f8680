"""A byte-level vocabulary with ChatML's special tokens, so the engine needs no tokenizer file
and any text round-trips exactly: ids 0–255 are the UTF-8 bytes, then ``<|endoftext|>``,
``<|im_start|>`` and ``<|im_end|>`` (Qwen's order). The chat template is Qwen2.5's ChatML
without a default system message, the template RAGEN's prompts are written for."""

from __future__ import annotations

import re
from typing import Dict, Iterable, List, Optional, Sequence

ENDOFTEXT = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
SPECIAL_TOKENS = (ENDOFTEXT, IM_START, IM_END)
SPECIAL_IDS: Dict[str, int] = {text: 256 + i for i, text in enumerate(SPECIAL_TOKENS)}
VOCAB_SIZE = 256 + len(SPECIAL_TOKENS)
ENDOFTEXT_ID = SPECIAL_IDS[ENDOFTEXT]
IM_START_ID = SPECIAL_IDS[IM_START]
IM_END_ID = SPECIAL_IDS[IM_END]
#: Generation ends on either (Qwen's generation_config eos_token_id).
STOP_IDS = frozenset((IM_END_ID, ENDOFTEXT_ID))
PAD_ID = ENDOFTEXT_ID

_SPLIT = re.compile("(" + "|".join(re.escape(t) for t in SPECIAL_TOKENS) + ")")
ROLES = ("system", "user", "assistant")


def encode(text: str) -> List[int]:
    """Ids of ``text``; special-token strings in it become their special ids (as Hugging Face
    tokenizers parse added special tokens), everything else its UTF-8 bytes."""
    ids: List[int] = []
    for part in _SPLIT.split(text):
        if part in SPECIAL_IDS:
            ids.append(SPECIAL_IDS[part])
        elif part:
            ids.extend(part.encode("utf-8"))
    return ids


def decode(ids: Iterable[int], skip_special_tokens: bool = False) -> str:
    """Text of ``ids``; bytes that are not valid UTF-8 become U+FFFD, as vLLM's detokenizer does."""
    out = bytearray()
    for i in ids:
        if i < 256:
            out.append(i)
        elif not skip_special_tokens:
            out.extend(SPECIAL_TOKENS[i - 256].encode("utf-8"))
    return out.decode("utf-8", errors="replace")


def check_ids(ids: object, field: str) -> List[int]:
    """``ids`` as a list of token ids, or ``ValueError`` naming ``field``, the value and the range."""
    if not isinstance(ids, list):
        raise ValueError(f"{field} must be a list of token ids, got {type(ids).__name__}")
    for k, i in enumerate(ids):
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < VOCAB_SIZE:
            raise ValueError(f"{field}[{k}] is {i!r}; allowed: integers 0..{VOCAB_SIZE - 1}")
    return ids


def render_chat(
    messages: Sequence[Dict[str, object]],
    add_generation_prompt: bool = True,
    continue_final_message: bool = False,
) -> str:
    """ChatML text: ``<|im_start|>{role}\\n{content}<|im_end|>\\n`` per message, then
    ``<|im_start|>assistant\\n`` with ``add_generation_prompt``; ``continue_final_message``
    leaves the last (assistant) message open, as vLLM renders a prefill."""
    if continue_final_message and add_generation_prompt:
        raise ValueError("add_generation_prompt and continue_final_message cannot both be true")
    parts: List[str] = []
    for k, message in enumerate(messages):
        if not isinstance(message, dict):
            raise ValueError(f"messages[{k}] must be an object with role and content")
        role, content = message.get("role"), message.get("content")
        if role not in ROLES:
            raise ValueError(f"messages[{k}].role is {role!r}; allowed: {', '.join(ROLES)}")
        if not isinstance(content, str):
            raise ValueError(f"messages[{k}].content must be a string, got {type(content).__name__}")
        last = k == len(messages) - 1
        if continue_final_message and last:
            if role != "assistant":
                raise ValueError("continue_final_message needs an assistant message last")
            parts.append(f"{IM_START}{role}\n{content}")
        else:
            parts.append(f"{IM_START}{role}\n{content}{IM_END}\n")
    if add_generation_prompt:
        parts.append(f"{IM_START}assistant\n")
    return "".join(parts)


def chat_ids(messages: Sequence[Dict[str, object]], add_generation_prompt: bool = True,
             continue_final_message: bool = False) -> List[int]:
    return encode(render_chat(messages, add_generation_prompt, continue_final_message))


def sft_example(messages: Sequence[Dict[str, object]], prefill: Optional[str] = "<think>") -> "tuple[List[int], List[int]]":
    """Ids and loss mask of one SFT conversation: the loss covers each assistant message's
    content after the prefill (which rollgym sends as prompt) and its ``<|im_end|>``, the
    tokens a model samples in token mode; headers, system and user turns are context."""
    ids: List[int] = []
    mask: List[int] = []
    for message in messages:
        role, content = message["role"], str(message["content"])
        header = encode(f"{IM_START}{role}\n")
        ids += header
        mask += [0] * len(header)
        if role == "assistant":
            given = prefill if prefill and content.startswith(prefill) else ""
            head, body = encode(given), encode(content[len(given):]) + [IM_END_ID]
            ids += head + body
            mask += [0] * len(head) + [1] * len(body)
            ids.append(ord("\n"))
            mask.append(0)
        else:
            body = encode(content) + encode(f"{IM_END}\n")
            ids += body
            mask += [0] * len(body)
    return ids, mask
