from graft.torch import AnchorMode, MeanReductionStrategy, OutputMode, ReductionType  # noqa: F401
from graft.torch._data import DataLoaderMode  # noqa: F401
