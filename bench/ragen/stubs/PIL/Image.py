class Image: pass
def fromarray(*a, **k):
    raise NotImplementedError
