"""Throughput and CPU of 1 and 2 rollgym shards behind one ShardedClient (issue 34).

    /usr/bin/python3 bench/shards.py --shards 1,2 --duration 20 --json OUT.json

For each shard count N: starts `rollgym mock-engine` replicas (a fixed TTFT, no per-token time,
no slot limit, so a request waits on latency and never in a queue) and N `rollgym serve`
processes sharing them, then plays back-to-back batch rollouts through ShardedClient.rollout
(``--drive stream``: one endless ShardedClient.stream) for a warm-up and a measured window.
Reported over the window: aggregate episodes/s and groups/s, engine chat requests/s (the engines' own `vllm:request_success_total`), each serve's CPU (utime + stime from
/proc/PID/stat) per chat request it sent (its `rollgym_inference_request_seconds_count`), the
engines' CPU and queue (to show they are not the bottleneck), and this Python process's own CPU
(time.process_time) per group received.

Episodes in flight are held equal across shard counts: each serve plays `--in-flight /
group_size / N` groups at once. Prints one human line per case and, with --json, the figures.
Exits non-zero with a message when a process fails to start or a window sees no groups.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from typing import Dict, List, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))

from rollgym_client.sharded import ShardedClient  # noqa: E402

NODE = os.path.join(ROOT, "node_modules", ".bin", "node")
ROLLGYM = [NODE, os.path.join(ROOT, "bin", "rollgym.js")]
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
MODEL = "mock"


class Failure(Exception):
    """A benchmark that could not run: the message says what."""


class Child:
    """A rollgym process of ours, its URL read from the line it prints once listening."""

    def __init__(self, argv: List[str], pattern: str, timeout: float = 60.0):
        # node itself, not a wrapper: /proc/PID/stat must be the process that does the work.
        self.process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
        self.tail: List[str] = []
        found = threading.Event()
        self.url: Optional[str] = None

        def read() -> None:
            assert self.process.stdout is not None
            for line in self.process.stdout:
                self.tail = (self.tail + [line.rstrip()])[-20:]
                match = self.url is None and re.search(pattern, line)
                if match:
                    self.url = match.group(1).rstrip("/")
                    found.set()
            found.set()

        threading.Thread(target=read, daemon=True).start()
        if not found.wait(timeout) or self.url is None:
            self.stop()
            raise Failure(f"{' '.join(argv[1:3])} printed no URL within {timeout} s:\n" + "\n".join(self.tail))

    def cpu_seconds(self) -> float:
        """utime + stime so far, from /proc/PID/stat (fields 14 and 15, after the command name)."""
        with open(f"/proc/{self.process.pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(40)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(10)


def metrics(base: str) -> Dict[str, float]:
    """A /metrics answer as {name{labels}: value}."""
    try:
        with urllib.request.urlopen(base + "/metrics", timeout=60) as answer:
            text = answer.read().decode()
    except OSError as error:
        raise Failure(f"{base}/metrics did not answer: {error}") from error
    out: Dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            try:
                out[name] = float(value)
            except ValueError:
                pass
    return out


def total(sample: Dict[str, float], prefix: str, label: str = "") -> float:
    return sum(v for k, v in sample.items() if k.startswith(prefix) and label in k)


def engine_requests(sample: Dict[str, float]) -> float:
    return total(sample, "vllm:request_success_total")


def served_requests(sample: Dict[str, float]) -> float:
    return total(sample, "rollgym_inference_request_seconds_count", 'outcome="ok"')


def served_seconds(sample: Dict[str, float]) -> float:
    return total(sample, "rollgym_inference_request_seconds_sum", 'outcome="ok"')


def finished_episodes(sample: Dict[str, float]) -> float:
    return total(sample, "rollgym_episodes_total")


def loadavg() -> float:
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def run_case(shards: int, args: argparse.Namespace) -> Dict[str, object]:
    per_shard_groups = args.in_flight // args.group_size // shards
    if per_shard_groups < 1:
        raise Failure(f"--in-flight {args.in_flight} is less than one group of {args.group_size} per shard")
    children: List[Child] = []
    try:
        engines = []
        for _ in range(args.replicas):
            engines.append(Child(ROLLGYM + ["mock-engine", "--port", "0", "--model", MODEL, "--ttft-ms", str(args.ttft_ms), "--tpot-ms", "0"], r"listening on (http://\S+)"))
        children += engines
        llm = ",".join(e.url for e in engines if e.url)
        servers = []
        for _ in range(shards):
            argv = ROLLGYM + ["serve", "--port", "0", "--llm", llm, "--model", MODEL, "--group-concurrency", str(per_shard_groups), f"rollgym.llm.concurrency={max(256, args.in_flight)}"]
            servers.append(Child(argv, r"serving on (http://\S+)"))
        children += servers
        engine_bases = [e.url[: -len("/v1")] if e.url.endswith("/v1") else e.url for e in engines if e.url]
        # One window = the groups every serve plays at once, so each window is spread over all shards.
        window_groups = per_shard_groups * shards
        with ShardedClient([s.url for s in servers if s.url]) as client:
            before, after, groups, episodes, queue = drive(client, servers, engines, engine_bases, window_groups, args)
        if before is None or groups == 0:
            raise Failure(f"{shards} shard(s): no group arrived in the measured window")
        return figures(shards, per_shard_groups, args, before, after, groups, episodes, queue)
    finally:
        for child in reversed(children):
            child.stop()


class QueueSampler:
    """The engines' queue once a second in a thread of its own (the consumer must not wait on it):
    requests waiting for a slot, requests running, and how long /metrics took to answer."""

    def __init__(self, bases: List[str]):
        self.bases = bases
        self.waiting: List[float] = []
        self.running: List[float] = []
        self.answer_s: List[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _sample(self) -> None:
        while not self._stop.wait(1.0):
            for base in self.bases:
                asked = time.monotonic()
                try:
                    sample = metrics(base)
                except Failure:
                    sample = {}
                self.answer_s.append(time.monotonic() - asked)
                self.waiting.append(total(sample, "vllm:num_requests_waiting"))
                self.running.append(total(sample, "vllm:num_requests_running"))


def drive(client: ShardedClient, servers: List[Child], engines: List[Child], engine_bases: List[str], window_groups: int, args: argparse.Namespace):
    """Plays until the window ends; returns the snapshots at its ends, the groups and episodes
    received in it, and the engines' queue samples."""
    queue = QueueSampler(engine_bases)
    groups = episodes = 0
    before = None
    start_at = time.monotonic() + args.warmup
    end_at = start_at + args.duration
    if args.drive == "batch":
        # Whole rollouts (every group at once on its shard), so the window ends with no group half
        # played: each rollout's groups are all received before the next starts.
        k = 0
        while True:
            batch = client.rollout(tag=args.tag, groups=window_groups, group_size=args.group_size, seed=args.seed + k * window_groups, max_turn=args.max_turn, delivery="stream")
            k += 1
            now = time.monotonic()
            if before is None:
                if now >= start_at:
                    before = snapshot(servers, engines, engine_bases)
                    queue.start()
                continue
            groups += len(batch.groups)
            episodes += sum(len(g.episodes) for g in batch.groups)
            if now >= end_at:
                break
    else:
        stream = client.stream(tag=args.tag, groups=window_groups, group_size=args.group_size, seed=args.seed, max_turn=args.max_turn)
        for group in stream:
            now = time.monotonic()
            if before is None and now >= start_at:
                before = snapshot(servers, engines, engine_bases)
                queue.start()
            elif before is not None:
                groups += 1
                episodes += len(group.episodes)
                if now >= end_at:
                    break
        stream.close()
    after = snapshot(servers, engines, engine_bases)
    queue.stop()
    return before, after, groups, episodes, queue


