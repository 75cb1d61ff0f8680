"""A small text game served as an OpenEnv environment by rollgym_envs (not one of RAGEN's).

The env thinks of a number from 1 to 100 (fixed by the seed); each guess is answered "higher",
"lower" or "correct". Correct earns 1.0, minus 0.1 per earlier guess; a guess that is not a whole
number in range costs -0.1 and changes nothing; seven guesses end the episode.

    python3 examples/guess_number_env.py --port 8010
    # then an OpenEnv client at http://127.0.0.1:8010/GuessNumber
"""

import random
from typing import Optional

from rollgym_envs import StepOutcome, TextEnv, provider_options, provider_parser, serve_openenv


class GuessNumber(TextEnv):
    description = "Guess a number from 1 to 100; each guess is answered higher, lower or correct."
    MAX_GUESSES = 7

    def __init__(self) -> None:
        self.secret: Optional[int] = None
        self.guesses = 0

    def reset(self, seed: int) -> str:
        self.secret = random.Random(seed).randint(1, 100)
        self.guesses = 0
        return f"I am thinking of a number from 1 to 100. You have {self.MAX_GUESSES} guesses. Your guess?"

    def step(self, action: str) -> StepOutcome:
        text = action.strip()
        if not text.isdigit() or not 1 <= int(text) <= 100:
            return StepOutcome(f"{text!r} is not a whole number from 1 to 100. Your guess?", -0.1, False, {"valid": False})
        self.guesses += 1
        guess = int(text)
        if guess == self.secret:
            return StepOutcome("Correct!", round(1.0 - 0.1 * (self.guesses - 1), 10), True, {"valid": True, "success": True})
        hint = "higher" if guess < self.secret else "lower"
        left = self.MAX_GUESSES - self.guesses
        done = left == 0
        return StepOutcome(f"{guess}: {hint}. " + ("No guesses left." if done else f"{left} left. Your guess?"), 0.0, done, {"valid": True, "success": False})

    def snapshot(self) -> dict:
        return {"secret": self.secret, "guesses": self.guesses}

    def restore(self, snapshot: dict) -> None:
        self.secret, self.guesses = snapshot["secret"], snapshot["guesses"]


if __name__ == "__main__":
    # The provider's options (limits, --allow-origin, ...): docs/openenv.md "Provider limits".
    args = provider_parser(__doc__.splitlines()[0]).parse_args()
    serve_openenv({"GuessNumber": GuessNumber}, **provider_options(args))
