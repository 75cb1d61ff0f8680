from . import rl_dataset
