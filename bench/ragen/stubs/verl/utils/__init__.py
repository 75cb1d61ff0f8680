from . import config, dataset
