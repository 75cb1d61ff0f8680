"""The environment provider's base class: gymnasium-shaped, text in and text out."""

from typing import Any, Dict, NamedTuple, Optional, Sequence


class StepOutcome(NamedTuple):
    """What `step` returns: unpacks as gymnasium's (observation, reward, done, info)."""

    observation: str
    reward: float
    done: bool
    info: Dict[str, Any] = {}


class TextEnv:
    """One live episode at a time. Subclasses implement `reset` and `step`; the rest is optional.

    - `reset(seed)` starts the episode the seed names and returns its first observation. The same
      seed must give the same episode: rollgym plays a group's episodes from one seed.
    - `step(action)` takes the action as text (what the policy answered, or an action name) and
      returns a StepOutcome (or a 4-tuple). After `done`, the server refuses further steps.
    - `action_names`: the current episode's actions, when it has a fixed list (sent with each
      observation so a client can show or check them); None for free text.
    - `snapshot()` / `restore(snapshot)`: a JSON-able state from which `restore` continues the
      episode exactly; `supports_snapshot` says whether a subclass has them.
    - `close()`: release what the env holds; called when its session ends.
    """

    #: Human-readable description for the server's /metadata.
    description: str = ""

    @property
    def action_names(self) -> Optional[Sequence[str]]:
        return None

    def reset(self, seed: int) -> str:
        raise NotImplementedError(f"{type(self).__name__} must implement reset(seed)")

    def step(self, action: str) -> StepOutcome:
        raise NotImplementedError(f"{type(self).__name__} must implement step(action)")

    def snapshot(self) -> Any:
        raise NotImplementedError(f"{type(self).__name__} has no snapshot()")

    def restore(self, snapshot: Any) -> None:
        raise NotImplementedError(f"{type(self).__name__} has no restore()")

    @classmethod
    def supports_snapshot(cls) -> bool:
        return cls.snapshot is not TextEnv.snapshot and cls.restore is not TextEnv.restore

    def close(self) -> None:
        pass
