"""rollgym shards as Ray actors: one ``rollgym serve`` process per actor, placed over the
cluster's nodes by a placement group (issue 34).

    import ray
    from rollgym_client.ray import ShardGroup

    ray.init()
    with ShardGroup(3, llm=["http://gpu-a:8000/v1", "http://gpu-b:8000/v1"], model="Qwen/Qwen2.5-3B-Instruct") as shards:
        shards.urls        # ['http://10.0.0.5:40113', ...], one per shard
        shards.health()    # each shard's /healthz answer

**Node and rollgym on a node.** A shard runs ``rollgym serve``, a Node.js 24 program. Ray's
``runtime_env`` ships Python packages and files, not a Node runtime, so every node that may
host a shard needs Node 24 and rollgym installed beforehand, in the node image or by the
cluster's setup commands: ``npm install -g rollgym`` (then ``rollgym`` is on ``PATH``, the
default ``command``), or a checkout with ``npm ci`` at the same path on every node and
``command=["node", "/opt/rollgym/bin/rollgym.js"]``. A ``--config`` file must also exist at the
same path on every node (or pass its settings as ``overrides``). Only the Python client needs
to be importable in the actor (``pip install rollgym-client`` on the nodes, or ``runtime_env``).

The shards share one configuration: the same engine list (every shard routes over all the
replicas), model, config file and overrides.
"""

from __future__ import annotations

import collections
import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from typing import Any, Deque, Dict, List, Optional, Sequence, Union

try:
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
except ImportError as error:  # pragma: no cover - depends on the environment
    raise ImportError(
        "rollgym_client.ray needs Ray: pip install ray (tested with ray 2.58); "
        "the rest of rollgym_client works without it"
    ) from error

__all__ = ["RollgymShard", "ShardActor", "ShardGroup", "serve_command"]

# The line `rollgym serve` prints once it listens (src/cli/serve.ts).
_SERVING = re.compile(r"serving on (http://\S+)")
# Lines of the server's output kept for error messages.
_TAIL_LINES = 40


def serve_command(command: Union[str, Sequence[str], None] = None) -> List[str]:
    """The argv prefix that runs rollgym: ``command`` as given (a string is one executable), else
    ``rollgym`` from ``PATH``. Raises FileNotFoundError naming what to install when neither works."""
    if command is not None:
        argv = [command] if isinstance(command, str) else list(command)
        if not argv:
            raise ValueError("command must name an executable, e.g. 'rollgym' or ['node', '/opt/rollgym/bin/rollgym.js']")
        return argv
    found = shutil.which("rollgym")
    if found is None:
        raise FileNotFoundError(
            "no `rollgym` command on PATH on this node: install Node 24 and rollgym on every node "
            "(npm install -g rollgym) or pass command=['node', '/path/to/rollgym/bin/rollgym.js']"
        )
    return [found]


class RollgymShard:
    """One ``rollgym serve`` process, started by :meth:`start` and stopped by :meth:`stop`.

    Plain Python (usable without an actor, as the tests do); :data:`ShardActor` is the same
    class as a Ray actor.

    Args:
        command: how to run rollgym (see :func:`serve_command`).
        host: the address to listen on; ``127.0.0.1`` (default) serves only this node, ``0.0.0.0``
            every node (the URL then names the node's IP address as Ray sees it).
        port: 0 (default) lets the OS pick a free port.
        llm, model: the engine replicas and the model; none: the built-in policy.
        config: a config file (the same path on every node).
        overrides: ``key=value`` settings, e.g. ``["rollgym.limits.group_concurrency=128"]``.
        args: more ``rollgym serve`` flags, e.g. ``["--policy", "random"]``.
        env: extra environment variables (``ROLLGYM_TOKEN``, ``ROLLGYM_TRAINER_TOKEN``, ...).
        startup_timeout: seconds to wait for the URL line and ``/healthz``.
    """

    def __init__(
        self,
        command: Union[str, Sequence[str], None] = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        llm: Union[str, Sequence[str], None] = None,
        model: Optional[str] = None,
        config: Optional[str] = None,
        overrides: Sequence[str] = (),
        args: Sequence[str] = (),
        env: Optional[Dict[str, str]] = None,
        startup_timeout: float = 60.0,
    ):
        if llm is not None and model is None:
            raise ValueError("model is required with llm (the model name the engines serve)")
        self._argv = serve_command(command) + ["serve", "--host", host, "--port", str(port)]
        if llm is not None:
            urls = [llm] if isinstance(llm, str) else list(llm)
            self._argv += ["--llm", ",".join(urls), "--model", str(model)]
        if config is not None:
            self._argv += ["--config", config]
        self._argv += [*args, *overrides]
        self._host = host
        self._env = env or {}
        self._startup_timeout = startup_timeout
        self._process: Optional[subprocess.Popen] = None
        self._url: Optional[str] = None
        self._tail: Deque[str] = collections.deque(maxlen=_TAIL_LINES)

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> str:
        """Start the server, wait for ``/healthz`` and return its URL (``http://host:port``)."""
        if self._process is not None:
            raise RuntimeError("this shard is already started")
        self._process = subprocess.Popen(
            self._argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env={**os.environ, **self._env},
            text=True,
            # Its own process group: SIGTERM reaches a wrapper's child too (npx, a shell script).
            start_new_session=True,
        )
        found = threading.Event()
        threading.Thread(target=self._read_output, args=(found,), name="rollgym-shard-output", daemon=True).start()
        deadline = time.monotonic() + self._startup_timeout
        if not found.wait(self._startup_timeout) or self._url is None:
            self.stop(5)
            raise RuntimeError(f"rollgym serve printed no URL within {self._startup_timeout} s: {self._argv}\n{self.output()}")
        while True:
            health = self.health()
            if health.get("status") in ("ok", "updating"):
                return self._url
            if self._process.poll() is not None or time.monotonic() > deadline:
                self.stop(5)
                raise RuntimeError(f"rollgym serve at {self._url} did not answer /healthz ({health}):\n{self.output()}")
            time.sleep(0.1)

    def _read_output(self, found: threading.Event) -> None:
        assert self._process is not None and self._process.stdout is not None
        for line in self._process.stdout:
            self._tail.append(line.rstrip("\n"))
            if self._url is None:
                match = _SERVING.search(line)
                if match:
                    self._url = self._advertised(match.group(1))
                    found.set()
        found.set()  # the process ended without the line: start() reports its output

    def _advertised(self, url: str) -> str:
        """The URL other nodes reach: a wildcard listen address becomes this node's IP."""
        if self._host in ("0.0.0.0", "::"):
            port = url.rsplit(":", 1)[1].rstrip("/")
            return f"http://{ray.util.get_node_ip_address()}:{port}"
        return url.rstrip("/")

    def stop(self, timeout: float = 40.0) -> Optional[int]:
        """SIGTERM (the server's graceful shutdown: running rollouts get its shutdown deadline,
        30 s by default), then wait up to ``timeout`` s; SIGKILL if it is still running. Returns
        the exit code (None if it never started)."""
        process = self._process
        if process is None:
            return None
        if process.poll() is None:
            self._signal(signal.SIGTERM)
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                self._signal(signal.SIGKILL)
                process.wait(10)
        return process.returncode

    def _signal(self, sig: int) -> None:
        assert self._process is not None
        try:
            os.killpg(self._process.pid, sig)
        except ProcessLookupError:
            pass

    # ------------------------------------------------------------------ state

    def url(self) -> Optional[str]:
        """``http://host:port`` once started (``Client`` takes it as is)."""
        return self._url

    def pid(self) -> Optional[int]:
        return None if self._process is None else self._process.pid

    def health(self, timeout: float = 5.0) -> Dict[str, Any]:
        """The server's ``/healthz`` answer (``status``: ``ok``, ``updating``, ``closing``), or
        ``{"status": "down", ...}`` with the reason when it does not answer."""
        if self._process is not None and self._process.poll() is not None:
            return {"status": "down", "exit_code": self._process.returncode}
        if self._url is None:
            return {"status": "down", "reason": "not started"}
        try:
            with urllib.request.urlopen(self._url + "/healthz", timeout=timeout) as answer:
                return json.loads(answer.read().decode("utf-8"))
        except (OSError, ValueError) as error:  # URLError, a refused or reset connection, bad JSON
            return {"status": "down", "reason": str(error)}

    def output(self) -> str:
        """The server's last lines of output (stdout and stderr)."""
        return "\n".join(self._tail)


