"""Token mode (``tokens: true``) in the Python client: decoding and checking the token arrays
of group frames (TokenLog), Batch concatenation, pack_batch and grpo_advantages; numpy only
(test/python/torch_training_check.py trains a torch model on the packed arrays).

Run: PYTHONPATH=python /usr/bin/python3 -m unittest discover -s test/python -p 'test_*.py'
"""

from __future__ import annotations

import os
import statistics
import sys
import unittest
from typing import Any, Dict, List

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "python"))

import fake_server  # noqa: E402
from fake_server import FakeServer  # noqa: E402

from rollgym_client import AsyncClient, Batch, Group, ProtocolError, TokenLog, grpo_advantages, pack_batch  # noqa: E402
from rollgym_client.codec import decode, encode  # noqa: E402

TIMEOUT = 20


def episodes(group: int, size: int, seed: int, tag: str = "Fake") -> List[Dict[str, Any]]:
    return [fake_server.episode(group * size + i, group, tag, seed) for i in range(size)]


def logs_of(eps: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """The synthetic token logs the fake server sends for these episodes (the source of truth)."""
    return [fake_server.token_log(e["env_id"], e["seed"], e["reward"]) for e in eps]


def frame_of(rollout: str, group: int, eps: List[Dict[str, Any]], kept=True) -> Dict[str, Any]:
    """A token-mode group frame, through msgpack and the client's own decoder."""
    return decode(encode(fake_server.group_frame(rollout, group, eps, kept, 0.0, tokens=True)))


def verdict(kept: List[int], dropped: List[int] = ()) -> Dict[str, Any]:
    return {"type": "batch", "kept": list(kept), "dropped": list(dropped), "failed_groups": [], "metrics": {}, "episodes": 0, "failed": 0}


def sampled(log: Dict[str, Any], key: str = "ids") -> List[Any]:
    return [v for v, m in zip(log[key], log["loss_mask"]) if m == 1]


class TokenLogTests(unittest.TestCase):
    def test_views_of_the_frame_per_episode(self):
        eps = episodes(0, 12, seed=5)
        group = Group.from_frame(frame_of("r", 0, eps))
        self.assertEqual(len(group.tokens), 12)
        whole = group.arrays["token_ids"]
        for log, want in zip(group.tokens, logs_of(eps)):
            self.assertIsInstance(log, TokenLog)
            self.assertEqual(log.ids.dtype, np.int32)
            self.assertEqual(log.loss_mask.dtype, np.uint8)
            self.assertEqual(log.logprobs.dtype, np.float32)
            self.assertEqual(log.rewards.dtype, np.float32)
            self.assertEqual(log.turn_starts.dtype, np.int32)
            # views of the frame's bytes, not copies
            self.assertFalse(log.ids.flags.writeable)
            self.assertTrue(np.shares_memory(log.ids, whole))
            self.assertTrue(np.shares_memory(log.logprobs, group.arrays["logprobs"]))
            np.testing.assert_array_equal(log.ids, want["ids"])
            np.testing.assert_array_equal(log.loss_mask, want["loss_mask"])
            np.testing.assert_array_equal(log.logprobs, np.array(want["logprobs"], dtype=np.float32))
            np.testing.assert_array_equal(log.rewards, np.array(want["rewards"], dtype=np.float32))
            np.testing.assert_array_equal(log.turn_starts, want["turn_starts"])
            np.testing.assert_array_equal(log.turn_ends, want["turn_ends"])
            self.assertEqual(log.prompt_length, want["prompt_length"])
            self.assertEqual(len(log), len(want["ids"]))
            self.assertEqual(log.num_turns, len(want["turn_starts"]))
            np.testing.assert_array_equal(log.prompt_ids, want["ids"][: want["prompt_length"]])
            np.testing.assert_array_equal(log.sampled_ids, sampled(want))
            if log.num_turns:
                k = log.num_turns - 1
                np.testing.assert_array_equal(log.turn(k), want["ids"][want["turn_starts"][k] : want["turn_ends"][k]])
        # the synthetic logs cover the edge cases: no turn at all, and an empty turn
        self.assertIn(0, [log.num_turns for log in group.tokens])
        self.assertTrue(any(np.any(log.turn_starts == log.turn_ends) for log in group.tokens))
        self.assertIn("TokenLog(tokens=", repr(group.tokens[0]))

    def test_no_token_fields_no_token_logs(self):
        frame = decode(encode(fake_server.group_frame("r", 0, episodes(0, 3, 1), True, 0.0)))
        group = Group.from_frame(frame)
        self.assertIsNone(group.tokens)
        batch = Batch("r", "batch", [group], verdict([0]))
        self.assertIsNone(batch.tokens)
        with self.assertRaisesRegex(ValueError, "tokens=True"):
            pack_batch(batch)
        with self.assertRaisesRegex(ValueError, "tokens=True"):
            batch.token_arrays()

    def corrupt(self, field: str, **changes) -> ProtocolError:
        """The frame with some token fields replaced (None: removed); returns the error."""
        frame = frame_of("r", 0, episodes(0, 6, seed=5))
        for wire, value in changes.items():
            if value is None:
                del frame[wire]
            else:
                frame[wire] = value
        with self.assertRaises(ProtocolError) as caught:
            Group.from_frame(frame)
        self.assertEqual(caught.exception.field, field, str(caught.exception))
        self.assertIn(field, str(caught.exception))
        return caught.exception

    def arrays(self) -> Dict[str, np.ndarray]:
        frame = frame_of("r", 0, episodes(0, 6, seed=5))
        dtypes = {"i32": "<i4", "u8": "<u1", "f32": "<f4"}
        return {k: np.frombuffer(v, dtype=dtypes[k.rsplit("_", 1)[1]]).copy() for k, v in frame.items() if k in fake_server.token_fields([])}

    def test_inconsistent_frames_name_the_field(self):
        a = self.arrays()
        off, mask, ids = a["token_offsets_i32"], a["loss_mask_u8"], a["token_ids_i32"]
        starts, ends, counts = a["turn_starts_i32"], a["turn_ends_i32"], a["turn_counts_i32"]
        prompts = a["prompt_lengths_i32"]
        b = lambda x: x.tobytes()  # noqa: E731
        # a field missing, undecodable, or of the wrong length
        self.corrupt("turn_ends_i32", turn_ends_i32=None)
        self.corrupt("token_ids_i32", token_ids_i32=b(ids)[:-2])
        self.corrupt("loss_mask_u8", loss_mask_u8=b(mask[:-1]))
        self.corrupt("logprobs_f32", logprobs_f32=b(a["logprobs_f32"][1:]))
        self.corrupt("token_rewards_f32", token_rewards_f32=b(np.append(a["token_rewards_f32"], 0)))
        self.corrupt("prompt_lengths_i32", prompt_lengths_i32=b(prompts[:-1]))
        self.corrupt("turn_counts_i32", turn_counts_i32=b(np.append(counts, 0)))
        # offsets: count, start, order, end
        self.corrupt("token_offsets_i32", token_offsets_i32=b(off[:-1]))
        self.corrupt("token_offsets_i32", token_offsets_i32=b(off + 1))
        swapped = off.copy()
        swapped[1], swapped[2] = off[2], off[1]
        self.corrupt("token_offsets_i32", token_offsets_i32=b(swapped))
        self.corrupt("token_offsets_i32", token_offsets_i32=b(np.append(off[:-1], off[-1] - 1)))
        # turns: counts that do not add up, a turn in the prompt, backwards, past the end, overlapping
        more = counts.copy()
        more[0] += 1
        self.corrupt("turn_starts_i32", turn_counts_i32=b(more))
        early = starts.copy()
        early[0] = prompts[0] - 1
        self.corrupt("turn_starts_i32", turn_starts_i32=b(early))
        backwards = ends.copy()
        backwards[0] = starts[0] - 1
        self.corrupt("turn_ends_i32", turn_ends_i32=b(backwards))
        late = ends.copy()
        late[0] = off[1] - off[0] + 1
        self.corrupt("turn_ends_i32", turn_ends_i32=b(late))
        multi = int(np.flatnonzero(counts >= 2)[0])  # an episode with two turns
        k = int(counts[:multi].sum()) + 1
        overlap = starts.copy()
        overlap[k] = ends[k - 1] - 1
        self.corrupt("turn_starts_i32", turn_starts_i32=b(overlap))
        long_prompt = prompts.copy()
        long_prompt[0] = off[1] + 1
        self.corrupt("prompt_lengths_i32", prompt_lengths_i32=b(long_prompt))
        # values where the turn boundaries say otherwise
        flipped = mask.copy()
        flipped[0] = 1  # a prompt token
        error = self.corrupt("loss_mask_u8", loss_mask_u8=b(flipped))
        self.assertIn("token 0 of episode 0", str(error))
        two = mask.copy()
        two[mask == 1] = 2
        self.corrupt("loss_mask_u8", loss_mask_u8=b(two))
        lp = a["logprobs_f32"].copy()
        lp[0] = -1.0
        self.corrupt("logprobs_f32", logprobs_f32=b(lp))
        rw = a["token_rewards_f32"].copy()
        rw[0] = 1.0
        self.corrupt("token_rewards_f32", token_rewards_f32=b(rw))
        moved = a["token_rewards_f32"].copy()
        t = int(ends[0]) + int(off[0]) - 1  # episode 0's first turn ends at t: move its reward one token left
        if ends[0] - starts[0] >= 2:
            moved[t - 1], moved[t] = 1.0, 0.0
            self.corrupt("token_rewards_f32", token_rewards_f32=b(moved))


class BatchTokenTests(unittest.TestCase):
    def setUp(self) -> None:
        self.eps = [episodes(g, 4, seed=20 + g) for g in range(3)]
        self.groups = [Group.from_frame(frame_of("r", g, self.eps[g])) for g in range(3)]

    def test_kept_groups_in_order(self):
        batch = Batch("r", "stream", [self.groups[2], self.groups[0], self.groups[1]], verdict([0, 2], [1]))
        want = logs_of(self.eps[0]) + logs_of(self.eps[2])
        self.assertEqual(len(batch.tokens), len(batch.episodes))
        for log, w in zip(batch.tokens, want):
            np.testing.assert_array_equal(log.ids, w["ids"])
        arrays = batch.token_arrays()
        self.assertEqual(list(arrays), [k.rsplit("_", 1)[0] for k in fake_server.token_fields([])])  # the wire's names, without suffix
        lengths = [len(w["ids"]) for w in want]
        np.testing.assert_array_equal(arrays["token_offsets"], np.concatenate(([0], np.cumsum(lengths))))
        self.assertEqual(arrays["token_offsets"].dtype, np.int32)
        np.testing.assert_array_equal(arrays["token_ids"], [t for w in want for t in w["ids"]])
        np.testing.assert_array_equal(arrays["turn_starts"], [t for w in want for t in w["turn_starts"]])
        np.testing.assert_array_equal(arrays["prompt_lengths"], [w["prompt_length"] for w in want])
        self.assertEqual(arrays["loss_mask"].dtype, np.uint8)
        everything = batch.token_arrays("all")
        self.assertEqual(len(everything["token_offsets"]), 13)
        with self.assertRaises(ValueError):
            batch.token_arrays("some")

    def test_a_group_without_token_logs(self):
        cancelled = [fake_server.episode(12 + i, 3, "Fake", 9, cancelled=True) for i in range(4)]
        failed = Group.from_frame(decode(encode(fake_server.group_frame("r", 3, cancelled, None, None, tokens=True))))
        self.assertIsNone(failed.tokens)  # like the server: no token arrays unless every episode has a log
        batch = Batch("r", "stream", self.groups + [failed], dict(verdict([0, 1, 2]), failed_groups=[3]))
        self.assertEqual(len(batch.tokens), 12)
        pack_batch(batch)  # kept groups only
        with self.assertRaisesRegex(ValueError, r"\[3\]"):
            batch.token_arrays("all")
        with self.assertRaisesRegex(ValueError, r"\[3\]"):
            pack_batch(batch.groups)

    def test_empty(self):
        batch = Batch("r", "batch", [], verdict([]))
        self.assertEqual(batch.tokens, [])
        arrays = batch.token_arrays()
        np.testing.assert_array_equal(arrays["token_offsets"], [0])
        packed = pack_batch(batch)
        self.assertEqual(packed["input_ids"].shape, (0, 0))
        self.assertEqual(packed["scores"].shape, (0,))
        self.assertEqual(pack_batch(batch, max_length=8)["loss_mask"].shape, (0, 8))


def reference_grpo(scores: List[float], groups: List[int], eps: float = 1e-6) -> List[float]:
    """verl's compute_grpo_outcome_advantage, episode by episode: unbiased std, a group of one → (0, 1)."""
    by: Dict[int, List[float]] = {}
    for s, g in zip(scores, groups):
        by.setdefault(g, []).append(s)
    stats = {g: (0.0, 1.0) if len(v) == 1 else (statistics.mean(v), statistics.stdev(v)) for g, v in by.items()}
    return [(s - stats[g][0]) / (stats[g][1] + eps) for s, g in zip(scores, groups)]


class PackTests(unittest.TestCase):
    def setUp(self) -> None:
        self.eps = [episodes(g, 6, seed=40 + g) for g in range(4)]
        self.frames = [frame_of("r", g, self.eps[g]) for g in range(4)]
        groups = [Group.from_frame(f) for f in self.frames]
        self.batch = Batch("r", "batch", [groups[0], groups[1], groups[3]], verdict([0, 1, 3], [2]))
        self.kept_eps = self.eps[0] + self.eps[1] + self.eps[3]
        self.logs = logs_of(self.kept_eps)

    def check_packed(self, packed: Dict[str, np.ndarray], left_pad: bool, pad_id: int, width: int) -> None:
        b = len(self.logs)
        for key in ("input_ids", "attention_mask", "loss_mask", "position_ids", "old_logprobs", "token_rewards", "advantages"):
            self.assertEqual(packed[key].shape, (b, width), key)
        for key in ("input_ids", "attention_mask", "loss_mask", "position_ids"):
            self.assertEqual(packed[key].dtype, np.int64, key)
        for key in ("old_logprobs", "token_rewards", "advantages", "scores"):
            self.assertEqual(packed[key].dtype, np.float32, key)
        mask = packed["loss_mask"] == 1
        # The guarantee: the sampled ids, episode after episode, and their logprobs at the same places.
        np.testing.assert_array_equal(packed["input_ids"][mask], [t for log in self.logs for t in sampled(log)])
        np.testing.assert_array_equal(
            packed["old_logprobs"][mask], np.array([x for log in self.logs for x in sampled(log, "logprobs")], dtype=np.float32)
        )
        self.assertTrue(np.all(packed["old_logprobs"][~mask] == 0))
        self.assertTrue(set(np.unique(packed["loss_mask"])) <= {0, 1})
        advantages = reference_grpo([e["score"] for e in self.kept_eps], [e["group_id"] for e in self.kept_eps])
        for i, log in enumerate(self.logs):
            n = len(log["ids"])
            cols = np.arange(width - n, width) if left_pad else np.arange(n)
            pads = np.setdiff1d(np.arange(width), cols)
            row = packed["input_ids"][i]
            np.testing.assert_array_equal(row[cols], log["ids"])
            self.assertTrue(np.all(row[pads] == pad_id))
            np.testing.assert_array_equal(packed["attention_mask"][i][cols], 1)
            np.testing.assert_array_equal(packed["attention_mask"][i][pads], 0)
            np.testing.assert_array_equal(packed["loss_mask"][i][cols], log["loss_mask"])
            np.testing.assert_array_equal(packed["token_rewards"][i][cols], np.array(log["rewards"], dtype=np.float32))
            # verl's position ids: 0 … n − 1 over the real tokens
            np.testing.assert_array_equal(packed["position_ids"][i][cols], np.arange(n))
            expect_pad_pos = 0 if left_pad else max(n - 1, 0)
            self.assertTrue(np.all(packed["position_ids"][i][pads] == expect_pad_pos))
            want = np.where(np.array(log["loss_mask"]) == 1, np.float32(advantages[i]), 0)
            np.testing.assert_allclose(packed["advantages"][i][cols], want, rtol=1e-5, atol=1e-6)
            self.assertTrue(np.all(packed["advantages"][i][pads] == 0))
            self.assertEqual(packed["lengths"][i], n)
            self.assertEqual(packed["prompt_lengths"][i], log["prompt_length"])
        np.testing.assert_array_equal(packed["scores"], self.batch.scores)
        np.testing.assert_array_equal(packed["group_ids"], self.batch.group_ids)
        np.testing.assert_array_equal(packed["env_ids"], self.batch.env_ids)
        self.assertFalse(packed["truncated"].any())

    def test_unreported_logprobs_are_masked_not_zeroed_into_the_loss(self):
        # Two sampled ids of the first episode without a logprob (NaN), as llama.cpp gives
        # for tokens that end inside a UTF-8 character.
        frame = dict(self.frames[0])
        logprobs = np.frombuffer(frame["logprobs_f32"], dtype="<f4").copy()
        mask = np.frombuffer(frame["loss_mask_u8"], dtype=np.uint8)
        holes = np.flatnonzero(mask == 1)[:2]
        logprobs[holes] = np.nan
        frame["logprobs_f32"] = logprobs.astype("<f4").tobytes()
        group = Group.from_frame(decode(encode(frame)))
        log = group.tokens[0]
        self.assertEqual(int(np.count_nonzero(log.logprob_mask)), int(np.count_nonzero(log.loss_mask)) - 2)
        self.assertTrue(np.all(log.logprob_mask[holes] == 0))
        packed = pack_batch(group)
        self.assertTrue(np.isfinite(packed["old_logprobs"]).all())
        self.assertEqual(packed["logprob_mask"].dtype, np.int64)
        self.assertEqual(int(packed["logprob_mask"].sum()), int(packed["loss_mask"].sum()) - 2)
        self.assertTrue(np.all(packed["logprob_mask"] <= packed["loss_mask"]))

    def test_right_and_left_padding(self):
        width = max(len(log["ids"]) for log in self.logs)
        self.check_packed(pack_batch(self.batch), left_pad=False, pad_id=0, width=width)
        self.check_packed(pack_batch(self.batch, pad_id=-7, left_pad=True), left_pad=True, pad_id=-7, width=width)
        self.check_packed(pack_batch(self.batch, pad_id=99, max_length=width + 5), left_pad=False, pad_id=99, width=width + 5)
        self.check_packed(pack_batch(self.batch, pad_id=99, max_length=width + 3, left_pad=True), left_pad=True, pad_id=99, width=width + 3)

    def test_advantage_modes(self):
        scores = pack_batch(self.batch, advantages="scores")
        mask = scores["loss_mask"] == 1
        per_row = np.broadcast_to(self.batch.scores[:, None], mask.shape)
        np.testing.assert_array_equal(scores["advantages"][mask], per_row[mask])
        self.assertTrue(np.all(scores["advantages"][~mask] == 0))
        self.assertNotIn("advantages", pack_batch(self.batch, advantages=None))
        with self.assertRaises(ValueError):
            pack_batch(self.batch, advantages="gae")

    def test_groups_from_different_rollouts_are_separate_grpo_groups(self):
        a = Group.from_frame(frame_of("a", 0, self.eps[0]))
        b = Group.from_frame(frame_of("b", 0, self.eps[1]))  # same group id 0, another rollout
        packed = pack_batch([a, b])
        per_episode = [packed["advantages"][i][packed["loss_mask"][i] == 1] for i in range(12)]
        want = reference_grpo([e["score"] for e in self.eps[0] + self.eps[1]], [0] * 6 + [1] * 6)
        for got, w in zip(per_episode, want):
            np.testing.assert_allclose(got, w, rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(packed["group_ids"], [0] * 12)
        self.assertEqual(pack_batch(a)["input_ids"].shape[0], 6)
        with self.assertRaises(TypeError):
            pack_batch([a, "b"])

    def test_max_length_and_truncation(self):
        longest = max(len(log["ids"]) for log in self.logs)
        with self.assertRaisesRegex(ValueError, "truncate=True"):
            pack_batch(self.batch, max_length=longest - 1)
        with self.assertRaises(ValueError):
            pack_batch(self.batch, max_length=0)
        cut = 7
        for left_pad in (False, True):
            packed = pack_batch(self.batch, max_length=cut, truncate=True, left_pad=left_pad)
            self.assertEqual(packed["input_ids"].shape, (len(self.logs), cut))
            lengths = [len(log["ids"]) for log in self.logs]
            np.testing.assert_array_equal(packed["truncated"], [n > cut for n in lengths])
            np.testing.assert_array_equal(packed["lengths"], [min(n, cut) for n in lengths])
            mask = packed["loss_mask"] == 1
            kept_sampled = [t for log in self.logs for t, m in zip(log["ids"][:cut], log["loss_mask"][:cut]) if m == 1]
            np.testing.assert_array_equal(packed["input_ids"][mask], kept_sampled)
            for i, log in enumerate(self.logs):
                n = min(len(log["ids"]), cut)
                cols = np.arange(cut - n, cut) if left_pad else np.arange(n)
                np.testing.assert_array_equal(packed["input_ids"][i][cols], log["ids"][:n])

    def test_grpo_advantages(self):
        h = 1 / np.sqrt(2)
        adv = grpo_advantages(np.array([1, 3, 5, 5, 0, 2, 7], dtype=np.float32), np.array([0, 0, 1, 1, 2, 2, 3]))
        self.assertEqual(adv.dtype, np.float32)
        # unbiased std (verl, TRL, OpenRLHF); equal scores → 0; a group of one keeps its score (verl)
        np.testing.assert_allclose(adv, [-h, h, 0, 0, -h, h, 7], rtol=1e-5)
        rng = np.random.default_rng(0)
        scores = rng.normal(size=40).astype(np.float32)
        groups = rng.integers(0, 7, 40)
        np.testing.assert_allclose(grpo_advantages(scores, groups), reference_grpo(scores.tolist(), groups.tolist()), rtol=1e-5, atol=1e-6)
        self.assertEqual(grpo_advantages(np.zeros(0), np.zeros(0)).shape, (0,))
        with self.assertRaises(ValueError):
            grpo_advantages(np.zeros(3), np.zeros(2))


class FakeServerTokenTests(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self) -> None:
        self.server = FakeServer()
        self.server.start()
        self.addCleanup(self.server.stop)
        self.client = AsyncClient(self.server.url, reconnect_backoff=0.02)
        await self.client.connect()
        self.addAsyncCleanup(self.client.close)

    async def test_rollout_with_tokens(self):
        batch = await self.client.rollout(tag="Fake", groups=6, group_size=4, step=2, tokens=True, timeout=TIMEOUT)
        request = [f for f in self.server.client_frames if f.get("type") == "rollout"][0]
        self.assertIs(request["tokens"], True)
        self.assertTrue(batch.dropped)  # the filter dropped some: the token logs follow the kept groups
        self.assertEqual(len(batch.tokens), len(batch.episodes))
        for log, e in zip(batch.tokens, batch.episodes):
            np.testing.assert_array_equal(log.ids, fake_server.token_log(e["env_id"], e["seed"], e["reward"])["ids"])
        packed = pack_batch(batch)
        self.assertEqual(packed["input_ids"].shape[0], len(batch))
        np.testing.assert_array_equal(packed["env_ids"], batch.env_ids)

    async def test_stream_with_tokens_and_without(self):
        stream = self.client.stream(tag="Fake", groups=3, group_size=2, mode="val", tokens=True)
        seen = []
        async for group in stream:
            self.assertEqual(len(group.tokens), 2)
            seen.append(pack_batch(group)["input_ids"].shape[0])
        self.assertEqual(seen, [2, 2, 2])
        self.assertEqual(len(stream.batch.tokens), 6)
        plain = await self.client.rollout(tag="Fake", groups=2, group_size=2, mode="val", timeout=TIMEOUT)
        self.assertIsNone(plain.tokens)
        self.assertNotIn("tokens", [f for f in self.server.client_frames if f.get("type") == "rollout"][-1])

    async def test_a_bad_token_frame_fails_the_rollout(self):
        original = fake_server.token_fields

        def broken(logs):
            fields = original(logs)
            fields["loss_mask_u8"] = fields["loss_mask_u8"][:-1]
            return fields

        fake_server.token_fields = broken
        self.addCleanup(setattr, fake_server, "token_fields", original)
        with self.assertRaises(ProtocolError) as caught:
            await self.client.rollout(tag="Fake", groups=2, group_size=3, mode="val", tokens=True, timeout=TIMEOUT)
        self.assertEqual(caught.exception.field, "loss_mask_u8")
        # the connection is fine: the next rollout works
        batch = await self.client.rollout(tag="Fake", groups=1, group_size=1, mode="val", timeout=TIMEOUT)
        self.assertEqual(batch.kept, [0])


if __name__ == "__main__":
    unittest.main()
