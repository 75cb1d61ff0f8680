# Tiny OmegaConf stand-in: DictConfig = dict with attribute access (recursive).
class DictConfig(dict):
    def __init__(self, d=None):
        super().__init__()
        for k, v in (d or {}).items():
            self[k] = _wrap(v)
    def __getattr__(self, k):
        try:
            return self[k]
        except KeyError:
            raise AttributeError(k)
    def __setattr__(self, k, v):
        self[k] = _wrap(v)

class ListConfig(list):
    pass

def _wrap(v):
    if isinstance(v, DictConfig) or isinstance(v, ListConfig):
        return v
    if isinstance(v, dict):
        return DictConfig(v)
    if isinstance(v, list):
        return ListConfig([_wrap(x) for x in v])
    return v

class OmegaConf:
    @staticmethod
    def register_new_resolver(*a, **k):
        pass
    @staticmethod
    def create(d):
        return _wrap(d)
    @staticmethod
    def to_container(cfg, resolve=True):
        return cfg
