"""python3 -m rollgym_envs: serve TextEnv classes as OpenEnv environments.

    python3 -m rollgym_envs guess_number_env:GuessNumber --port 8010
    python3 -m rollgym_envs Guess=guess_number_env:GuessNumber Other=my_envs:Other --workers 4

Each ENV is MODULE:CLASS (served under the class's name) or NAME=MODULE:CLASS; MODULE is
imported from the Python path."""

import importlib
import sys
from typing import Dict, List, Optional

from .openenv_server import EnvFactory, provider_options, provider_parser, serve_openenv


def main(argv: Optional[List[str]] = None) -> int:
    parser = provider_parser("Serves TextEnv classes as OpenEnv environments (docs/openenv.md).", prog="python3 -m rollgym_envs")
    parser.add_argument("envs", nargs="+", metavar="ENV", help="MODULE:CLASS or NAME=MODULE:CLASS, a TextEnv class (or factory) to serve")
    args = parser.parse_args(argv)
    envs: Dict[str, EnvFactory] = {}
    for spec in args.envs:
        name, _, target = spec.rpartition("=")
        module, _, attribute = target.partition(":")
        if not module or not attribute:
            parser.error(f"ENV {spec!r}: expected MODULE:CLASS or NAME=MODULE:CLASS")
        try:
            factory = getattr(importlib.import_module(module), attribute)
        except (ImportError, AttributeError) as error:
            parser.error(f"ENV {spec!r}: {error}")
        envs[name or attribute] = factory
    serve_openenv(envs, **provider_options(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
