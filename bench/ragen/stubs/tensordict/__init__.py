class TensorDict(dict):
    def __init__(self, *a, **k):
        super().__init__(*a)
