def load_dataset(*a, **k):
    raise NotImplementedError("datasets stub")
def concatenate_datasets(*a, **k):
    raise NotImplementedError("datasets stub")
class Dataset: pass
