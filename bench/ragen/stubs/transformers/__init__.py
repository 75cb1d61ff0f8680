class AutoTokenizer:
    @classmethod
    def from_pretrained(cls, *a, **k):
        raise NotImplementedError
class AutoProcessor(AutoTokenizer): pass
class PreTrainedTokenizer: pass
