"""The synchronous client: :class:`Client` runs an :class:`~rollgym_client.aio.AsyncClient`
on an asyncio loop in a background thread, so it works from plain scripts, from trainer
code with no event loop, and from inside Jupyter (whose own loop is already running)."""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import threading
from typing import Any, Callable, ContextManager, Deque, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

from .aio import AsyncClient, EnvSession, RolloutStream, TagsArg, _left_open
from .batch import Batch, Group, StepResult
from .errors import RollgymError


class _LoopThread:
    """One daemon thread running one event loop until stopped."""

    def __init__(self, name: str):
        self.loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self.thread = threading.Thread(target=self._main, name=name, daemon=True)
        self.thread.start()
        self._ready.wait()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(self._ready.set)
        try:
            self.loop.run_forever()
        finally:
            pending = [t for t in asyncio.all_tasks(self.loop) if not t.done()]
            for task in pending:
                task.cancel()
            if pending:
                self.loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            self.loop.close()

    def run(self, coro, timeout: Optional[float] = None):
        if threading.current_thread() is self.thread:
            coro.close()
            raise RuntimeError("a synchronous rollgym Client cannot be called from its own event-loop thread (use AsyncClient)")
        if self.loop.is_closed():
            coro.close()
            raise RuntimeError("this Client is closed")
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(f"no answer within {timeout} s") from None
        except BaseException:  # KeyboardInterrupt while waiting: stop the coroutine too
            future.cancel()
            raise

    def stop(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        if threading.current_thread() is not self.thread:
            self.thread.join(10)


class Client:
    """rollgym's trainer client for synchronous code. Takes the arguments of
    :class:`~rollgym_client.aio.AsyncClient` and connects at construction:

    >>> client = Client("ws://127.0.0.1:8787")
    >>> batch = client.rollout(tag="CoordSokoban", groups=8, group_size=16)
    >>> batch.scores.shape, batch.group_ids, batch.metrics["train/CoordSokoban/success"]
    >>> for group in client.stream(tag="CoordSokoban", groups=64, group_size=16): ...
    >>> client.close()

    Also a context manager. Pass ``connect=False`` to connect lazily (the first request
    connects).
    """

    def __init__(self, url: str, token: Optional[str] = None, *, connect: bool = True, **options: Any):
        self._thread = _LoopThread("rollgym-client")
        try:
            self._async: AsyncClient = self._thread.run(self._make(url, token, options))
            if connect:
                self._thread.run(self._async.connect())
        except BaseException:
            self._thread.stop()
            raise

    @staticmethod
    async def _make(url: str, token: Optional[str], options: Dict[str, Any]) -> AsyncClient:
        return AsyncClient(url, token=token, **options)

    # ------------------------------------------------------------------ plumbing

    def _run(self, coro, timeout: Optional[float] = None):
        return self._thread.run(coro, timeout)

    @property
    def aio(self) -> AsyncClient:
        """The underlying AsyncClient (its coroutines must run on this client's loop)."""
        return self._async

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._thread.loop

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def connect(self) -> "Client":
        self._run(self._async.connect())
        return self

    def close(self) -> None:
        """Close the connection and stop the background thread."""
        if self._thread.loop.is_closed():
            return
        try:
            self._run(self._async.close(), timeout=15)
        finally:
            self._thread.stop()

    # ------------------------------------------------------------------ state

    @property
    def welcome(self) -> Optional[Dict[str, Any]]:
        return self._async.welcome

    @property
    def session(self) -> Optional[str]:
        return self._async.session

    @property
    def server(self) -> Optional[str]:
        return self._async.server

    @property
    def envs(self) -> List[str]:
        return self._async.envs

    @property
    def limits(self) -> Dict[str, Any]:
        return self._async.limits

    @property
    def resumes(self) -> int:
        return self._async.resumes

    @property
    def unattributed_errors(self) -> List[RollgymError]:
        """Server errors not tied to a request, e.g. an update that expired while no end_update waited."""
        return self._async.unattributed_errors

    @property
    def held_notices(self) -> List[Dict[str, Any]]:
        """The server's latest ``held`` notices: an open weight update whose trainer is gone holds a rollout."""
        return list(self._async.held_notices)

    # ------------------------------------------------------------------ rollouts

    def rollout(
        self,
        tags: TagsArg = None,
        *,
        tag: Optional[str] = None,
        groups: Union[int, Sequence[int], None] = None,
        group_size: Optional[int] = None,
        mode: str = "train",
        step: Optional[int] = None,
        seed: Optional[int] = None,
        delivery: str = "batch",
        rollout_id: Optional[str] = None,
        on_progress: Optional[Callable[[Dict[str, Any]], None]] = None,
        timeout: Optional[float] = None,
        **options: Any,
    ) -> Batch:
        """See :meth:`AsyncClient.rollout`. ``on_progress`` runs on the client's thread.
        Ctrl-C while waiting cancels the rollout on the server."""
        return self._run(
            self._async.rollout(
                tags,
                tag=tag,
                groups=groups,
                group_size=group_size,
                mode=mode,
                step=step,
                seed=seed,
                delivery=delivery,
                rollout_id=rollout_id,
                on_progress=on_progress,
                timeout=timeout,
                **options,
            )
        )

    def stream(
        self,
        tags: TagsArg = None,
        *,
        tag: Optional[str] = None,
        groups: Union[int, Sequence[int], None] = None,
        group_size: Optional[int] = None,
        mode: str = "train",
        step: Optional[int] = None,
        seed: Optional[int] = None,
        delivery: str = "stream",
        rollout_id: Optional[str] = None,
        on_progress: Optional[Callable[[Dict[str, Any]], None]] = None,
        **options: Any,
    ) -> "SyncRolloutStream":
        """See :meth:`AsyncClient.stream`; a plain iterator of :class:`Group`:

        >>> stream = client.stream(tag="CoordSokoban", groups=64, group_size=16)
        >>> for group in stream: ...
        >>> stream.batch.metrics
        """

        async def make() -> RolloutStream:
            return self._async.stream(
                tags,
                tag=tag,
                groups=groups,
                group_size=group_size,
                mode=mode,
                step=step,
                seed=seed,
                delivery=delivery,
                rollout_id=rollout_id,
                on_progress=on_progress,
                **options,
            )

        return SyncRolloutStream(self, self._run(make()))

    def cancel(self, rollout_id: str) -> None:
        self._run(self._async.cancel(rollout_id))

    # ------------------------------------------------------------------ weight updates

    @property
    def version(self) -> Optional[Dict[str, Any]]:
        """The weight version in force as the server last said (trainer sessions)."""
        return self._async.version

    def begin_update(
        self,
        update_id: Optional[str] = None,
        mode: Optional[str] = None,
        label: Optional[str] = None,
        ordinal: Optional[int] = None,
        engines: Optional[str] = None,
    ) -> Dict[str, Any]:
        """See :meth:`AsyncClient.begin_update` (needs ``Client(..., trainer=True)``)."""
        return self._run(self._async.begin_update(update_id, mode, label, ordinal, engines))

    def end_update(self, update_id: str, label: str, ordinal: int) -> Dict[str, Any]:
        """See :meth:`AsyncClient.end_update`."""
        return self._run(self._async.end_update(update_id, label, ordinal))

    def update(self, label: str, ordinal: int, mode: Optional[str] = None) -> ContextManager[Dict[str, Any]]:
        """See :meth:`AsyncClient.update`:

        >>> next_ordinal = client.version["ordinal"] + 1
        >>> with client.update(f"step-{next_ordinal}", next_ordinal):
        ...     push_weights()
        """
        return updating(self, label, ordinal, mode)

    # ------------------------------------------------------------------ env hosting

    def open_envs(self, tag: str, groups: int = 1, group_size: int = 1, **options: Any) -> "SyncEnvSession":
        """See :meth:`AsyncClient.open_envs`."""
        return SyncEnvSession(self, self._run(self._async.open_envs(tag, groups, group_size, **options)))


class SyncRolloutStream:
    """Iterator over a rollout's groups; ``batch`` holds the verdict after the loop."""

    def __init__(self, client: Client, stream: RolloutStream):
        self._client = client
        self._stream = stream
        self._ready: Deque[Group] = collections.deque()  # handed out by the loop, not yet by __next__

    @property
    def rollout_id(self) -> str:
        return self._stream.rollout_id

    @property
    def batch(self) -> Optional[Batch]:
        return self._stream.batch

    @property
    def progress(self) -> Optional[Dict[str, Any]]:
        return self._stream.progress

    @property
    def windows(self) -> Dict[int, Dict[str, Any]]:
        """Endless streams: each window's verdict frame so far, by window number."""
        return self._stream.windows

    def __iter__(self) -> "SyncRolloutStream":
        return self

    def __next__(self) -> Group:
        if not self._ready:
            try:
                self._ready.extend(self._client._run(self._stream._ready_groups()))
            except StopAsyncIteration:
                raise StopIteration from None
        return self._ready.popleft()

    def __enter__(self) -> "SyncRolloutStream":
        self._client._run(self._stream.start())
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def collect(self) -> Batch:
        return self._client._run(self._stream.collect())

    def cancel(self) -> None:
        self._client._run(self._stream.cancel())

    def close(self) -> None:
        """Stop early: cancel the rollout on the server if it still runs."""
        if not self._client._thread.loop.is_closed():
            self._client._run(self._stream.aclose())


class SyncEnvSession:
    """Synchronous wrapper of :class:`~rollgym_client.aio.EnvSession`."""

    def __init__(self, client: Client, session: EnvSession):
        self._client = client
        self._session = session

    @property
    def id(self) -> str:
        return self._session.id

    @property
    def tag(self) -> str:
        return self._session.tag

    @property
    def episodes(self) -> List[Dict[str, Any]]:
        return self._session.episodes

    @property
    def messages(self) -> Dict[int, Optional[List[Dict[str, str]]]]:
        return self._session.messages

    @property
    def done(self) -> set:
        return self._session.done

    @property
    def env_ids(self) -> List[int]:
        return self._session.env_ids

    @property
    def active(self) -> List[int]:
        return self._session.active

    def step(self, responses: Union[Mapping[int, str], Iterable[Tuple[int, str]], Iterable[Mapping[str, Any]]]) -> List[StepResult]:
        return self._client._run(self._session.step(responses))

    def close(self) -> Tuple[List[Dict[str, Any]], Dict[str, float]]:
        return self._client._run(self._session.close())

    def __enter__(self) -> "SyncEnvSession":
        return self

    def __exit__(self, *exc) -> None:
        self._client._run(self._session.__aexit__(*exc))


@contextlib.contextmanager
def updating(client: Any, label: str, ordinal: int, mode: Optional[str]) -> Iterator[Dict[str, Any]]:
    """An update around the body, for a client with ``begin_update``/``end_update`` (Client,
    ShardedClient): ended on a normal exit; a body that raises leaves it open, and says so."""
    begun = client.begin_update(mode=mode, label=label, ordinal=ordinal)
    try:
        yield begun
    except BaseException as error:
        _left_open(error, begun["id"], label, ordinal)
        raise
    client.end_update(begun["id"], label, ordinal)
