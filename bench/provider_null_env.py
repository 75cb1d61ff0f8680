"""An env that does nothing, for bench/python-provider.ts: what a step costs is the provider's own."""

from rollgym_envs import StepOutcome, TextEnv


class Null(TextEnv):
    def reset(self, seed: int) -> str:
        return f"seed {seed}"

    def step(self, action: str) -> StepOutcome:
        return StepOutcome(action, 0.0, False, {})
