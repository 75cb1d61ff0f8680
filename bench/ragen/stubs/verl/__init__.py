class DataProto:  # placeholder; tensor building is never exercised by the fixture generator
    def __init__(self, *a, **k):
        self.batch = None
        self.non_tensor_batch = None
        self.meta_info = {}
from . import utils