# The shard as a Ray actor. An actor that ends without stop() (ray.kill, a crash) takes its
# server with it: Ray's raylet ends a worker's child processes when the worker exits (checked
# in test/python/ray_check.py).
ShardActor = ray.remote(RollgymShard)


class ShardGroup:
    """N shards placed over the cluster by one placement group (``SPREAD`` by default: one per
    node while nodes last), all with the same configuration (the keyword arguments of
    :class:`RollgymShard`). Starts them at construction and waits until every one answers
    ``/healthz``; :meth:`stop` (or leaving the ``with`` block) stops them and frees the group.

    Args:
        shards: how many.
        num_cpus: logical CPUs each shard's bundle reserves (1: a busy shard uses about a core).
        strategy: the placement group's strategy (``SPREAD``, ``STRICT_SPREAD``, ``PACK``).
        ready_timeout: seconds to wait for the placement group's resources.
        **shard_options: :class:`RollgymShard`'s arguments, shared by every shard.
    """

    def __init__(
        self,
        shards: int,
        *,
        num_cpus: float = 1.0,
        strategy: str = "SPREAD",
        ready_timeout: float = 120.0,
        **shard_options: Any,
    ):
        if not isinstance(shards, int) or isinstance(shards, bool) or shards < 1:
            raise ValueError(f"shards must be an integer >= 1, got {shards!r}")
        if not num_cpus > 0:
            raise ValueError(f"num_cpus must be > 0 (a placement group bundle needs a resource), got {num_cpus!r}")
        self._group = placement_group([{"CPU": num_cpus}] * shards, strategy=strategy)
        self.actors: List[Any] = []
        try:
            ray.get(self._group.ready(), timeout=ready_timeout)
            self.actors = [
                ShardActor.options(
                    num_cpus=num_cpus,
                    scheduling_strategy=PlacementGroupSchedulingStrategy(
                        placement_group=self._group, placement_group_bundle_index=i
                    ),
                ).remote(**shard_options)
                for i in range(shards)
            ]
            self.urls: List[str] = ray.get([actor.start.remote() for actor in self.actors])
        except BaseException:
            self.stop()
            raise

    def health(self) -> List[Dict[str, Any]]:
        """Each shard's ``/healthz`` answer, in shard order."""
        return ray.get([actor.health.remote() for actor in self.actors])

    def stop(self, timeout: float = 40.0) -> List[Optional[int]]:
        """Stop every shard (SIGTERM, then wait), end the actors and free the placement group.
        Returns the exit codes in shard order."""
        codes: List[Optional[int]] = []
        if self.actors:
            codes = ray.get([actor.stop.remote(timeout) for actor in self.actors])
            for actor in self.actors:
                ray.kill(actor)
            self.actors = []
        if self._group is not None:
            remove_placement_group(self._group)
            self._group = None
        return codes

    def __enter__(self) -> "ShardGroup":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
