"""Unit tests of rollgym_client against the fake server (test/python/fake_server.py).

Run: PYTHONPATH=python /usr/bin/python3 -m unittest discover -s test/python -p 'test_*.py'
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import io
import logging
import os
import pickle
import sys
import time
import unittest

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "python", "examples"))

import fake_server  # noqa: E402
from fake_server import ACTIONS, TAGS, FakeServer, expected_batch  # noqa: E402

from rollgym_client import (  # noqa: E402
    AsyncClient,
    AuthError,
    Batch,
    Client,
    ConnectionLost,
    Group,
    ProtocolError,
    RollgymError,
    normalize_tags,
    ws_url,
)
from rollgym_client.codec import decode_array, encode  # noqa: E402

TIMEOUT = 20
logging.getLogger("rollgym_client").setLevel(logging.ERROR)  # resumes log warnings


def flat(batch_eps):
    return [e for eps in batch_eps for e in eps]


class FakeServerCase(unittest.IsolatedAsyncioTestCase):
    server_options: dict = {}

    def setUp(self) -> None:
        self.server = FakeServer(**self.server_options)
        self.server.start()
        self.addCleanup(self.server.stop)

    async def client(self, **options) -> AsyncClient:
        options.setdefault("reconnect_backoff", 0.02)
        client = AsyncClient(self.server.url, **options)
        await client.connect()
        self.addAsyncCleanup(client.close)
        return client

    async def eventually(self, predicate, what: str = "condition") -> None:
        """The fake server runs in another thread: wait for what it records."""
        deadline = time.monotonic() + TIMEOUT
        while not predicate():
            if time.monotonic() > deadline:
                self.fail(f"timed out waiting for {what}")
            await asyncio.sleep(0.01)

    def assert_batch_matches(self, batch: Batch, tags, group_size: int, mode: str, seed: int) -> None:
        eps, kept, dropped = expected_batch(tags, group_size, mode, seed)
        self.assertEqual(batch.kept, kept)
        self.assertEqual(batch.dropped, dropped)
        kept_eps = [e for g in kept for e in eps[g]]
        self.assertEqual([e["env_id"] for e in batch.episodes], [e["env_id"] for e in kept_eps])
        self.assertEqual(batch.env_ids.dtype, np.int32)
        self.assertEqual(batch.group_ids.dtype, np.int32)
        self.assertEqual(batch.scores.dtype, np.float32)
        self.assertEqual(batch.rewards.dtype, np.float32)
        self.assertEqual(batch.penalties.dtype, np.float32)
        self.assertEqual(batch.success.dtype, np.bool_)
        np.testing.assert_array_equal(batch.env_ids, [e["env_id"] for e in kept_eps])
        np.testing.assert_array_equal(batch.group_ids, [e["group_id"] for e in kept_eps])
        np.testing.assert_array_equal(batch.scores, np.array([e["score"] for e in kept_eps], dtype=np.float32))
        np.testing.assert_array_equal(batch.rewards, np.array([e["reward"] for e in kept_eps], dtype=np.float32))
        np.testing.assert_array_equal(batch.penalties, np.array([e["penalty"] for e in kept_eps], dtype=np.float32))
        np.testing.assert_array_equal(batch.success, [e["success"] for e in kept_eps])
        self.assertEqual(batch.metrics, fake_server.metrics_of(mode, eps, kept))


class HandshakeTests(FakeServerCase):
    async def test_welcome_is_exposed(self):
        client = await self.client(client_name="unit-test")
        self.assertEqual(client.server, "fake-rollgym/0.0.1")
        self.assertTrue(client.session)
        self.assertEqual(client.envs, TAGS)
        self.assertEqual(client.limits["max_frame_bytes"], 1 << 20)
        await self.eventually(lambda: len(self.server.client_frames) >= 2, "hello and credit")
        hello = self.server.client_frames[0]
        self.assertEqual(hello, {"type": "hello", "protocol": 1, "client": "unit-test"})
        self.assertEqual(self.server.client_frames[1], {"type": "credit", "groups": 8})

    async def test_context_manager_closes(self):
        async with AsyncClient(self.server.url) as client:
            self.assertTrue(client.connected)
        self.assertFalse(client.connected)
        with self.assertRaises(RollgymError):
            await client.rollout(tag="Fake", groups=1, group_size=1)

    async def test_protocol_version_mismatch(self):
        client = AsyncClient(self.server.url, protocol_version=2)
        with self.assertRaises(ProtocolError) as caught:
            await client.connect()
        self.assertEqual(caught.exception.code, "protocol_version")
        self.assertIn("client speaks protocol 2, server speaks 1", str(caught.exception))

    async def test_wrong_path_is_a_protocol_error(self):
        client = AsyncClient(self.server.url.replace("/v1/rollouts", "/nope"))
        with self.assertRaises(ProtocolError) as caught:
            await client.connect()
        self.assertIn("404", str(caught.exception))

    async def test_connection_refused(self):
        client = AsyncClient("ws://127.0.0.1:9", open_timeout=3)
        with self.assertRaises(ConnectionLost) as caught:
            await client.connect()
        self.assertEqual(caught.exception.code, "connect_failed")
        self.assertIn("cannot connect", str(caught.exception))


class AuthTests(FakeServerCase):
    server_options = {"token": "s3cret"}

    async def test_missing_token(self):
        with self.assertRaises(AuthError) as caught:
            await AsyncClient(self.server.url).connect()
        self.assertIn("401", str(caught.exception))
        self.assertIn("token", str(caught.exception))

    async def test_wrong_token(self):
        with self.assertRaises(AuthError):
            await AsyncClient(self.server.url, token="nope").connect()

    async def test_right_token_sends_bearer_header(self):
        client = await self.client(token="s3cret")
        self.assertTrue(client.connected)
        self.assertEqual(self.server.headers_seen[-1].get("Authorization"), "Bearer s3cret")


class RolloutTests(FakeServerCase):
    async def test_batch_delivery_arrays_and_verdict(self):
        client = await self.client()
        progress = []
        batch = await asyncio.wait_for(
            client.rollout(tag="Fake", groups=6, group_size=4, seed=5, on_progress=progress.append), TIMEOUT
        )
        self.assert_batch_matches(batch, [("Fake", 6)], 4, "train", 5)
        self.assertTrue(0 < len(batch.kept) < 6, "the fixture should drop some groups")
        self.assertEqual(batch.delivery, "batch")
        self.assertEqual([g.group for g in batch.groups], batch.kept)  # batch delivery: kept only
        self.assertTrue(all(g.kept is True and g.score is not None for g in batch.groups))
        self.assertEqual(len(batch), len(batch.kept) * 4)
        self.assertEqual(batch.num_episodes, 24)
        self.assertEqual(batch.failed, 0)
        self.assertTrue(progress and progress[-1]["groups_done"] == 6)
        # every group acknowledged exactly once, then the verdict
        await self.eventually(lambda: self.server.batch_acks, "batch ack")
        self.assertEqual(sorted(g for _, g in self.server.acks), batch.kept)
        self.assertEqual(self.server.batch_acks, [batch.rollout])
        self.assertEqual(self.server.errors_sent, [])

    async def test_request_frame(self):
        client = await self.client()
        await client.rollout(
            tags=["Fake", "FakeB"], groups=[2, 1], group_size=3, mode="val", step=np.int64(4),
            max_turn=3, sampling={"temperature": 0.5, "top_p": None}, rollout_id="mine",
        )
        frame = next(f for f in self.server.client_frames if f["type"] == "rollout")
        self.assertEqual(frame, {
            "type": "rollout", "id": "mine", "tags": [{"tag": "Fake", "groups": 2}, {"tag": "FakeB", "groups": 1}],
            "mode": "val", "group_size": 3, "delivery": "batch", "step": 4, "max_turn": 3,
            "sampling": {"temperature": 0.5},
        })

    async def test_val_keeps_everything_and_tags_in_order(self):
        client = await self.client()
        batch = await client.rollout(tags={"Fake": 2, "FakeB": 3}, group_size=2, mode="val")
        self.assert_batch_matches(batch, [("Fake", 2), ("FakeB", 3)], 2, "val", 123)
        self.assertEqual([g.tag for g in batch.groups], ["Fake", "Fake", "FakeB", "FakeB", "FakeB"])
        self.assertEqual([g.seed for g in batch.groups], [123, 124, 125, 126, 127])
        np.testing.assert_array_equal(batch.group_ids, np.repeat(np.arange(5), 2))

    async def test_stream_delivery_yields_groups_then_verdict(self):
        self.server.group_delay = 0.01
        client = await self.client(credit=3)
        stream = client.stream(tag="Fake", groups=7, group_size=3, seed=9)
        seen = []
        async for group in stream:
            self.assertIsInstance(group, Group)
            if not seen:
                self.assertIsNone(group.kept)  # the verdict comes in the batch frame
            self.assertEqual(group.env_ids.dtype, np.int32)
            np.testing.assert_array_equal(group.group_ids, [group.group] * 3)
            seen.append(group)
        self.assertEqual([g.group for g in seen], list(range(7)))
        batch = stream.batch
        self.assertIsNotNone(batch)
        self.assertEqual(batch.delivery, "stream")
        self.assert_batch_matches(batch, [("Fake", 7)], 3, "train", 9)
        self.assertEqual([g.kept for g in seen], [g in batch.kept for g in range(7)])
        self.assertEqual(len(batch.groups), 7)  # stream: every group, dropped ones too
        everything = batch.arrays("all")
        np.testing.assert_array_equal(everything["env_ids"], np.arange(21))
        self.assertEqual(len(batch.all_episodes), 21)
        self.assertLessEqual(self.server.max_inflight, 3)

    async def test_rollout_with_stream_delivery_collects_all_groups(self):
        client = await self.client()
        batch = await client.rollout(tag="Fake", groups=5, group_size=2, seed=1, delivery="stream")
        self.assertEqual(len(batch.groups), 5)
        self.assert_batch_matches(batch, [("Fake", 5)], 2, "train", 1)

    async def test_credit_bounds_unacknowledged_groups(self):
        for credit in (1, 2, 5):
            with self.subTest(credit=credit):
                self.server.max_inflight = 0
                client = await self.client(credit=credit)
                stream = client.stream(tag="Fake", groups=12, group_size=1, seed=0)
                n = 0
                async for _ in stream:
                    await asyncio.sleep(0.005)  # a slow consumer
                    n += 1
                self.assertEqual(n, 12)
                self.assertLessEqual(self.server.max_inflight, credit)
                await client.close()

    async def test_concurrent_rollouts_share_the_connection(self):
        client = await self.client(credit=2)
        batches = await asyncio.wait_for(asyncio.gather(*[
            client.rollout(tag="Fake", groups=4, group_size=2, seed=s, mode="val") for s in (1, 50, 100)
        ]), TIMEOUT)
        for seed, batch in zip((1, 50, 100), batches):
            self.assert_batch_matches(batch, [("Fake", 4)], 2, "val", seed)

    async def test_server_error_carries_code_rollout_and_field(self):
        client = await self.client()
        with self.assertRaises(RollgymError) as caught:
            await client.rollout(tag="Nope", groups=1, group_size=1, rollout_id="bad")
        error = caught.exception
        self.assertEqual((error.code, error.rollout, error.field), ("unknown_tag", "bad", "tags"))
        self.assertIn("unknown tag 'Nope'", str(error))
        batch = await client.rollout(tag="Fake", groups=1, group_size=1, mode="val")  # still usable
        self.assertEqual(batch.kept, [0])

    async def test_unattributed_validation_error_fails_the_new_rollout(self):
        # The real server's schema errors for a rollout frame name no rollout id.
        client = await self.client()
        r = client._new_rollout(False, None, "Fake", 1, 1, "train", None, None, "batch", None, None, {})
        r.frame["group_size"] = "x"
        await client._start(r)
        with self.assertRaises(RollgymError) as caught:
            await asyncio.wait_for(asyncio.shield(r.future), TIMEOUT)
        self.assertEqual(caught.exception.code, "bad_frame")
        self.assertEqual(caught.exception.rollout, r.id)

    async def test_client_side_validation(self):
        client = await self.client()
        with self.assertRaises(TypeError):
            await client.rollout(tag="Fake", groups=1)  # no group_size
        with self.assertRaises(ValueError):
            await client.rollout(tag="Fake", groups=1, group_size=1, mode="test")
        with self.assertRaises(ValueError):
            await client.rollout(tag="Fake", groups=0, group_size=1)
        with self.assertRaises(ValueError):
            await client.rollout(tag="Fake", groups=1, group_size=1, seed=2**32)
        with self.assertRaises(TypeError):
            await client.rollout(tag="Fake", groups=True, group_size=1)
        client.stream(tag="Fake", groups=1, group_size=1, rollout_id="dup")
        s = client.stream(tag="Fake", groups=1, group_size=1, rollout_id="dup2")
        await s.start()
        with self.assertRaises(ValueError):
            await client.rollout(tag="Fake", groups=1, group_size=1, rollout_id="dup2")
        await s.collect()

    async def test_cancel(self):
        self.server.group_delay = 0.05
        client = await self.client()
        task = asyncio.ensure_future(client.rollout(tag="Fake", groups=40, group_size=2, rollout_id="long"))
        await asyncio.sleep(0.2)
        await client.cancel("long")
        batch = await asyncio.wait_for(task, TIMEOUT)
        self.assertGreater(len(batch.failed_groups), 0)
        self.assertGreater(batch.failed, 0)
        self.assertEqual(len(batch.kept) + len(batch.dropped) + len(batch.failed_groups), 40)
        await self.eventually(lambda: {"type": "cancel", "rollout": "long"} in self.server.client_frames, "cancel")
        with self.assertRaises(RollgymError) as caught:
            await client.cancel("never-started")
        self.assertEqual(caught.exception.code, "unknown_rollout")

    async def test_closing_a_stream_early_cancels_and_drains(self):
        self.server.group_delay = 0.02
        client = await self.client(credit=2)
        stream = client.stream(tag="Fake", groups=30, group_size=1, rollout_id="early")
        got = 0
        async for _ in stream:
            got += 1
            if got == 2:
                break
        await stream.aclose()
        await self.eventually(lambda: {"type": "cancel", "rollout": "early"} in self.server.client_frames, "cancel")
        # everything that arrived was acknowledged, and the verdict too
        await self.eventually(lambda: "early" in self.server.batch_acks, "batch ack")
        session = next(iter(self.server.sessions.values()))
        self.assertEqual(session.inflight, {})

    async def test_timeout_cancels(self):
        self.server.group_delay = 0.05
        client = await self.client()
        with self.assertRaises(RollgymError) as caught:
            await client.rollout(tag="Fake", groups=50, group_size=1, timeout=0.2, rollout_id="slow")
        self.assertEqual(caught.exception.code, "timeout")
        await self.eventually(lambda: {"type": "cancel", "rollout": "slow"} in self.server.client_frames, "cancel")

    async def test_outgoing_frame_limit(self):
        self.server.max_frame_bytes = 4096
        client = await self.client()
        env = await client.open_envs("Fake", groups=1, group_size=1)
        with self.assertRaises(RollgymError) as caught:
            await env.step({0: "x" * 10000})
        self.assertEqual(caught.exception.code, "limit")
        self.assertIn("max_frame_bytes", str(caught.exception))
        self.assertTrue(client.connected)
        results = await env.step({0: "<answer>Up</answer>"})
        self.assertEqual(len(results), 1)


class ResumeTests(FakeServerCase):
    async def test_batch_rollout_survives_a_drop(self):
        client = await self.client(credit=2)
        session = client.session
        self.server.drop_after_groups = 2
        batch = await asyncio.wait_for(client.rollout(tag="Fake", groups=10, group_size=3, seed=3), TIMEOUT)
        self.assert_batch_matches(batch, [("Fake", 10)], 3, "train", 3)
        self.assertEqual(self.server.drops, 1)
        self.assertEqual(client.resumes, 1)
        self.assertEqual(client.session, session)
        self.assertEqual(self.server.connections, 2)
        resume_hello = [f for f in self.server.client_frames if f["type"] == "hello"][-1]
        self.assertEqual(resume_hello["resume"], session)

    async def test_stream_sees_each_group_once_across_drops(self):
        self.server.group_delay = 0.01
        client = await self.client(credit=4)
        self.server.drop_after_groups = 3
        stream = client.stream(tag="Fake", groups=16, group_size=2, seed=11)
        ids = []
        async for group in stream:
            ids.append(group.group)
            if len(ids) == 8 and client.resumes == 1:
                self.server.drop_after_groups = 2  # a second drop mid-stream
        self.assertEqual(sorted(ids), list(range(16)))
        self.assertEqual(len(ids), len(set(ids)))
        self.assertGreaterEqual(client.resumes, 1)
        self.assert_batch_matches(stream.batch, [("Fake", 16)], 2, "train", 11)

    async def test_lost_acknowledgements_lead_to_resends_that_are_dropped(self):
        client = await self.client(credit=4)
        self.server.drop_on_frame = "ack"  # the first ack never arrives: its group is resent
        batch = await asyncio.wait_for(client.rollout(tag="Fake", groups=6, group_size=2, seed=2, delivery="stream"), TIMEOUT)
        self.assertEqual(self.server.drops, 1)
        self.assertEqual(client.resumes, 1)
        self.assertEqual([g.group for g in batch.groups], list(range(6)))
        self.assert_batch_matches(batch, [("Fake", 6)], 2, "train", 2)
        self.assertGreater(self.server.group_frames_sent, 6)  # something was sent twice
        await asyncio.sleep(0.1)
        self.assertEqual([e for e in self.server.errors_sent if e["code"] != "duplicate_id"], [])
        session = next(iter(self.server.sessions.values()))
        self.assertEqual(session.inflight, {})

    async def test_request_lost_in_the_drop_is_sent_again(self):
        client = await self.client()
        self.server.drop_on_frame = "rollout"  # the request itself is lost
        batch = await asyncio.wait_for(client.rollout(tag="Fake", groups=3, group_size=2, seed=4, mode="val"), TIMEOUT)
        self.assert_batch_matches(batch, [("Fake", 3)], 2, "val", 4)
        self.assertEqual(client.resumes, 1)

    async def test_expired_session_raises_connection_lost(self):
        self.server.grace_s = 0.0
        client = await self.client()
        self.server.drop_after_groups = 1
        with self.assertRaises(ConnectionLost) as caught:
            await asyncio.wait_for(client.rollout(tag="Fake", groups=4, group_size=1, rollout_id="r", mode="val"), TIMEOUT)
        self.assertIn("could not resume", str(caught.exception))
        self.assertEqual(caught.exception.rollout, "r")
        # the next request starts a new session
        old = [f for f in self.server.client_frames if f["type"] == "hello"][0]
        batch = await client.rollout(tag="Fake", groups=2, group_size=1, mode="val")
        self.assertEqual(batch.kept, [0, 1])
        self.assertNotIn("resume", [f for f in self.server.client_frames if f["type"] == "hello"][-1])
        self.assertNotIn("resume", old)

    async def test_resume_disabled(self):
        client = await self.client(resume=False)
        self.server.drop_after_groups = 1
        with self.assertRaises(ConnectionLost) as caught:
            await asyncio.wait_for(client.rollout(tag="Fake", groups=4, group_size=1, mode="val"), TIMEOUT)
        self.assertIn("resume is off", str(caught.exception))

    async def test_server_shutdown(self):
        self.server.group_delay = 0.02
        client = await self.client()
        task = asyncio.ensure_future(client.rollout(tag="Fake", groups=10, group_size=1, mode="val"))
        await self.eventually(lambda: any(f["type"] == "rollout" for f in self.server.client_frames), "the rollout")
        await asyncio.get_running_loop().run_in_executor(None, self.server.shutdown)
        batch = await asyncio.wait_for(task, TIMEOUT)  # running rollouts finish first
        self.assertEqual(len(batch.kept), 10)
        await self.eventually(lambda: not client.connected, "the server's close")
        self.assertEqual(client.closing_reason, "fake server shutting down")
        self.assertEqual(client.resumes, 0)
        with self.assertRaises(ConnectionLost) as caught:
            await client.rollout(tag="Fake", groups=1, group_size=1)
        self.assertEqual(caught.exception.code, "shutting_down")


class EnvHostingTests(FakeServerCase):
    async def test_open_step_close(self):
        client = await self.client()
        env = await client.open_envs("Fake", groups=2, group_size=2, seed=7, max_turn=2)
        self.assertEqual(env.env_ids, [0, 1, 2, 3])
        self.assertEqual([e["seed"] for e in env.episodes], [7, 7, 8, 8])
        self.assertEqual(env.messages[0][0]["role"], "system")
        opened = next(f for f in self.server.client_frames if f["type"] == "env_open")
        self.assertEqual(opened, {"type": "env_open", "id": env.id, "tag": "Fake", "groups": 2, "group_size": 2,
                                  "mode": "train", "seed": 7, "max_turn": 2, "think": True})
        right0, right2 = ACTIONS[7 % 4], ACTIONS[8 % 4]
        results = await env.step({0: f"ok</think><answer>{right0}</answer>", 1: "<answer>Up</answer>"})
        self.assertEqual([r.env_id for r in results], [0, 1])
        self.assertTrue(results[0].done and results[0].success and results[0].messages is None)
        self.assertEqual(results[0].reward, 1.0)
        self.assertFalse(results[1].done)
        self.assertEqual(results[1].messages[-1]["role"], "user")
        # The wire carries only the changed tail (keep 1: the system message); the user gets the full chat.
        stepped = self.server.stepped_sent[-1]
        self.assertEqual(stepped["results"][1]["keep"], 1)
        self.assertEqual(len(stepped["results"][1]["messages"]), 3)
        self.assertEqual([m["role"] for m in results[1].messages], ["system", "user", "assistant", "user"])
        self.assertEqual(results[1].messages[1]["content"], "Turn 1: seed 7 (answered)")
        self.assertEqual(env.messages[1], results[1].messages)
        self.assertEqual(env.active, [1, 2, 3])
        results = await env.step([(2, f"<answer>{right2}</answer>"), (3, "nothing")])
        self.assertTrue(results[0].success)
        self.assertTrue(results[1].format_penalty)
        with self.assertRaises(RollgymError) as caught:
            await env.step({0: "again"})
        self.assertEqual(caught.exception.code, "episode_done")
        results = await env.step([{"env_id": 1, "text": "x"}, {"env_id": 3, "text": "y"}])
        self.assertTrue(all(r.done for r in results))  # max_turn 2
        self.assertEqual(env.active, [])
        episodes, metrics = await env.close()
        self.assertEqual(len(episodes), 4)
        self.assertEqual(metrics, {"train/Fake/success": 0.5})
        with self.assertRaises(RollgymError):
            await env.step({1: "closed"})

    async def test_concurrent_env_sessions(self):
        client = await self.client()
        a, b = await asyncio.gather(client.open_envs("Fake", seed=1), client.open_envs("FakeB", seed=2))
        ra, rb = await asyncio.gather(a.step({0: "<answer>Down</answer>"}), b.step({0: "<answer>Left</answer>"}))
        self.assertTrue(ra[0].success and rb[0].success)

    async def test_unknown_tag(self):
        client = await self.client()
        with self.assertRaises(RollgymError) as caught:
            await client.open_envs("Nope")
        self.assertEqual(caught.exception.code, "unknown_tag")

    async def test_env_session_ends_with_the_connection(self):
        client = await self.client()
        env = await client.open_envs("Fake", groups=1, group_size=2)
        await asyncio.get_running_loop().run_in_executor(None, self.server.drop_all)
        await asyncio.sleep(0.2)
        with self.assertRaises(ConnectionLost):
            await env.step({0: "<answer>Up</answer>"})
        env2 = await client.open_envs("Fake", groups=1, group_size=1)  # the client itself resumed
        self.assertEqual(len(env2.episodes), 1)


class SyncClientTests(unittest.TestCase):
    def setUp(self) -> None:
        self.server = FakeServer()
        self.server.start()
        self.addCleanup(self.server.stop)

    def test_rollout_stream_and_envs(self):
        with Client(self.server.url, credit=2) as client:
            self.assertEqual(client.envs, TAGS)
            batch = client.rollout(tag="Fake", groups=5, group_size=2, seed=5)
            eps, kept, _ = expected_batch([("Fake", 5)], 2, "train", 5)
            self.assertEqual(batch.kept, kept)
            stream = client.stream(tag="Fake", groups=4, group_size=2, mode="val")
            groups = [g.group for g in stream]
            self.assertEqual(groups, [0, 1, 2, 3])
            self.assertEqual(stream.batch.kept, [0, 1, 2, 3])
            env = client.open_envs("Fake", groups=1, group_size=1, seed=3)
            result = env.step({0: f"<answer>{ACTIONS[3]}</answer>"})[0]
            self.assertTrue(result.success)
            episodes, metrics = env.close()
            self.assertEqual(len(episodes), 1)

    def test_groups_queued_behind_a_slow_consumer_are_taken_together(self):
        # The sync stream takes every queued group in one crossing to the client's loop, and
        # acknowledges them as one ack frame and one credit frame: each group once, in order.
        with Client(self.server.url, credit=8) as client:
            stream = client.stream(tag="Fake", groups=8, group_size=1, mode="val")
            groups = []
            for g in stream:
                if not groups:
                    # The other seven are sent meanwhile, and reach the client's queue.
                    deadline = time.monotonic() + TIMEOUT
                    # Waits until they are in the client's queue (qsize only reads a length),
                    # not for a fixed time: a loaded machine may take longer to receive them.
                    queued = stream._stream._r.queue
                    while queued.qsize() < 7 and time.monotonic() < deadline:
                        time.sleep(0.01)
                groups.append(g.group)
            self.assertEqual(groups, list(range(8)))
            deadline = time.monotonic() + TIMEOUT
            while len(self.server.acks) < 8 and time.monotonic() < deadline:
                time.sleep(0.01)
            self.assertEqual(sorted(g for rid, g in self.server.acks if rid == stream.rollout_id), list(range(8)))
            credits = [f["groups"] for f in self.server.client_frames if f["type"] == "credit"]
            acks = [f for f in self.server.client_frames if f["type"] == "ack" and not f.get("batch")]
            self.assertEqual(sum(credits), 8 + 8)  # the initial grant, then one per group
            # group 0 (and any that came with it), then the ones queued during the sleep
            self.assertLessEqual(len(acks), 2)
            self.assertEqual(len(credits), 1 + len(acks))

    def test_resume_through_the_sync_api(self):
        with Client(self.server.url, credit=3, reconnect_backoff=0.02) as client:
            self.server.drop_after_groups = 2
            ids = [g.group for g in client.stream(tag="Fake", groups=9, group_size=1)]
            self.assertEqual(sorted(ids), list(range(9)))
            self.assertEqual(len(ids), 9)
            self.assertEqual(client.resumes, 1)

    def test_errors_propagate_with_their_type(self):
        with Client(self.server.url) as client:
            with self.assertRaises(RollgymError) as caught:
                client.rollout(tag="Nope", groups=1, group_size=1)
            self.assertEqual(caught.exception.code, "unknown_tag")
        with self.assertRaises(ProtocolError):
            Client(self.server.url, protocol_version=9)

    def test_works_inside_a_running_event_loop(self):
        # Jupyter runs cells inside an event loop; the sync client must still work there.
        async def cell():
            with Client(self.server.url) as client:
                return client.rollout(tag="Fake", groups=2, group_size=1, mode="val")

        batch = asyncio.run(cell())
        self.assertEqual(batch.kept, [0, 1])

    def test_early_close_of_a_sync_stream(self):
        self.server.group_delay = 0.02
        with Client(self.server.url, credit=1) as client:
            with client.stream(tag="Fake", groups=20, group_size=1, rollout_id="s") as stream:
                first = next(iter(stream))
                self.assertEqual(first.group, 0)
            deadline = time.monotonic() + TIMEOUT
            while {"type": "cancel", "rollout": "s"} not in self.server.client_frames and time.monotonic() < deadline:
                time.sleep(0.01)
            self.assertIn({"type": "cancel", "rollout": "s"}, self.server.client_frames)
            self.assertEqual(client.rollout(tag="Fake", groups=1, group_size=1, mode="val").kept, [0])


class ExampleTests(FakeServerCase):
    def setUp(self) -> None:
        super().setUp()
        import openrlhf_agent

        openrlhf_agent.ROLLGYM_URL = self.server.url
        self.addAsyncCleanup(self.close_shared_clients)

    async def close_shared_clients(self) -> None:
        import openrlhf_agent

        for client in openrlhf_agent._clients.values():
            await client.close()
        openrlhf_agent._clients.clear()

    async def test_openrlhf_agent_plays_hosted_episodes(self):
        import openrlhf_agent

        agent = openrlhf_agent.AgentInstance()
        state = await agent.reset({"label": '{"tag": "Fake", "seed": 6, "max_turn": 3}'})
        self.assertTrue(state["observation"].startswith("<|im_start|>system\nGuess the direction."))
        self.assertTrue(state["observation"].endswith("<|im_start|>assistant\n<think>"))
        out = await agent.step({"action_text": "no idea</think><answer>Up</answer><|im_end|>"})
        self.assertFalse(out["done"])
        self.assertEqual(float(out["rewards"]), 0.0)
        self.assertTrue(out["environment_feedback"].startswith("\n<|im_start|>user\nReward:"))
        self.assertTrue(out["environment_feedback"].endswith("<|im_start|>assistant\n<think>"))
        out = await agent.step({"action_text": f"<answer>{ACTIONS[6 % 4]}</answer>"})
        self.assertTrue(out["done"])
        self.assertEqual(out["environment_feedback"], "")
        self.assertEqual(float(out["extra_logs"]["success"]), 1.0)
        frames = [f["type"] for f in self.server.client_frames]
        self.assertEqual(frames.count("env_open"), 1)
        self.assertEqual(frames.count("env_close"), 1)

    async def test_openrlhf_demo(self):
        import openrlhf_agent

        with contextlib.redirect_stdout(io.StringIO()) as printed:
            rewards = await openrlhf_agent.demo(episodes=2, tag="Fake")
        self.assertIn("seed 1:", printed.getvalue())
        self.assertEqual(len(rewards), 2)

    def test_grpo_advantages(self):
        from rollout_batch import grpo_advantages

        scores = np.array([1, 3, 5, 5, 0, 2], dtype=np.float32)
        adv = grpo_advantages(scores, np.array([0, 0, 1, 1, 2, 2], dtype=np.int32))
        # unbiased group std (verl's torch.std): [1, 3] → mean 2, std √2
        h = 1 / np.sqrt(2)
        np.testing.assert_allclose(adv, [-h, h, 0, 0, -h, h], atol=1e-5)


class AbandonedStreamTests(unittest.TestCase):
    def test_a_dropped_stream_releases_the_credit(self):
        with FakeServer(group_delay=0.01) as server, Client(server.url, credit=1) as client:
            stream = client.stream(tag="Fake", groups=30, group_size=1, rollout_id="left")
            for _ in stream:
                break  # no close(): the stream is just dropped
            del stream
            gc.collect()
            # with credit 1, the abandoned stream would block this one forever
            batch = client.rollout(tag="Fake", groups=3, group_size=1, mode="val", timeout=TIMEOUT)
            self.assertEqual(batch.kept, [0, 1, 2])
            self.assertIn({"type": "cancel", "rollout": "left"}, server.client_frames)


class PureTests(unittest.TestCase):
    def test_ws_url(self):
        self.assertEqual(ws_url("http://h:1"), "ws://h:1/v1/rollouts")
        self.assertEqual(ws_url("https://h"), "wss://h/v1/rollouts")
        self.assertEqual(ws_url("ws://h:1/"), "ws://h:1/v1/rollouts")
        self.assertEqual(ws_url("ws://h:1/v1/rollouts"), "ws://h:1/v1/rollouts")
        self.assertEqual(ws_url("h:1"), "ws://h:1/v1/rollouts")
        with self.assertRaises(ValueError):
            ws_url("ftp://h")

    def test_normalize_tags(self):
        want = [{"tag": "A", "groups": 3}, {"tag": "B", "groups": 2}]
        self.assertEqual(normalize_tags(None, "A", 3), want[:1])
        self.assertEqual(normalize_tags(["A", "B"], None, [3, 2]), want)
        self.assertEqual(normalize_tags({"A": 3, "B": 2}, None, None), want)
        self.assertEqual(normalize_tags([("A", 3), ("B", 2)], None, None), want)
        self.assertEqual(normalize_tags(want, None, None), want)
        self.assertEqual(normalize_tags(["A", "B"], None, 4), [{"tag": "A", "groups": 4}, {"tag": "B", "groups": 4}])
        for bad in [(None, None, 1), (["A"], "A", 1), (["A", "B"], None, [1]), ([("A", 1), "B"], None, None), ({"A": 1}, None, 2)]:
            with self.assertRaises((TypeError, ValueError)):
                normalize_tags(*bad)

    def test_array_decoding(self):
        data = np.array([1, -2, 3], dtype="<i4").tobytes()
        array = decode_array("env_ids_i32", data, 3)
        self.assertEqual(array.dtype, np.int32)
        np.testing.assert_array_equal(array, [1, -2, 3])
        self.assertFalse(array.flags.writeable)  # a view of the frame's bytes, not a copy
        f = decode_array("scores_f32", np.array([0.5, -0.1], dtype="<f4").tobytes())
        self.assertEqual(f.dtype, np.float32)
        with self.assertRaises(ProtocolError):
            decode_array("env_ids_i32", data, 4)
        with self.assertRaises(ProtocolError):
            decode_array("env_ids_i32", data[:5])
        with self.assertRaises(ProtocolError):
            decode_array("env_ids_i32", [1, 2])

    def test_group_from_frame(self):
        eps = [fake_server.episode(i, 0, "Fake", 1) for i in range(3)]
        frame = fake_server.group_frame("r", 0, eps, None, None)
        frame["seq"] = 4
        frame["values_f32"] = np.zeros(7, dtype="<f4").tobytes()  # an array a newer server adds
        group = Group.from_frame(frame)
        self.assertEqual((group.rollout, group.group, group.seq, group.tag, group.seed), ("r", 0, 4, "Fake", 1))
        self.assertEqual(group.success.dtype, np.bool_)
        self.assertEqual(group.arrays["values"].shape, (7,))
        self.assertIsNone(group.tokens)  # no token log without tokens: true
        bad = dict(frame, scores_f32=b"\0" * 8)
        with self.assertRaises(ProtocolError):
            Group.from_frame(bad)
        with self.assertRaises(ProtocolError):
            Group.from_frame({k: v for k, v in frame.items() if k != "rewards_f32"})

    def test_empty_batch_arrays(self):
        batch = Batch("r", "batch", [], {"kept": [], "dropped": [0], "failed_groups": [], "metrics": {}, "episodes": 2, "failed": 0})
        self.assertEqual(batch.scores.shape, (0,))
        self.assertEqual(batch.scores.dtype, np.float32)
        self.assertEqual(batch.success.dtype, np.bool_)

    def test_errors_pickle_and_print(self):
        for error in [RollgymError("limit", "too many", "r1", "tags"), AuthError("no"), ProtocolError("v"), ConnectionLost("gone", rollout="r")]:
            again = pickle.loads(pickle.dumps(error))
            self.assertEqual(type(again), type(error))
            self.assertEqual(str(again), str(error))
        self.assertEqual(str(RollgymError("limit", "too many", "r1", "tags")), "[limit] too many (rollout 'r1', field 'tags')")

    def test_encode_is_msgpack_with_bin(self):
        import msgpack

        self.assertEqual(msgpack.unpackb(encode({"type": "x", "b": b"\x01"}), raw=False), {"type": "x", "b": b"\x01"})


if __name__ == "__main__":
    unittest.main()
