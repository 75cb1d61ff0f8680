# gym_sokoban's step() renders an rgb frame that RAGEN discards; return blank 16x16 tiles.
import numpy as np
def imread(*a, **k):
    return np.zeros((16, 16, 3), dtype=np.uint8)
