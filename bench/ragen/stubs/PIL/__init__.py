from . import Image
