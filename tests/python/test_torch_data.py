"""poptorch.DataLoader's batch_sampler and AsyncRebatched modes."""
import pytest

torch = pytest.importorskip("torch")

import graft.torch as poptorch  # noqa: E402


class Rows(torch.utils.data.Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return torch.full((2,), float(i))


class Stream(torch.utils.data.IterableDataset):
    """Each worker yields its own share of 0..n-1."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        k, w = (info.id, info.num_workers) if info else (0, 1)
        return iter(torch.full((2,), float(i)) for i in range(k, self.n, w))


@pytest.mark.parametrize("drop_last", [True, False])
def test_batch_sampler_batches_are_joined_per_call(drop_last):
    """With deviceIterations(3) one call takes three of the sampler's batches, concatenated."""
    sampler = torch.utils.data.BatchSampler(torch.utils.data.SequentialSampler(range(20)), batch_size=2,
                                            drop_last=False)
    loader = poptorch.DataLoader(poptorch.Options().deviceIterations(3), Rows(20), batch_sampler=sampler,
                                 drop_last=drop_last)
    batches = list(loader)
    assert len(batches) == len(loader) == (3 if drop_last else 4)
    firsts = [b[:, 0].tolist() for b in batches]
    assert firsts[0] == [0, 1, 2, 3, 4, 5] and firsts[2] == [12, 13, 14, 15, 16, 17]
    if not drop_last:
        assert firsts[3] == [18, 19]


@pytest.mark.parametrize("drop_last", [True, False])
def test_async_rebatched_loses_only_the_last_partial_batch(drop_last):
    """Seven workers of an iterable dataset of 101 rows: plain batching leaves a partial batch per
    worker; AsyncRebatched re-cuts the rows, so only the epoch's last partial batch is short."""
    loader = poptorch.DataLoader(poptorch.Options(), Stream(101), batch_size=4, num_workers=7, drop_last=drop_last,
                                 mode=poptorch.DataLoaderMode.AsyncRebatched, rebatched_worker_size=2)
    seen = []
    batches = list(loader)
    for b in batches[:-1]:
        assert b.shape == (4, 2)
    for b in batches:
        seen.extend(int(v) for v in b[:, 0])
    assert len(seen) == len(set(seen))
    assert len(seen) == (100 if drop_last else 101)
    assert len(loader) == (25 if drop_last else 26)
