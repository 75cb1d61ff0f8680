from gymnasium.utils import seeding
