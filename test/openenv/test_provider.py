"""rollgym_envs: Python envs (TextEnv) served as OpenEnv environments by a pool of worker
processes, played by the OpenEnv-style client (openenv_client.py). Run with Debian's python3:

    PYTHONPATH=python:python/examples:test/openenv python3 -m unittest test_provider
"""

import asyncio
import http.client
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request
import warnings

from guess_number_env import GuessNumber
from openenv_client import OpenEnvClient, ServerError
from rollgym_envs import OpenEnvProvider, StepOutcome, TextEnv

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from websockets.exceptions import ConnectionClosed
    from websockets.legacy.client import connect as ws_connect


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


class NanReward(TextEnv):
    def reset(self, seed: int) -> str:
        return "nan"

    def step(self, action: str) -> StepOutcome:
        return StepOutcome("nan", math.nan, False, {})


class NoFork(OpenEnvProvider):
    """A provider that cannot start a worker once serving (as when fork fails)."""

    def _spawn_worker(self):
        if self.server is not None:
            raise OSError("fork refused in this test")
        return super()._spawn_worker()


class Failing(OpenEnvProvider):
    """A provider with a bug: the action "bug" breaks its own handling (not the env's)."""

    async def _answer(self, message, session):
        if message.get("action") == "bug":
            raise KeyError("a bug of the provider")
        return await super()._answer(message, session)


UPGRADE = {"Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==", "Sec-WebSocket-Version": "13"}


def get_status(port: int, path: str, headers):
    """(status, detail) of a GET (a WebSocket upgrade with UPGRADE's headers), Host as given."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request("GET", path, headers=headers)
        response = connection.getresponse()
        if response.status == 101:
            return 101, None
        body = response.read()
        return response.status, json.loads(body).get("detail") if body.startswith(b"{") else body.decode()
    finally:
        connection.close()


async def error_then_close(ws):
    """The error frame a socket gets unasked, and the code it is then closed with."""
    answer = json.loads(await ws.recv())
    await ws.wait_closed()
    return answer["data"], ws.close_code


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


def get_json(url: str):
    """(status, body) of a GET."""
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def health_once_dead(url: str, died: int):
    """/health once it counts `died` dead workers (a SIGKILL lands soon, not at once)."""
    for _ in range(300):
        status, body = get_json(f"{url}/health")
        if body["workers"]["died"] >= died:
            return status, body
        time.sleep(0.1)
    raise AssertionError(f"/health never counted {died} dead workers: {body}")


def alive(pid: int) -> bool:
    """Whether any thread of process `pid` still runs (a zombie has ended)."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return False
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/stat") as file:
                if file.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X"):
                    return True
        except (FileNotFoundError, ProcessLookupError):
            pass
    return False


def children(pid: int):
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as file:
                    if int(file.read().rsplit(")", 1)[1].split()[1]) == pid:
                        found.append(int(entry))
            except (FileNotFoundError, ProcessLookupError):
                pass
    return found


def run_and_signal(command, sig):
    """Starts a provider, holds a session mid-step in a worker, sends `sig` to the provider; the
    worker pids still running once it has exited (after a grace the workers' own poll fits in)."""
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    # stderr to a file: a worker left behind would hold a pipe open, and reading it would hang.
    log = tempfile.TemporaryFile("w+")
    provider = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log, env=env, text=True)
    try:
        url = provider.stdout.readline().split(" at ")[-1].strip()  # http://127.0.0.1:PORT/Slow
        workers = children(provider.pid)

        async def hold_a_step():
            client = await OpenEnvClient(url).connect()
            await client.reset(seed=1)
            await client.ws.send(json.dumps({"type": "step", "data": {"action": "60"}}))
            return client

        async def signal_then_wait():
            client = await hold_a_step()
            await asyncio.sleep(0.3)  # the step reaches its worker
            provider.send_signal(sig)
            await asyncio.get_running_loop().run_in_executor(None, provider.wait, 30)
            await client.ws.close()

        asyncio.run(signal_then_wait())
        for _ in range(100):
            left = [pid for pid in workers if alive(pid)]
            if not left:
                break
            time.sleep(0.1)
        log.seek(0)
        return left, f"workers {workers}; provider stderr: {log.read()[-2000:]}"
    finally:
        if provider.poll() is None:
            provider.kill()
        provider.wait()
        provider.stdout.close()
        log.close()