def snapshot(servers: List[Child], engines: List[Child], engine_bases: List[str]) -> Dict[str, object]:
    return {
        "t": time.monotonic(),
        "client_cpu": time.process_time(),
        "server_cpu": [s.cpu_seconds() for s in servers],
        "server_metrics": [metrics(s.url) for s in servers if s.url],
        "engine_cpu": [e.cpu_seconds() for e in engines],
        "engine_metrics": [metrics(b) for b in engine_bases],
    }


def figures(shards: int, per_shard_groups: int, args: argparse.Namespace, before: Dict, after: Dict, groups: int, episodes: int, queue: "QueueSampler") -> Dict[str, object]:
    seconds = after["t"] - before["t"]
    server_cpu = [a - b for a, b in zip(after["server_cpu"], before["server_cpu"])]
    server_requests = [served_requests(a) - served_requests(b) for a, b in zip(after["server_metrics"], before["server_metrics"])]
    latency_sum = sum(served_seconds(a) - served_seconds(b) for a, b in zip(after["server_metrics"], before["server_metrics"]))
    engine_cpu = [a - b for a, b in zip(after["engine_cpu"], before["engine_cpu"])]
    requests = sum(engine_requests(a) - engine_requests(b) for a, b in zip(after["engine_metrics"], before["engine_metrics"]))
    served = sum(server_requests)
    finished = sum(finished_episodes(a) - finished_episodes(b) for a, b in zip(after["server_metrics"], before["server_metrics"]))
    client_cpu = after["client_cpu"] - before["client_cpu"]
    return {
        "shards": shards,
        "drive": args.drive,
        "replicas": args.replicas,
        "episodes_in_flight": per_shard_groups * shards * args.group_size,
        "window_s": round(seconds, 2),
        "groups": groups,
        "episodes": episodes,
        "episodes_per_s": round(episodes / seconds, 1),
        "groups_per_s": round(groups / seconds, 2),
        # Episodes the servers finished in the window (their counters): free of the delivery's bursts.
        "finished_episodes_per_s": round(finished / seconds, 1),
        "engine_requests_per_episode": round(requests / finished, 2) if finished else None,
        "engine_requests_per_s": round(requests / seconds, 1),
        "server_cpu_ms_per_request": round(1000 * sum(server_cpu) / served, 3) if served else None,
        "server_cpu_ms_per_request_each": [round(1000 * c / r, 3) if r else None for c, r in zip(server_cpu, server_requests)],
        "server_cores_each": [round(c / seconds, 2) for c in server_cpu],
        "client_cpu_ms_per_group": round(1000 * client_cpu / groups, 3),
        "client_cores": round(client_cpu / seconds, 2),
        "engine_cores_each": [round(c / seconds, 2) for c in engine_cpu],
        "engine_cpu_ms_per_request": round(1000 * sum(engine_cpu) / requests, 3) if requests else None,
        "mean_request_latency_ms": round(1000 * latency_sum / served, 1) if served else None,
        "ttft_ms": args.ttft_ms,
        "engine_waiting_max": max(queue.waiting) if queue.waiting else None,
        "engine_running_mean": round(statistics.mean(queue.running), 1) if queue.running else None,
        # How long an engine took to answer /metrics: a starved engine answers late.
        "engine_metrics_answer_ms_max": round(1000 * max(queue.answer_s), 1) if queue.answer_s else None,
        "loadavg_1m": loadavg(),
    }


