"""poptorch.DataLoader and AsynchronousDataAccessor: batches of the size one call consumes."""
import enum
import queue
import threading

import torch

from .. import _graft
from ._options import Options


class DataLoaderMode(enum.IntEnum):
    Sync = 0
    Async = 1
    AsyncRebatched = 2


class DataLoader(torch.utils.data.DataLoader):
    """torch's DataLoader yielding the combined batch one call of a model made with ``options``
    consumes: ``batch_size x deviceIterations x gradientAccumulation x replicationFactor`` samples.
    ``mode`` Async / AsyncRebatched wraps the iteration in an AsynchronousDataAccessor."""

    def __init__(self, options, dataset, batch_size=1, shuffle=None, num_workers=0, drop_last=True,
                 persistent_workers=None, auto_distributed_partitioning=True, mode=DataLoaderMode.Sync,
                 async_options=None, rebatched_worker_size=None, **kwargs):
        if options is None:
            options = Options()
        if not isinstance(options, Options):
            raise _graft.Error(f"poptorch.DataLoader: options must be a poptorch.Options, got {type(options).__name__}")
        if batch_size is not None and (not isinstance(batch_size, int) or batch_size < 1):
            raise _graft.Error(f"poptorch.DataLoader: batch_size must be an integer >= 1 or None, got {batch_size!r}")
        # The training factor: PopTorch's DataLoader counts gradient accumulation in (a call of a
        # trainingModel takes that many micro-batches; an inferenceModel ignores the option).
        factor = options.device_iterations * options.Training.gradient_accumulation * options.replication_factor
        if batch_size is None:
            # torch's "no automatic batching": the dataset yields whole batches already.
            if factor != 1:
                raise _graft.Error("poptorch.DataLoader: batch_size=None (the dataset yields whole batches) needs "
                                   f"deviceIterations x gradientAccumulation x replicationFactor = 1, got {factor}")
            self._combined_batch_size = None
            drop_last = False  # (torch: no batches, nothing to drop)
        else:
            self._combined_batch_size = batch_size * factor
        self.options = options
        self.mode = DataLoaderMode(int(mode))
        if persistent_workers is None:
            persistent_workers = num_workers > 0
        dist = options.Distributed
        if dist.numProcesses > 1 and auto_distributed_partitioning and \
                not isinstance(dataset, torch.utils.data.IterableDataset) and "sampler" not in kwargs and \
                "batch_sampler" not in kwargs:
            kwargs["sampler"] = _ProcessShard(len(dataset), dist.processId, dist.numProcesses,
                                              self._combined_batch_size or 1, bool(shuffle),
                                              options.random_seed or 0, drop_last)
            shuffle = False
        if kwargs.get("batch_sampler") is not None:
            # The user's batches: one call takes `factor` of them, concatenated (the last call of an
            # epoch fewer, unless drop_last).
            if kwargs.get("sampler") is not None or shuffle:
                raise _graft.Error("poptorch.DataLoader: batch_sampler is mutually exclusive with shuffle and sampler")
            kwargs["batch_sampler"] = _CombinedBatchSampler(kwargs["batch_sampler"], factor, drop_last)
            self._combined_batch_size = None if batch_size in (None, 1) else self._combined_batch_size
            super().__init__(dataset, num_workers=num_workers, persistent_workers=persistent_workers, **kwargs)
            return
        self._rebatch = None
        if self.mode == DataLoaderMode.AsyncRebatched and self._combined_batch_size is not None:
            # Workers load batches of rebatched_worker_size (default: the combined batch) and the
            # accessor joins and re-cuts them into combined batches, so that with several workers
            # only the epoch's last partial batch is left over (not one per worker).
            worker = int(rebatched_worker_size or self._combined_batch_size)
            if worker < 1:
                raise _graft.Error(f"poptorch.DataLoader: rebatched_worker_size must be >= 1, got {worker}")
            self._rebatch = (self._combined_batch_size, drop_last)
            super().__init__(dataset, batch_size=worker, shuffle=bool(shuffle), num_workers=num_workers,
                             drop_last=False, persistent_workers=persistent_workers, **kwargs)
            return
        super().__init__(dataset, batch_size=self._combined_batch_size, shuffle=bool(shuffle),
                         num_workers=num_workers, drop_last=drop_last, persistent_workers=persistent_workers, **kwargs)

    def __len__(self):
        if self.__dict__.get("_rebatch") is None:
            return super().__len__()
        combined, drop_last = self._rebatch
        n = len(self.dataset)
        return n // combined if drop_last else -(-n // combined)

    @property
    def combinedBatchSize(self):  # noqa: N802
        return self._combined_batch_size

    def __iter__(self):
        if self.mode == DataLoaderMode.Sync:
            return super().__iter__()
        source = _Sync(self) if self._rebatch is None else _Rebatched(_Sync(self), *self._rebatch)
        return iter(AsynchronousDataAccessor(source))

    def terminate(self):
        pass