class ProviderTest(unittest.TestCase):
    def serve(self, envs, coroutine, provider_class=OpenEnvProvider, **options):
        """Starts a provider (workers fork here, before the loop), runs `coroutine(url)`, stops it."""
        provider = self.provider = provider_class(envs, **options)

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

        with self.assertLogs("rollgym_envs", "WARNING"):
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

        with self.assertLogs("rollgym_envs", "WARNING"):
            error = self.serve({"Broken": Broken, "Slow": Slow}, run)
        self.assertEqual(error.code, "EXECUTION_ERROR")
        self.assertIn("reset() returned int", str(error))

        async def nan(url):
            async with OpenEnvClient(f"{url}/NanReward") as env:
                await env.reset(seed=1)
                with self.assertRaises(ServerError) as caught:
                    await env.step({"action": "x"})  # NaN is not JSON: the client could not read it
                return caught.exception

        with self.assertLogs("rollgym_envs", "WARNING"):
            error = self.serve({"NanReward": NanReward, "Slow": Slow}, nan)
        self.assertIn("not a finite number", str(error))

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

        with self.assertLogs("rollgym_envs", "ERROR") as logged:
            error, result = self.serve({"Slow": Slow, "GuessNumber": GuessNumber}, run, workers=2)
        self.assertEqual(error.code, "SESSION_ERROR")
        self.assertRegex(str(error), r"worker process \d+ died \(exit code 3\)")
        self.assertRegex(logged.output[0], r"died \(exit code 3\); 1 session\(s\) lost their env; worker process \d+ started in its place")
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
        self.assertEqual(health[0], 200)
        self.assertEqual(health[1]["status"], "healthy")
        self.assertEqual(health[1]["workers"], {"alive": 2, "configured": 2, "died": 0, "restarted": 0})
        self.assertEqual(schema[1]["action"]["required"], ["action"])
        self.assertEqual(metadata[1]["name"], "GuessNumber")
        self.assertIn("higher, lower or correct", metadata[1]["description"])
        self.assertEqual(state[1]["step_count"], 0)
        self.assertEqual(unknown[0], 404)
        self.assertIn("GuessNumber, Slow", unknown[1]["detail"])

    # -------------------------------------------------------------------- limits (issue 28.5)

    def test_silent_sockets_hold_no_place_and_are_closed_after_hello_timeout(self):
        async def run(url):
            port = int(url.rsplit(":", 1)[1])
            silent = [await ws_connect(f"ws://127.0.0.1:{port}/ws") for _ in range(3)]
            asks_state = await ws_connect(f"ws://127.0.0.1:{port}/ws")
            await asks_state.send(json.dumps({"type": "state"}))
            state = json.loads(await asks_state.recv())
            no_upgrade = await asyncio.open_connection("127.0.0.1", port)  # TCP, never a request
            # max_sessions is 1 and four sockets are open: the one that plays gets the place.
            async with OpenEnvClient(url) as env:
                await env.reset(seed=1)
                played = (await env.step({"action": "0"})).observation["text"]
            closed = [await error_then_close(ws) for ws in [*silent, asks_state]]
            eof = await no_upgrade[0].read()
            no_upgrade[1].close()
            return state, played, closed, eof

        state, played, closed, eof = self.serve({"Slow": Slow}, run, max_sessions=1, hello_timeout_s=1.5)
        self.assertEqual(state["type"], "state")
        self.assertEqual(played, "slept 0")
        for data, code in closed:
            self.assertEqual(data["code"], "SESSION_ERROR")
            self.assertIn("no reset within 1.5 s of connecting (hello_timeout_s)", data["message"])
            self.assertEqual(code, 1000)
        self.assertEqual(eof, b"")

    def test_past_max_pending_the_oldest_silent_socket_is_closed(self):
        async def run(url):
            first = await ws_connect(f"{url.replace('http', 'ws')}/ws")
            second = await ws_connect(f"{url.replace('http', 'ws')}/ws")
            async with OpenEnvClient(url) as env:  # the third pending socket
                dropped = await error_then_close(first)
                await env.reset(seed=3)
                played = (await env.step({"action": "0"})).observation["text"]
            still_open = second.open
            await second.close()
            return dropped, played, still_open

        (data, code), played, still_open = self.serve({"Slow": Slow}, run, max_pending=2)
        self.assertEqual((data["code"], code), ("SESSION_ERROR", 1000))
        self.assertIn("2 sockets (max_pending) were waiting for their first reset", data["message"])
        self.assertEqual(played, "slept 0")
        self.assertTrue(still_open)

    def test_a_session_without_reset_or_step_for_idle_s_is_closed(self):
        async def asks_state_only(url):
            env = await OpenEnvClient(url).connect()
            await env.reset(seed=1)
            for asked in range(1, 50):  # state does not keep a session: the close comes anyway
                try:
                    await env.ws.send(json.dumps({"type": "state"}))
                except ConnectionClosed:
                    pass  # closed since the last answer: the error frame waits to be read
                answer = json.loads(await env.ws.recv())
                if answer["type"] == "error":
                    await env.ws.wait_closed()
                    return answer["data"], env.ws.close_code, asked
                await asyncio.sleep(0.2)
            return None, None, asked

        async def steps_slowly(url):
            async with OpenEnvClient(url) as env:
                await env.reset(seed=2)
                return [(await env.step({"action": a})).observation["text"] for a in ("1.5", "0")]

        async def run(url):
            return await asyncio.gather(asks_state_only(url), steps_slowly(url))

        (data, code, asked), steps = self.serve({"Slow": Slow}, run, idle_s=1.0, workers=2)
        self.assertEqual((data["code"], code), ("SESSION_ERROR", 1000))
        self.assertIn("no reset or step for 1 s (idle_s)", data["message"])
        self.assertGreater(asked, 1)
        self.assertEqual(steps, ["slept 1.5", "slept 0"])  # time in the env is not idle time

    def test_deep_wide_huge_and_malformed_frames_get_short_openenv_errors(self):
        wide = {"type": "reset", "data": {f"key{i}": "x" * 100 for i in range(5000)}}
        frames = [
            "[" * 100_000,  # RecursionError in json.loads before
            '{"type": "step", "data": {"action": "0", "metadata": ' + "[" * 40 + "]" * 40 + "}}",
            "[" * 20 + "]" * 20,
            '{"type": "reset", "data": {"seed": ' + "9" * 5000 + "}}",
            json.dumps(wide),
            json.dumps({"type": "x" * 100_000}),
            json.dumps({"type": "step", "data": {"action": "0", "metadata": ["y" * 10_000]}}),
            "{",
        ]

        async def run(url):
            async with OpenEnvClient(url) as env:
                answers = []
                for frame in frames:
                    await env.ws.send(frame)
                    answers.append(await env.ws.recv())
                await env.reset(seed=4)
                played = (await env.step({"action": "0"})).observation["text"]
                await env.ws.send(json.dumps({"type": "step", "data": {"action": "a" * (2 << 20)}}))
                huge = await error_then_close(env.ws)
            async with OpenEnvClient(url) as env:
                await env.ws.write_frame(True, 0x1, b'{"type": "\xff"}')  # a text frame, not UTF-8
                not_utf8 = await error_then_close(env.ws)
            return answers, played, huge, not_utf8

        answers, played, (data, code), not_utf8 = self.serve({"Slow": Slow}, run)
        for i, answer in enumerate(answers):
            # The wide object's answer lists its first 5 unknown keys (as rollgym serve's does),
            # each echo clipped: a bound that holds whatever the frame's size (500 KB here).
            self.assertLess(len(answer), 1500 if frames[i] is frames[4] else 600, answer[:200])
        codes = [json.loads(a)["data"]["code"] for a in answers]
        self.assertEqual(codes, ["INVALID_JSON", "INVALID_JSON", "VALIDATION_ERROR", "INVALID_JSON", "VALIDATION_ERROR", "UNKNOWN_TYPE", "VALIDATION_ERROR", "INVALID_JSON"])
        messages = [json.loads(a)["data"]["message"] for a in answers]
        self.assertIn("nested deeper than 32 levels (max_depth)", messages[0])
        self.assertIn("nested deeper than 32 levels (max_depth)", messages[1])
        self.assertIn("data.key0: is not a field here", messages[4])
        self.assertEqual(len(json.loads(answers[4])["data"]["errors"]), 5)
        self.assertIn("data.metadata: must be an object", messages[6])
        self.assertEqual(played, "slept 0")  # the session went on
        self.assertEqual((data["code"], code), ("SESSION_ERROR", 1009))
        self.assertIn("frame over max_frame_bytes", data["message"])
        self.assertEqual((not_utf8[0]["code"], not_utf8[1]), ("SESSION_ERROR", 1007))

    def test_origin_and_host_checks_at_the_upgrade_and_the_routes(self):
        async def run(url):
            port = int(url.rsplit(":", 1)[1])
            own = f"127.0.0.1:{port}"
            cases = [
                ("/GuessNumber/ws", {**UPGRADE, "Host": "rebind.example"}),  # a trainer by any name
                ("/GuessNumber/ws", {**UPGRADE, "Host": own, "Origin": f"http://{own}"}),
                ("/GuessNumber/ws", {**UPGRADE, "Host": own, "Origin": "https://lab.example:8443"}),
                ("/GuessNumber/ws", {**UPGRADE, "Host": own, "Origin": "http://evil.example"}),
                ("/GuessNumber/ws", {**UPGRADE, "Host": own, "Origin": "null"}),
                ("/GuessNumber/ws", {**UPGRADE, "Host": f"rebind.example:{port}", "Origin": f"http://rebind.example:{port}"}),
                ("/GuessNumber/schema", {"Host": f"rebind.example:{port}"}),
                ("/GuessNumber/schema", {"Host": f"envs.internal:{port}"}),
                ("/GuessNumber/schema", {"Host": f"app.localhost:{port}"}),
                ("/GuessNumber/schema", {"Host": own, "Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "no-cors"}),
                ("/health", {"Host": "rebind.example"}),
            ]
            return await asyncio.get_running_loop().run_in_executor(None, lambda: [get_status(port, p, h) for p, h in cases])

        answers = self.serve({"GuessNumber": GuessNumber, "Slow": Slow}, run, allow_origins=["https://LAB.example:8443/"], allow_hosts=["envs.internal"])
        self.assertEqual([status for status, _ in answers], [101, 101, 101, 403, 403, 403, 403, 200, 200, 403, 200])
        self.assertIn("Origin 'http://evil.example' may not use this provider", answers[3][1])
        self.assertIn("Origin 'null'", answers[4][1])
        self.assertIn("Host 'rebind.example:", answers[5][1])
        self.assertIn("--allow-host", answers[6][1])
        self.assertIn("Sec-Fetch-Site: cross-site", answers[9][1])
        with self.assertRaisesRegex(ValueError, "allow_origins: 'lab.example' is not an origin"):
            OpenEnvProvider({"Slow": Slow}, workers=1, allow_origins=["lab.example"])

    def test_a_failure_of_the_provider_fails_only_its_session(self):
        async def run(url):
            other = await OpenEnvClient(url).connect()
            await other.reset(seed=1)
            async with OpenEnvClient(url) as env:
                await env.reset(seed=2)
                await env.ws.send(json.dumps({"type": "step", "data": {"action": "bug"}}))
                failed = await error_then_close(env.ws)
            played = (await other.step({"action": "0"})).observation["text"]
            await other.close()
            return failed, played

        with self.assertLogs("rollgym_envs", "ERROR") as logged:
            (data, code), played = self.serve({"Slow": Slow}, run, Failing, workers=1)
        self.assertEqual((data["code"], code), ("SESSION_ERROR", 1000))
        self.assertIn("KeyError", data["message"])
        self.assertEqual(played, "slept 0")
        self.assertIn("a bug of the provider", logged.output[0])

    # -------------------------------------------------------------------- worker deaths (issue 31.4)

    def test_an_env_exception_is_logged_with_its_traceback_and_named_in_the_reason(self):
        async def run(url):
            async with OpenEnvClient(f"{url}/Slow") as env:
                await env.reset(seed=1)
                with self.assertRaises(ServerError) as caught:
                    await env.step({"action": "raise"})
                return caught.exception

        with self.assertLogs("rollgym_envs", "WARNING") as logged:
            error = self.serve({"Slow": Slow}, run)
        self.assertEqual(error.code, "EXECUTION_ERROR")
        self.assertRegex(str(error), r"RuntimeError: the env failed on purpose \(raised in step, test_provider.py line \d+\)")
        line = next(out for out in logged.output if "the env failed on purpose" in out)
        self.assertIn("env Slow (session ", line)
        self.assertIn("failed in step", line)
        self.assertIn("Traceback (most recent call last)", line)
        self.assertIn('raise RuntimeError("the env failed on purpose")', line)

    def test_a_killed_worker_fails_each_of_its_sessions_by_name_and_no_later_session_goes_to_it(self):
        async def run(url):
            provider = self.provider
            clients = [await OpenEnvClient(f"{url}/Slow").connect() for _ in range(4)]
            for seed, client in enumerate(clients):
                await client.reset(seed=seed)
            victim = provider.workers[0]
            on_victim = {session.state["seed"] for session in victim.sessions}
            doomed = [c for seed, c in enumerate(clients) if seed in on_victim]
            spared = [c for seed, c in enumerate(clients) if seed not in on_victim]
            stepping = asyncio.ensure_future(doomed[0].step({"action": "60"}))  # in its worker when killed
            await asyncio.sleep(0.3)
            os.kill(victim.pid, signal.SIGKILL)
            with self.assertRaises(ServerError) as mid_step:
                await asyncio.wait_for(stepping, 30)
            idle = await asyncio.wait_for(error_then_close(doomed[1].ws), 30)  # told unasked
            spared_steps = [(await c.step({"action": "0"})).observation["text"] for c in spared]
            later = []
            for seed in range(10, 18):
                async with OpenEnvClient(f"{url}/Slow") as env:
                    await env.reset(seed=seed)
                    later.append((await env.step({"action": "0"})).observation["text"])
            health = await asyncio.get_running_loop().run_in_executor(None, get_json, f"{url}/health")
            for client in spared:
                await client.close()
            return victim.pid, len(on_victim), mid_step.exception, idle, spared_steps, later, health, [w.pid for w in provider.workers]

        with self.assertLogs("rollgym_envs", "ERROR"):
            pid, lost, mid_step, (idle, code), spared_steps, later, health, pids = self.serve({"Slow": Slow}, run, workers=2)
        self.assertEqual(lost, 2)
        death = f"worker process {pid} died (killed by SIGKILL), and this session's env with it"
        self.assertEqual(mid_step.code, "SESSION_ERROR")
        self.assertIn(death, str(mid_step))
        self.assertEqual((idle["code"], code), ("SESSION_ERROR", 1000))
        self.assertIn(death, idle["message"])
        self.assertEqual(spared_steps, ["slept 0", "slept 0"])
        self.assertEqual(later, ["slept 0"] * 8)
        self.assertEqual(health[1]["status"], "healthy")
        self.assertEqual(health[1]["workers"], {"alive": 2, "configured": 2, "died": 1, "restarted": 1})
        self.assertNotIn(pid, pids)

    def test_without_a_replacement_dead_workers_leave_the_pool_and_health_says_so(self):
        async def run(url):
            provider = self.provider
            loop = asyncio.get_running_loop()
            first, second = provider.workers
            os.kill(first.pid, signal.SIGKILL)
            degraded = await loop.run_in_executor(None, health_once_dead, url, 1)
            played = []
            for seed in range(4):
                async with OpenEnvClient(f"{url}/Slow") as env:
                    await env.reset(seed=seed)
                    played.append((await env.step({"action": "0"})).observation["text"])
            os.kill(second.pid, signal.SIGKILL)
            unhealthy = await loop.run_in_executor(None, health_once_dead, url, 2)
            env = await OpenEnvClient(f"{url}/Slow").connect()
            await env.ws.send(json.dumps({"type": "reset", "data": {"seed": 1}}))
            refused = await asyncio.wait_for(error_then_close(env.ws), 30)
            return degraded, played, unhealthy, refused

        with self.assertLogs("rollgym_envs", "ERROR") as logged:
            degraded, played, unhealthy, (refused, code) = self.serve({"Slow": Slow}, run, NoFork, workers=2)
        self.assertEqual(degraded[0], 200)
        self.assertEqual(degraded[1]["status"], "degraded")
        self.assertEqual(degraded[1]["workers"], {"alive": 1, "configured": 2, "died": 1, "restarted": 0})
        self.assertEqual(played, ["slept 0"] * 4)
        self.assertEqual(unhealthy[0], 503, unhealthy)
        self.assertEqual(unhealthy[1]["status"], "unhealthy")
        self.assertEqual((refused["code"], code), ("SESSION_ERROR", 1000))
        self.assertIn("no worker process is alive: 2 died", refused["message"])
        self.assertIn("no worker could take its place (OSError: fork refused in this test); 1 of 2 left", logged.output[0])

    def test_signals_and_the_providers_death_leave_no_worker_behind(self):
        serve = [sys.executable, "-m", "rollgym_envs", "Slow=test_provider:Slow", "--port", "0", "--workers", "3"]
        # The portable fallback alone: without prctl, workers notice their parent's pid change.
        no_prctl = "import runpy, sys, rollgym_envs.workers as w; w._set_parent_death_signal = lambda: False; sys.argv[0] = 'rollgym_envs'; runpy.run_module('rollgym_envs', run_name='__main__')"
        cases = [
            ("SIGTERM", serve, signal.SIGTERM),
            ("SIGINT", serve, signal.SIGINT),
            ("SIGHUP", serve, signal.SIGHUP),
            ("SIGKILL", serve, signal.SIGKILL),
            ("SIGKILL without prctl", [sys.executable, "-c", no_prctl, *serve[3:]], signal.SIGKILL),
        ]
        for name, command, sig in cases:
            with self.subTest(name):
                left, log_tail = run_and_signal(command, sig)
                self.assertEqual(left, [], log_tail)

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
