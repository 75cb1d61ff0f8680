"""rollgym_envs: Python envs (TextEnv) served as OpenEnv environments by a pool of worker
processes, played by the OpenEnv-style client (openenv_client.py). Run with Debian's python3:

    PYTHONPATH=protocol/python:protocol/python/examples:test/openenv python3 -m unittest test_provider
"""

import asyncio
import json
import os
import time
import unittest
import urllib.request

from guess_number_env import GuessNumber
from openenv_client import OpenEnvClient, ServerError
from rollgym_envs import OpenEnvProvider, StepOutcome, TextEnv


class Slow(TextEnv):
    """Waits `action` seconds per step ("crash" ends its worker process)."""

    def reset(self, seed: int) -> str:
        return f"slow {seed}"

    def step(self, action: str) -> StepOutcome:
        if action == "crash":
            os._exit(3)
        if action == "raise":
            raise RuntimeError("the env failed on purpose")
        time.sleep(float(action))
        return StepOutcome(f"slept {action}", 0.0, False, {})


class Broken(TextEnv):
    def reset(self, seed: int):
        return 42  # not text


def play_in_process(seed: int):
    """Binary search, in process: every (observation, reward, done, info) on the way."""
    env = GuessNumber()
    first = env.reset(seed)
    low, high, steps = 1, 100, []
    while True:
        guess = (low + high) // 2
        outcome = env.step(str(guess))
        steps.append([outcome.observation, outcome.reward, outcome.done, outcome.info])
        if outcome.done:
            return first, steps
        low, high = (guess + 1, high) if "higher" in outcome.observation else (low, guess - 1)


async def play_remote(base_url: str, seed: int):
    async with OpenEnvClient(base_url) as env:
        first = await env.reset(seed=seed)
        low, high, steps = 1, 100, []
        while True:
            guess = (low + high) // 2
            result = await env.step({"action": str(guess)})
            steps.append([result.observation["text"], result.reward, result.done, result.observation["info"]])
            if result.done:
                state = await env.state()
                return first.observation["text"], steps, state
            low, high = (guess + 1, high) if "higher" in result.observation["text"] else (low, guess - 1)


