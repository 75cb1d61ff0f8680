"""Environments written in Python, served to rollgym and to any OpenEnv client.

    from rollgym_envs import TextEnv, serve_openenv

    class Guess(TextEnv):
        def reset(self, seed): ...
        def step(self, action): ...

    serve_openenv({"Guess": Guess}, port=8010, workers=4)

An OpenEnv client then plays it at http://127.0.0.1:8010/Guess (docs/openenv.md). From a shell:
`python3 -m rollgym_envs my_module:Guess --port 8010` (--help lists the provider's limits).
"""

from .env import StepOutcome, TextEnv
from .openenv_server import OpenEnvProvider, provider_options, provider_parser, serve_openenv

__all__ = ["OpenEnvProvider", "StepOutcome", "TextEnv", "provider_options", "provider_parser", "serve_openenv"]
