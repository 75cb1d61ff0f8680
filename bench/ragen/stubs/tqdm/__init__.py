def tqdm(x=None, *a, **k):
    return x
