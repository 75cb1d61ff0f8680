# Placeholder so `torch.Tensor` annotations evaluate at import time; no tensor op is ever run.
class Tensor: pass
float32 = "float32"
long = "long"
def __getattr__(name):
    raise AttributeError(f"torch stub has no {name}")
