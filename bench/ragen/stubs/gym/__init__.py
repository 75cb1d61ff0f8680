# Minimal stand-in for the old `gym` package, only so gym_sokoban / RAGEN imports succeed.
# Core classes are taken from the real (fetched) gymnasium source.
from gymnasium import Env
from . import spaces, utils, envs
