from . import pyplot, animation