def human(row: Dict[str, object]) -> str:
    return (
        f"{row['shards']} shard(s), {row['replicas']} replica(s), {row['episodes_in_flight']} in flight: "
        f"{row['episodes_per_s']} episodes/s delivered ({row['finished_episodes_per_s']} finished), {row['engine_requests_per_s']} engine requests/s, "
        f"server {row['server_cpu_ms_per_request']} ms CPU/request (each {row['server_cpu_ms_per_request_each']}), "
        f"client {row['client_cpu_ms_per_group']} ms CPU/group ({row['client_cores']} cores), "
        f"engines {row['engine_cores_each']} cores, waiting max {row['engine_waiting_max']}, "
        f"latency {row['mean_request_latency_ms']} ms vs TTFT {row['ttft_ms']}, load {row['loadavg_1m']}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shards", default="1,2", help="shard counts, comma-separated (default 1,2)")
    parser.add_argument("--runs", type=int, default=1, help="runs of each shard count, alternating (default 1)")
    parser.add_argument("--replicas", type=int, default=2, help="mock engine replicas shared by every shard (default 2)")
    parser.add_argument("--ttft-ms", type=int, default=50, help="the engines' time to first token (default 50; no per-token time)")
    parser.add_argument("--in-flight", type=int, default=512, help="episodes in flight over all shards (default 512)")
    parser.add_argument("--group-size", type=int, default=16)
    parser.add_argument("--tag", default="CoordSokoban")
    parser.add_argument("--max-turn", type=int, default=5)
    parser.add_argument("--seed", type=int, default=10000)
    parser.add_argument("--drive", choices=("batch", "stream"), default="batch", help="repeated batch rollouts (default) or one endless ShardedClient.stream")
    parser.add_argument("--warmup", type=float, default=5.0, help="seconds before the window (default 5)")
    parser.add_argument("--duration", type=float, default=20.0, help="seconds measured (default 20)")
    parser.add_argument("--json", metavar="FILE", help="write every run's figures here")
    args = parser.parse_args()
    try:
        counts = [int(n) for n in args.shards.split(",")]
    except ValueError:
        print(f"shards.py: --shards must be comma-separated integers, got {args.shards!r}", file=sys.stderr)
        return 2
    if any(n < 1 for n in counts) or args.runs < 1 or args.replicas < 1 or args.duration <= 0:
        print("shards.py: --shards, --runs and --replicas must be >= 1 and --duration > 0", file=sys.stderr)
        return 2
    if not os.path.exists(NODE):
        print(f"shards.py: no Node at {NODE} (npm ci installs it)", file=sys.stderr)
        return 1
    rows = []
    try:
        for run in range(args.runs):
            for n in counts:
                row = run_case(n, args)
                row["run"] = run + 1
                rows.append(row)
                print(human(row), flush=True)
    except Failure as error:
        print(f"shards.py: {error}", file=sys.stderr)
        return 1
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"command": sys.argv, "rows": rows}, out, indent=1)
    print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
