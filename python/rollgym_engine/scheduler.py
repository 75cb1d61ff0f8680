"""Batched generation for the engine: requests that arrive together are sampled together (one
prefill per distinct prompt, then one decode step for every row at a time), and the scheduler
obeys vLLM's pause modes between steps so a trainer can swap weights with nothing in flight."""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import torch

from .model import TinyLM
from .vocab import STOP_IDS

PAUSE_MODES = ("abort", "wait", "keep")


@dataclass
class Sampling:
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    min_p: float = 0.0
    max_tokens: int = 16
    seed: Optional[int] = None
    stop_token_ids: Tuple[int, ...] = ()
    ignore_eos: bool = False
    top_logprobs: int = 0


@dataclass
class Request:
    prompt: List[int]
    sampling: Sampling
    ids: List[int] = field(default_factory=list)
    logprobs: List[float] = field(default_factory=list)
    top: List[Dict[int, float]] = field(default_factory=list)
    finish_reason: Optional[str] = None
    weight_version: Optional[str] = None
    done: threading.Event = field(default_factory=threading.Event)


class Scheduler:
    """Owns the model. ``submit`` blocks until the request is finished (or aborted)."""

    def __init__(self, model: TinyLM, version: Optional[str], max_batch: int = 256,
                 gather_s: float = 0.01, logprobs_mode: str = "raw_logprobs"):
        self.model = model.eval()
        self.version = version
        self.max_batch = max_batch
        self.gather_s = gather_s
        self.logprobs_mode = logprobs_mode
        self.lock = threading.Condition()
        self.queue: List[Request] = []
        self.paused = False
        self.pause_mode = "abort"
        self.running = 0
        self.stopping = False
        self.thread = threading.Thread(target=self._loop, name="rollgym-engine", daemon=True)
        self.thread.start()

    # -- control ---------------------------------------------------------------------------------

    def submit(self, request: Request) -> Request:
        with self.lock:
            self.queue.append(request)
            self.lock.notify_all()
        request.done.wait()
        return request

    def pause(self, mode: str) -> None:
        """``keep`` freezes running requests, ``wait`` lets them finish, ``abort`` ends them with
        finish_reason "abort"; in every mode new requests queue, and the call returns once the
        engine is quiet (nothing mid-step)."""
        if mode not in PAUSE_MODES:
            raise ValueError(f"mode is {mode!r}; allowed: {', '.join(PAUSE_MODES)}")
        with self.lock:
            self.paused = True
            self.pause_mode = mode
            self.lock.notify_all()
            if mode == "wait":
                self.lock.wait_for(lambda: self.running == 0)
            else:
                self.lock.wait_for(lambda: not self.stepping)

    def resume(self) -> None:
        with self.lock:
            self.paused = False
            self.lock.notify_all()

    def load(self, state_dict: Dict[str, torch.Tensor], version: Optional[str]) -> None:
        """New weights, between two decode steps (requests kept by a pause continue on them)."""
        with self.lock:
            self.lock.wait_for(lambda: not self.stepping)
            self.model.load_state_dict(state_dict)
            self.version = version

    def close(self) -> None:
        with self.lock:
            self.stopping = True
            self.lock.notify_all()

    # -- the loop --------------------------------------------------------------------------------

    stepping = False

    def _take(self) -> List[Request]:
        with self.lock:
            self.lock.wait_for(lambda: self.stopping or (self.queue and not self.paused))
            if self.stopping:
                return []
        time.sleep(self.gather_s)  # requests of one rollout arrive within milliseconds
        with self.lock:
            if self.paused:
                return []
            batch, self.queue = self.queue[: self.max_batch], self.queue[self.max_batch :]
            self.running = len(batch)
            self.stepping = True
            return batch

    def _loop(self) -> None:
        while not self.stopping:
            batch = self._take()
            if not batch:
                continue
            try:
                self._generate(batch)
            except Exception as error:  # noqa: BLE001 — a failed batch fails its requests, not the engine
                for r in batch:
                    if r.finish_reason is None:
                        r.finish_reason = "error"
                        r.error = str(error)  # type: ignore[attr-defined]
            finally:
                with self.lock:
                    self.running = 0
                    self.stepping = False
                    self.lock.notify_all()
                for r in batch:
                    r.done.set()

    def _between_steps(self, active: List[Request]) -> bool:
        """Honours a pause between decode steps; False when the batch was aborted."""
        with self.lock:
            if not self.paused or self.pause_mode == "wait":
                return True
            if self.pause_mode == "abort":
                for r in active:
                    r.finish_reason = "abort"
                return False
            self.stepping = False
            self.lock.notify_all()
            self.lock.wait_for(lambda: not self.paused or self.stopping)
            self.stepping = True
            return not self.stopping

    @torch.no_grad()
    def _generate(self, batch: List[Request]) -> None:
        # One prefill per distinct prompt (a group's episodes share theirs), then a row each.
        distinct: Dict[Tuple[int, ...], int] = {}
        rows = [distinct.setdefault(tuple(r.prompt), len(distinct)) for r in batch]
        prompts = list(distinct)
        width = max(len(p) for p in prompts)
        ids = torch.zeros(len(prompts), width, dtype=torch.long)
        valid = torch.zeros(len(prompts), width, dtype=torch.bool)
        for i, p in enumerate(prompts):
            ids[i, width - len(p) :] = torch.tensor(p, dtype=torch.long)
            valid[i, width - len(p) :] = True
        steps = max(r.sampling.max_tokens for r in batch)
        cache = self.model.prefill(ids, valid, width + steps)
        cache.select(torch.tensor(rows))
        generators = [_generator(r.sampling.seed) for r in batch]
        for r in batch:
            r.weight_version = self.version
        active = list(range(len(batch)))
        for _ in range(steps):
            if not self._between_steps([batch[i] for i in active]):
                return
            tokens = torch.zeros(len(batch), dtype=torch.long)
            raw = torch.log_softmax(cache.last.float(), dim=-1)
            drawn = self._sample_plain(raw, active, batch, generators)
            for i in active:
                r = batch[i]
                token, logprob = drawn[i] if drawn else self._sample(raw[i], r.sampling, generators[i])
                tokens[i] = token
                r.ids.append(token)
                r.logprobs.append(logprob)
                if r.sampling.top_logprobs:
                    top = torch.topk(raw[i], min(r.sampling.top_logprobs, raw.shape[-1]))
                    entry = {int(t): float(v) for v, t in zip(top.values, top.indices)}
                    entry[token] = logprob
                    r.top.append(entry)
                stop = (token in STOP_IDS and not r.sampling.ignore_eos) or token in r.sampling.stop_token_ids
                if stop:
                    r.finish_reason = "stop"
                elif len(r.ids) >= r.sampling.max_tokens:
                    r.finish_reason = "length"
            active = [i for i in active if batch[i].finish_reason is None]
            if not active:
                return
            self.model.step(cache, tokens)

    def _sample_plain(self, raw: torch.Tensor, active: List[int], batch: List[Request],
                      generators: List[Optional[torch.Generator]]) -> Optional[Dict[int, Tuple[int, float]]]:
        """All active rows at once when none uses top-p/top-k/min-p or greedy decoding (RL's
        sampling): inverse-CDF draws, each row's uniform from its own seeded generator."""
        for i in active:
            s = batch[i].sampling
            if s.temperature <= 0 or s.top_p < 1 or 0 < s.top_k < raw.shape[-1] or s.min_p > 0 or s.top_logprobs:
                return None
        rows = torch.tensor(active)
        temperature = torch.tensor([batch[i].sampling.temperature for i in active])
        logp = torch.log_softmax(raw[rows] / temperature[:, None], dim=-1)
        cdf = logp.exp().cumsum(dim=-1)
        u = torch.cat([torch.rand(1, generator=generators[i]) for i in active])
        chosen = torch.searchsorted(cdf, (u * cdf[:, -1])[:, None], right=True)[:, 0].clamp(max=raw.shape[-1] - 1)
        picked = (raw[rows] if self.logprobs_mode == "raw_logprobs" else logp).gather(1, chosen[:, None])[:, 0]
        return {i: (t, lp) for i, t, lp in zip(active, chosen.tolist(), picked.tolist())}

    def _sample(self, raw: torch.Tensor, s: Sampling, generator: Optional[torch.Generator]) -> Tuple[int, float]:
        if s.temperature == 0:
            token = int(torch.argmax(raw))
            return token, float(raw[token]) if self.logprobs_mode == "raw_logprobs" else 0.0
        logits = raw / s.temperature
        if s.top_k > 0 and s.top_k < logits.shape[-1]:
            kth = torch.topk(logits, s.top_k).values[-1]
            logits = logits.masked_fill(logits < kth, -math.inf)
        probs = torch.softmax(logits, dim=-1)
        if s.min_p > 0:
            probs = probs.masked_fill(probs < s.min_p * probs.max(), 0)
        if s.top_p < 1:
            sorted_probs, order = probs.sort(descending=True)
            outside = sorted_probs.cumsum(0) - sorted_probs > s.top_p
            probs = probs.scatter(0, order, sorted_probs.masked_fill(outside, 0))
        probs = probs / probs.sum()
        token = int(torch.multinomial(probs, 1, generator=generator))
        if self.logprobs_mode == "processed_logprobs":
            return token, math.log(float(probs[token]))
        return token, float(raw[token])


def _generator(seed: Optional[int]) -> Optional[torch.Generator]:
    if seed is None:
        return None
    g = torch.Generator()
    g.manual_seed(seed)
    return g
