from gymnasium.spaces import Discrete
