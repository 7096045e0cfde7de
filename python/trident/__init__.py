import torch  # noqa: F401  (loads libtorch before the extension)
from . import _C  # noqa: F401
