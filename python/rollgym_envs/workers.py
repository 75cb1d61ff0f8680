"""The provider's worker processes: each holds the env instances of the sessions pinned to it and
answers one request at a time over a pipe.

A worker ends with its provider however the provider ends (SIGTERM, SIGINT, SIGKILL): Linux
kills it through PR_SET_PDEATHSIG, and a thread watching the parent's pid is the fallback
elsewhere (and for the instant before the prctl). An env's exception comes back with its
traceback, which the provider logs; its one-line form names where it was raised.
"""

import asyncio
import ctypes
import logging
import math
import os
import signal
import sys
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple

from .env import TextEnv

EnvFactory = Callable[[], TextEnv]
log = logging.getLogger("rollgym_envs")

#: How often a worker checks that its provider still lives, where prctl is not there to say so.
PARENT_POLL_S = 0.5

_PR_SET_PDEATHSIG = 1


class WorkerDied(Exception):
    pass


class EnvFailed(Exception):
    """The env raised (or broke the contract): `reason` for the client, `trace` for the log."""

    def __init__(self, reason: str, trace: str):
        super().__init__(reason)
        self.reason = reason
        self.trace = trace


class ContractError(TypeError):
    """An env's answer that is not what TextEnv promises (raised here, so no env frame to name)."""


# --------------------------------------------------------------------------- inside a worker


