"""poptorch.testing: the comparison helpers PopTorch offered."""
import torch


def allclose(x, y, rtol=1e-5, atol=1e-8, equal_nan=False):
    return torch.allclose(torch.as_tensor(x), torch.as_tensor(y), rtol=rtol, atol=atol, equal_nan=equal_nan)