class _Rebatched:
    """Joins the batches of ``source`` (tensors, or tuples / lists / dicts of them) along the first
    dimension and cuts them into batches of ``combined`` rows; the rows left at the end make a
    last, smaller batch unless ``drop_last``."""

    def __init__(self, source, combined, drop_last):
        self.source, self.combined, self.drop_last = source, combined, drop_last

    def __len__(self):
        return len(self.source)

    def __iter__(self):
        from torch.utils import _pytree as pytree  # noqa: PLC0415

        pending, spec, rows = [], None, 0
        for batch in self.source:
            leaves, spec = pytree.tree_flatten(batch)
            pending.append(leaves)
            rows += int(leaves[0].shape[0])
            while rows >= self.combined:
                joined = [torch.cat(parts) for parts in zip(*pending)]
                yield pytree.tree_unflatten([t[:self.combined] for t in joined], spec)
                rest = [t[self.combined:] for t in joined]
                rows -= self.combined
                pending = [rest] if rows else []
        if rows and not self.drop_last:
            yield pytree.tree_unflatten([torch.cat(parts) for parts in zip(*pending)], spec)


class _CombinedBatchSampler(torch.utils.data.Sampler):
    """Joins ``factor`` consecutive batches of a batch sampler into one (the batches one call of
    the model consumes); with ``drop_last`` a last group of fewer batches is dropped."""

    def __init__(self, batch_sampler, factor, drop_last):
        self.batch_sampler, self.factor, self.drop_last = batch_sampler, factor, drop_last

    def __iter__(self):
        group, count = [], 0
        for batch in self.batch_sampler:
            group.extend(batch)
            count += 1
            if count == self.factor:
                yield group
                group, count = [], 0
        if count and not self.drop_last:
            yield group

    def __len__(self):
        n = len(self.batch_sampler)
        return n // self.factor + (1 if n % self.factor and not self.drop_last else 0)


class _ProcessShard(torch.utils.data.Sampler):
    """This process's share of a dataset split over ``num_processes`` (Options.Distributed): the
    same number of whole combined batches for every process, taken in turn from one order of the
    samples. With shuffle that order is a permutation drawn from ``seed`` and the epoch, the same
    in every process (so the shares never overlap) and new each epoch (so the samples left over in
    one epoch are used in another)."""

    def __init__(self, n, process_id, num_processes, combined, shuffle, seed, drop_last):
        super().__init__()
        self.n, self.pid, self.procs = n, process_id, num_processes
        self.shuffle, self.seed, self.epoch = shuffle, seed, 0
        per = n // num_processes
        self.per = per - per % combined if drop_last else per

    def __iter__(self):
        if self.shuffle:
            order = torch.randperm(self.n, generator=torch.Generator().manual_seed(self.seed + self.epoch)).tolist()
        else:
            order = list(range(self.n))
        self.epoch += 1
        return iter(order[self.pid * self.per:(self.pid + 1) * self.per])

    def __len__(self):
        return self.per


class _Sync:
    def __init__(self, loader):
        self.loader = loader

    def __iter__(self):
        return torch.utils.data.DataLoader.__iter__(self.loader)

    def __len__(self):
        return len(self.loader)


_END = object()


class AsynchronousDataAccessor:
    """Iterates a DataLoader (or any iterable of batches) on a background thread, ``buffer_size``
    batches ahead, so loading overlaps the model's calls."""

    def __init__(self, dataset, buffer_size=3, miss_sleep_time_in_ms=0.1, load_indefinitely=False,
                 early_preload=False, sharing_strategy=None, rebatched_size=None):
        self._source = dataset
        self._buffer_size = max(1, int(buffer_size))
        self._load_indefinitely = load_indefinitely
        self._thread = None
        self._queue = None
        self._stop = threading.Event()

    def __len__(self):
        return len(self._source)

    def _worker(self, q, stop):
        try:
            while not stop.is_set():
                for item in self._source:
                    while not stop.is_set():
                        try:
                            q.put(item, timeout=0.1)
                            break
                        except queue.Full:
                            continue
                    if stop.is_set():
                        return
                if not self._load_indefinitely:
                    break
        except BaseException as e:  # noqa: BLE001  (re-raised in the consumer)
            q.put(("__graft_error__", e))
            return
        q.put(_END)

    def __iter__(self):
        self.terminate()
        self._stop = threading.Event()
        self._queue = queue.Queue(self._buffer_size)
        self._thread = threading.Thread(target=self._worker, args=(self._queue, self._stop), daemon=True)
        self._thread.start()
        q = self._queue
        while True:
            item = q.get()
            if item is _END:
                return
            if isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str) and \
                    item[0] == "__graft_error__":
                raise item[1]
            yield item

    def terminate(self):
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=5)
            self._thread = None

    def __del__(self):
        try:
            self.terminate()
        except Exception:  # noqa: BLE001,S110
            pass