def _set_parent_death_signal() -> bool:
    """Asks Linux to SIGKILL this process when its parent ends; False where it cannot."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _watch_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(PARENT_POLL_S)
    os._exit(0)


def _exit_with_parent(parent: int) -> None:
    # Linux sends the signal when the *thread* that forked ends: the provider forks from the thread
    # it is built and served in, which lives as long as it serves.
    _set_parent_death_signal()
    # Also where prctl worked: the parent may have died before it was set.
    threading.Thread(target=_watch_parent, args=(parent,), name="watch-parent", daemon=True).start()


def _worker_main(conn: Any, factories: Dict[str, EnvFactory], parent: int, inherited: Sequence[int]) -> None:
    """One worker: envs by session id, one request at a time, answers (ok, value)."""
    # Forked from a provider that may have asyncio's signal handlers (a no-op handler and a wakeup
    # fd into the parent's loop): SIGTERM ends a worker again, and Ctrl-C, which reaches the whole
    # process group, is the provider's to act on.
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _exit_with_parent(parent)
    # The provider's sockets and other workers' pipe ends, copied by the fork: a client's TCP
    # connection must end when the provider closes it, and a worker must see its pipe's end.
    for fd in inherited:
        try:
            os.close(fd)
        except OSError:
            pass
    envs: Dict[str, TextEnv] = {}
    while True:
        try:
            request = conn.recv()
        except EOFError:
            return
        if request is None:
            return
        session, op, arg = request
        try:
            conn.send((True, _run(envs, factories, session, op, arg)))
        except Exception as error:  # the env's own failure: the session hears of it, the log too
            conn.send((False, (_one_line(error), traceback.format_exc())))


def _one_line(error: Exception) -> str:
    """`Type: message`, plus where the env raised it (its innermost frame)."""
    kind = TypeError if isinstance(error, ContractError) else type(error)
    text = f"{kind.__name__}: {error}"
    frames = traceback.extract_tb(error.__traceback__)
    if isinstance(error, ContractError) or len(frames) < 2:
        return text
    where = frames[-1]
    return f"{text} (raised in {where.name}, {os.path.basename(where.filename)} line {where.lineno})"


def _run(envs: Dict[str, TextEnv], factories: Dict[str, EnvFactory], session: str, op: str, arg: Any) -> Any:
    if op == "open":
        envs[session] = factories[arg]()
        return None
    if op == "close":
        env = envs.pop(session, None)
        if env is not None:
            env.close()
        return None
    env = envs[session]
    if op == "reset":
        text = env.reset(arg)
        if not isinstance(text, str):
            raise ContractError(f"reset() returned {type(text).__name__}, not the observation text (str)")
        return text, _names(env)
    if op == "step":
        outcome = tuple(env.step(arg))
        if len(outcome) == 3:
            outcome = (*outcome, {})
        if len(outcome) != 4:
            raise ContractError(f"step() returned {len(outcome)} values, not (observation, reward, done, info)")
        text, reward, done, info = outcome
        if not isinstance(text, str):
            raise ContractError(f"step() returned observation of type {type(text).__name__}, not str")
        if isinstance(reward, bool) or not isinstance(reward, (int, float)) or not math.isfinite(reward):
            raise ContractError(f"step() returned reward {reward!r}, not a finite number")
        if not isinstance(info, dict):
            raise ContractError(f"step() returned info of type {type(info).__name__}, not dict")
        return text, float(reward), bool(done), info, _names(env)
    raise ValueError(f"unknown worker operation {op!r}")


def _names(env: TextEnv) -> Optional[List[str]]:
    names = env.action_names
    return None if names is None else [str(n) for n in names]


# --------------------------------------------------------------------------- the provider's side


class Worker:
    """A worker process and the one thread that talks to it (requests to one worker go in turn).

    `sessions` are the sessions pinned to it; `death` says why it ended, once it has."""

    def __init__(self, context: Any, factories: Dict[str, EnvFactory], inherited: Sequence[int] = ()):
        """Forks the worker; `inherited` are the provider's file descriptors it closes at once."""
        self.conn, child = context.Pipe()
        self.process = context.Process(target=_worker_main, args=(child, factories, os.getpid(), inherited), daemon=True)
        self.process.start()
        child.close()
        self.pid: int = self.process.pid
        self.sentinel: int = self.process.sentinel
        self.thread = ThreadPoolExecutor(max_workers=1)
        self.sessions: Set[Any] = set()
        self.death: Optional[str] = None

    def _roundtrip(self, request: Tuple[str, str, Any]) -> Tuple[bool, Any]:
        try:
            self.conn.send(request)
            return self.conn.recv()
        except (EOFError, OSError) as error:
            raise WorkerDied(f"worker process {self.pid} died") from error

    async def call(self, session: str, op: str, arg: Any = None) -> Any:
        """The worker's answer; raises EnvFailed when the env raised, WorkerDied when the worker is gone."""
        if self.death is not None:
            raise WorkerDied(self.death)
        ok, value = await asyncio.get_running_loop().run_in_executor(self.thread, self._roundtrip, (session, op, arg))
        if not ok:
            raise EnvFailed(*value)
        return value

    def alive(self) -> bool:
        return self.death is None and self.process.is_alive()

    def fds(self) -> List[int]:
        return [self.conn.fileno()] if self.death is None else []

    def bury(self) -> str:
        """Reaps the ended process and says how it ended ("worker process 12 died (killed by SIGKILL)")."""
        if self.death is None:
            self.process.join(timeout=1)
            if self.process.is_alive():  # its pipe broke but it lingers: it serves no one now
                self.process.kill()
                self.process.join(timeout=1)
            code = self.process.exitcode
            if code is not None and code < 0:
                how = f"killed by {_signal_name(-code)}"
            else:
                how = f"exit code {code}"
            self.death = f"worker process {self.pid} died ({how})"
            if code is not None:
                self.process.close()  # its sentinel's descriptor
            # After the call in flight (which the broken pipe ends), never under it: a closed
            # descriptor's number may be reused at once.
            self.thread.submit(self.conn.close)
            self.thread.shutdown(wait=False)
        return self.death


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def stop_workers(workers: Sequence[Worker], wait_s: float = 5.0) -> None:
    """Asks each worker to end, waits up to `wait_s` for all of them, then kills the rest (each
    is then the provider's to bury)."""
    for worker in workers:
        try:
            worker.conn.send(None)
        except (EOFError, OSError):
            pass
    deadline = time.monotonic() + wait_s
    for worker in workers:
        worker.process.join(timeout=max(0.0, deadline - time.monotonic()))
        if worker.process.is_alive():
            worker.process.kill()
            worker.process.join(timeout=1)
