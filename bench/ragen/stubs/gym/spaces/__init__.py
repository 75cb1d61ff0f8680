from gymnasium.spaces import Box, Discrete
from . import discrete