class ProviderTest(unittest.TestCase):
    def serve(self, envs, coroutine, **options):
        """Starts a provider (workers fork here, before the loop), runs `coroutine(url)`, stops it."""
        provider = OpenEnvProvider(envs, **options)

        async def go():
            await provider.start("127.0.0.1", 0)
            try:
                return await coroutine(f"http://127.0.0.1:{provider.port}")
            finally:
                await provider.stop()

        return asyncio.run(go())

    def test_remote_episodes_equal_the_env_in_process_seed_for_seed(self):
        seeds = list(range(20, 36))

        async def run(url):
            return await asyncio.gather(*(play_remote(f"{url}/GuessNumber", s) for s in seeds))

        played = self.serve({"GuessNumber": GuessNumber, "Slow": Slow}, run, workers=3)
        for seed, (first, steps, state) in zip(seeds, played):
            want_first, want_steps = play_in_process(seed)
            self.assertEqual(first, want_first)
            self.assertEqual(steps, want_steps)
            self.assertEqual(state["step_count"], len(want_steps))
            self.assertEqual(state["seed"], seed)
            self.assertTrue(state["done"])

    def test_bad_input_gets_openenv_codes_naming_the_field_and_the_session_goes_on(self):
        async def run(url):
            async with OpenEnvClient(f"{url}/Slow") as env:
                codes = []
                for message in [
                    "not json",
                    {"type": "jump"},
                    {"type": "step", "data": {"action": "0"}},
                    {"type": "reset", "data": {"seed": -1}},
                    {"type": "reset", "data": {"level": 2}},
                ]:
                    await env.ws.send(message if isinstance(message, str) else json.dumps(message))
                    answer = json.loads(await env.ws.recv())
                    codes.append((answer["data"]["code"], answer["data"]["message"]))
                await env.reset(seed=1)
                try:
                    await env.step({"action": "raise"})
                except ServerError as error:
                    codes.append((error.code, str(error)))
                result = await env.step({"action": "0"})
                return codes, result.observation["text"]

        codes, text = self.serve({"Slow": Slow}, run)
        self.assertEqual([c for c, _ in codes], ["INVALID_JSON", "UNKNOWN_TYPE", "EXECUTION_ERROR", "VALIDATION_ERROR", "VALIDATION_ERROR", "EXECUTION_ERROR"])
        self.assertIn("reset, step, state, close", codes[1][1])
        self.assertIn("reset first", codes[2][1])
        self.assertIn("data.seed", codes[3][1])
        self.assertIn("allowed: seed, episode_id", codes[4][1])
        self.assertIn("the env failed on purpose", codes[5][1])
        self.assertEqual(text, "slept 0")

    def test_an_env_that_breaks_the_contract_is_named(self):
        async def run(url):
            async with OpenEnvClient(f"{url}/Broken") as env:
                with self.assertRaises(ServerError) as caught:
                    await env.reset(seed=1)
                return caught.exception

        error = self.serve({"Broken": Broken, "Slow": Slow}, run)
        self.assertEqual(error.code, "EXECUTION_ERROR")
        self.assertIn("reset() returned int", str(error))

    def test_a_slow_env_delays_only_its_own_worker(self):
        async def run(url):
            slow = await OpenEnvClient(f"{url}/Slow").connect()
            quick = await OpenEnvClient(f"{url}/Slow").connect()
            await slow.reset(seed=1)
            await quick.reset(seed=2)  # the other worker: sessions go to the least busy one
            waiting = asyncio.ensure_future(slow.step({"action": "5"}))
            for _ in range(20):
                await quick.step({"action": "0"})
            finished_first = not waiting.done()
            await waiting
            await slow.close()
            await quick.close()
            return finished_first

        self.assertTrue(self.serve({"Slow": Slow}, run, workers=2))

    def test_a_dead_worker_ends_its_sessions_with_a_reason_and_others_go_on(self):
        async def run(url):
            doomed = await OpenEnvClient(f"{url}/Slow").connect()
            other = await OpenEnvClient(f"{url}/GuessNumber").connect()
            await doomed.reset(seed=1)
            await other.reset(seed=5)
            with self.assertRaises(ServerError) as caught:
                await doomed.step({"action": "crash"})
            result = await other.step({"action": "50"})
            await other.close()
            return caught.exception, result

        error, result = self.serve({"Slow": Slow, "GuessNumber": GuessNumber}, run, workers=2)
        self.assertEqual(error.code, "SESSION_ERROR")
        self.assertIn("died", str(error))
        self.assertIn("50", result.observation["text"])

    def test_past_max_sessions_a_new_session_gets_capacity_reached(self):
        async def run(url):
            first = await OpenEnvClient(url).connect()  # the only env also answers at /ws
            await first.reset(seed=1)
            second = await OpenEnvClient(f"{url}/Slow").connect()
            # The server says so unasked, then closes (as OpenEnv's does).
            answer = json.loads(await second.ws.recv())
            await second.ws.wait_closed()
            await first.close()
            return answer

        answer = self.serve({"Slow": Slow}, run, max_sessions=1)
        self.assertEqual(answer["type"], "error")
        self.assertEqual(answer["data"]["code"], "CAPACITY_REACHED")
        self.assertEqual((answer["data"]["active_sessions"], answer["data"]["max_sessions"]), (1, 1))

    def test_get_routes(self):
        async def run(url):
            def get(path):
                try:
                    with urllib.request.urlopen(url + path) as response:
                        return response.status, json.loads(response.read())
                except urllib.error.HTTPError as error:
                    return error.code, json.loads(error.read())

            return await asyncio.get_running_loop().run_in_executor(
                None, lambda: [get(p) for p in ["/health", "/GuessNumber/schema", "/GuessNumber/metadata", "/GuessNumber/state", "/Nope/ws"]]
            )

        health, schema, metadata, state, unknown = self.serve({"GuessNumber": GuessNumber, "Slow": Slow}, run)
        self.assertEqual(health, (200, {"status": "healthy"}))
        self.assertEqual(schema[1]["action"]["required"], ["action"])
        self.assertEqual(metadata[1]["name"], "GuessNumber")
        self.assertIn("higher, lower or correct", metadata[1]["description"])
        self.assertEqual(state[1]["step_count"], 0)
        self.assertEqual(unknown[0], 404)
        self.assertIn("GuessNumber, Slow", unknown[1]["detail"])

    def test_snapshot_is_optional(self):
        self.assertTrue(GuessNumber.supports_snapshot())
        self.assertFalse(Slow.supports_snapshot())
        env = GuessNumber()
        env.reset(9)
        env.step("50")
        copy = GuessNumber()
        copy.restore(env.snapshot())
        self.assertEqual(copy.step("25"), env.step("25"))


if __name__ == "__main__":
    unittest.main()
