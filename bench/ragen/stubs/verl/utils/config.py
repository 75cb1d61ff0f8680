def omega_conf_to_dataclass(config, dataclass_type=None):
    return config
