"""``dg.utils.data``: datasets, samplers and the DataLoader, as ``torch.utils.data``.

A map-style :class:`Dataset` has ``__getitem__`` and ``__len__``; a sampler yields indices
into it; a :class:`BatchSampler` groups them; :class:`DataLoader` fetches the samples of
each batch and merges them with ``collate_fn`` (:func:`default_collate` stacks tensors,
numbers and arrays and recurses into tuples, lists and dicts). An :class:`IterableDataset`
yields samples itself. Data is loaded in the calling process (``num_workers=0``) or by
worker processes (``num_workers > 0``: utils/workers.py).

>>> import dualgraph as dg
>>> from dualgraph.utils.data import DataLoader, TensorDataset
>>> ds = TensorDataset(dg.arange(10.0).reshape(5, 2), dg.arange(5))
>>> [tuple(y.tolist()) for _, y in DataLoader(ds, batch_size=2)]
[(0, 1), (2, 3), (4,)]
"""
from __future__ import annotations

import bisect
import itertools
import math
import sys
import warnings
from collections.abc import Mapping, Sequence

import numpy as np

from ..ops import creation
from ..ops import shape as shape_ops
from ..ops import collective
from ..ops.random import Generator, rng_of
from ..tensor import Tensor
from .workers import WorkerInfo, WorkerIterator, WorkerPool, get_worker_info

__all__ = ["Dataset", "IterableDataset", "ChainDataset", "TensorDataset", "Subset",
           "ConcatDataset", "StackDataset", "random_split", "Sampler", "SequentialSampler", "RandomSampler",
           "SubsetRandomSampler", "WeightedRandomSampler", "BatchSampler", "DistributedSampler", "DataLoader",
           "default_collate", "default_convert", "get_worker_info", "WorkerInfo"]


# -- datasets -------------------------------------------------------------------------------
class Dataset:
    """A map-style dataset: subclasses define ``__getitem__(index)`` and ``__len__``."""

    def __getitem__(self, index):
        raise NotImplementedError("Subclasses of Dataset should implement __getitem__.")

    def __add__(self, other):
        return ConcatDataset([self, other])


class IterableDataset(Dataset):
    """A dataset that yields its samples (streams, generators): subclasses define
    ``__iter__``. The DataLoader batches them in order; there is no sampler."""

    def __iter__(self):
        raise NotImplementedError("Subclasses of IterableDataset should implement __iter__.")

    def __add__(self, other):
        return ChainDataset([self, other])


class ChainDataset(IterableDataset):
    """Iterable datasets one after the other (what ``a + b`` of two of them makes)."""

    def __init__(self, datasets):
        self.datasets = datasets

    def _checked(self):
        for d in self.datasets:
            if not isinstance(d, IterableDataset):
                raise AssertionError("ChainDataset only supports IterableDataset")
            yield d

    def __iter__(self):
        for d in self._checked():
            yield from d

    def __len__(self):
        return sum(len(d) for d in self._checked())


class TensorDataset(Dataset):
    """Samples are ``tuple(t[i] for t in tensors)``; the tensors share their first dim."""

    def __init__(self, *tensors: Tensor):
        sizes = [t.shape[0] for t in tensors]
        if len(set(sizes)) > 1:
            raise ValueError(f"Size mismatch between tensors: first dimensions {sizes} "
                             "must all be equal")
        self.tensors = tensors

    def __getitem__(self, index):
        return tuple(t[index] for t in self.tensors)

    def __len__(self):
        return self.tensors[0].shape[0]


class Subset(Dataset):
    """The samples of ``dataset`` at ``indices``, in that order."""

    def __init__(self, dataset, indices: Sequence[int]):
        self.dataset, self.indices = dataset, indices

    def __getitem__(self, idx):
        if isinstance(idx, list):
            return self.dataset[[self.indices[i] for i in idx]]
        return self.dataset[self.indices[idx]]

    def __len__(self):
        return len(self.indices)


class ConcatDataset(Dataset):
    """The samples of several datasets one after another."""

    def __init__(self, datasets):
        self.datasets = list(datasets)
        if not self.datasets:
            raise ValueError("datasets should not be an empty iterable")
        if any(isinstance(d, IterableDataset) for d in self.datasets):
            raise TypeError("ConcatDataset does not support IterableDataset")
        self.cumulative_sizes = list(itertools.accumulate(len(d) for d in self.datasets))

    def __len__(self):
        return self.cumulative_sizes[-1]

    def __getitem__(self, idx):
        if idx < 0:
            if -idx > len(self):
                raise ValueError("absolute value of index should not exceed dataset length")
            idx += len(self)
        which = bisect.bisect_right(self.cumulative_sizes, idx)
        start = self.cumulative_sizes[which - 1] if which else 0
        return self.datasets[which][idx - start]


class StackDataset(Dataset):
    """Several datasets of one length side by side: sample ``i`` is the tuple of their
    ``i``-th samples (datasets given by position) or the dict of them (by keyword), as
    torch's (a multi-modal set of images and captions, say)."""

    def __init__(self, *args, **kwargs):
        if bool(args) == bool(kwargs):
            raise ValueError("Supported either ``tuple``- (via ``args``) or ``dict``- (via "
                             "``kwargs``) like input/output, but both types are given."
                             if args else "At least one dataset should be passed")
        self.datasets = args or kwargs
        lengths = {len(d) for d in (args or kwargs.values())}
        if len(lengths) != 1:
            raise ValueError(f"Size mismatch between datasets: lengths {sorted(lengths)}")
        (self._length,) = lengths

    def __getitem__(self, index):
        if isinstance(self.datasets, dict):
            return {k: d[index] for k, d in self.datasets.items()}
        return tuple(d[index] for d in self.datasets)

    def __len__(self):
        return self._length


def random_split(dataset, lengths, generator=None) -> list[Subset]:
    """Split ``dataset`` into non-overlapping random subsets of the given lengths, or of
    the given fractions of its length (the remainder goes round-robin to the first
    subsets, as torch).

    >>> import dualgraph as dg
    >>> [len(s) for s in random_split(range(10), [0.5, 0.3, 0.2])]
    [5, 3, 2]
    """
    n = len(dataset)
    lengths = list(lengths)
    if math.isclose(sum(lengths), 1) and sum(lengths) <= 1:
        if any(not 0 <= f <= 1 for f in lengths):
            raise ValueError(f"Fractions {lengths} must each lie in [0, 1]")
        sizes = [int(math.floor(n * f)) for f in lengths]
        for i in range(n - sum(sizes)):
            sizes[i % len(sizes)] += 1
        for i, size in enumerate(sizes):
            if size == 0:
                warnings.warn(f"Length of split at index {i} is 0. This might result in "
                              "an empty dataset.", stacklevel=2)
        lengths = sizes
    if sum(lengths) != n:
        raise ValueError(f"Sum of input lengths {lengths} does not equal the length of the "
                         f"input dataset ({n})!")
    order = rng_of(generator).permutation(n).tolist()
    ends = itertools.accumulate(lengths)
    return [Subset(dataset, order[end - size:end]) for end, size in zip(ends, lengths)]


# -- samplers -------------------------------------------------------------------------------
class Sampler:
    """Yields dataset indices; subclasses define ``__iter__`` (and usually ``__len__``)."""

    def __init__(self, data_source=None):
        pass

    def __iter__(self):
        raise NotImplementedError


class SequentialSampler(Sampler):
    """0, 1, ..., len(data_source) - 1."""

    def __init__(self, data_source):
        self.data_source = data_source

    def __iter__(self):
        return iter(range(len(self.data_source)))

    def __len__(self):
        return len(self.data_source)


def _epoch_rng(generator) -> np.random.Generator:
    """The stream for one pass: ``generator``'s (which advances), or without one a fresh
    stream seeded from the global generator, so ``dg.manual_seed`` fixes every epoch."""
    if generator is not None:
        return rng_of(generator)
    return Generator(int(rng_of(None).integers(2**63))).rng


_DRAW_BLOCK = 4096   # indices drawn at a time with replacement


class RandomSampler(Sampler):
    """A random permutation of the indices each pass, or ``num_samples`` draws with
    replacement when ``replacement=True``."""

    def __init__(self, data_source, replacement: bool = False, num_samples: int | None = None,
                 generator=None):
        if not isinstance(replacement, bool):
            raise TypeError(f"replacement should be a boolean value, but got "
                            f"replacement={replacement}")
        self.data_source, self.replacement, self.generator = data_source, replacement, generator
        self._num_samples = num_samples
        if not isinstance(self.num_samples, int) or self.num_samples <= 0:
            raise ValueError(f"num_samples should be a positive integer value, but got "
                             f"num_samples={self.num_samples}")

    @property
    def num_samples(self) -> int:
        return len(self.data_source) if self._num_samples is None else self._num_samples

    def __iter__(self):
        """Drawn as consumed, a block at a time: ``num_samples`` may be far larger than
        memory holds (a "practically infinite" sampler)."""
        n, rng = len(self.data_source), _epoch_rng(self.generator)
        left = self.num_samples
        while left > 0:
            if self.replacement:
                block = rng.integers(0, n, min(left, _DRAW_BLOCK))
            else:
                block = rng.permutation(n)[:left]
            left -= len(block)
            yield from block.tolist()

    def __len__(self):
        return self.num_samples


class SubsetRandomSampler(Sampler):
    """The given indices in a random order each pass."""

    def __init__(self, indices: Sequence[int], generator=None):
        self.indices, self.generator = indices, generator

    def __iter__(self):
        order = _epoch_rng(self.generator).permutation(len(self.indices))
        return (self.indices[i] for i in order.tolist())

    def __len__(self):
        return len(self.indices)


class WeightedRandomSampler(Sampler):
    """``num_samples`` indices drawn with probability proportional to ``weights`` (with
    replacement by default), as torch's: oversampling rare classes."""

    def __init__(self, weights, num_samples: int, replacement: bool = True, generator=None):
        if not isinstance(num_samples, int) or isinstance(num_samples, bool) or \
                num_samples <= 0:
            raise ValueError(f"num_samples should be a positive integer value, but got "
                             f"num_samples={num_samples}")
        w = np.asarray(weights.tolist() if hasattr(weights, "tolist") else weights,
                       dtype=np.float64).reshape(-1)
        if w.size == 0 or (w < 0).any() or not np.isfinite(w).all() or w.sum() <= 0:
            raise ValueError(f"WeightedRandomSampler: weights must be finite, non-negative "
                             f"and not all zero, got {w.tolist()[:8]}")
        if not replacement and num_samples > np.count_nonzero(w):
            raise ValueError(f"WeightedRandomSampler: {num_samples} samples without "
                             f"replacement, but only {np.count_nonzero(w)} weights are > 0")
        self.weights, self.num_samples = w, num_samples
        self.replacement, self.generator = replacement, generator

    def __iter__(self):
        rng, p = _epoch_rng(self.generator), self.weights / self.weights.sum()
        if not self.replacement:
            yield from rng.choice(len(p), self.num_samples, replace=False, p=p).tolist()
            return
        left = self.num_samples
        while left > 0:
            block = rng.choice(len(p), min(left, _DRAW_BLOCK), p=p)
            left -= len(block)
            yield from block.tolist()

    def __len__(self):
        return self.num_samples


class DistributedSampler(Sampler):
    """Rank ``rank``'s share of the indices, as torch's: every ``num_replicas``-th index of
    one order common to all ranks (shuffled from ``seed + epoch`` when ``shuffle``; the
    numbers differ from torch's for the same seed). Without ``drop_last`` the order is
    padded by repeating its start so that every rank gets as many; with it the tail is
    dropped. Call ``set_epoch`` before each epoch for a new order.

    >>> sampler = DistributedSampler(dataset)      # ranks from dg.distributed
    >>> loader = DataLoader(dataset, batch_size=32, sampler=sampler)
    >>> for epoch in range(3):
    ...     sampler.set_epoch(epoch)
    """

    def __init__(self, dataset, num_replicas: int | None = None, rank: int | None = None,
                 shuffle: bool = True, seed: int = 0, drop_last: bool = False):
        if num_replicas is None or rank is None:
            world_rank, world_size = collective.world()
            num_replicas = world_size if num_replicas is None else num_replicas
            rank = world_rank if rank is None else rank
        if not 0 <= rank < num_replicas:
            raise ValueError(f"Invalid rank {rank}, rank should be in the interval "
                             f"[0, {num_replicas - 1}]")
        self.dataset, self.num_replicas, self.rank = dataset, num_replicas, rank
        self.shuffle, self.seed, self.drop_last, self.epoch = shuffle, seed, drop_last, 0
        n = len(dataset)
        if drop_last and n % num_replicas:
            self.num_samples = math.ceil((n - num_replicas) / num_replicas)
        else:
            self.num_samples = math.ceil(n / num_replicas)
        self.total_size = self.num_samples * num_replicas

    def __iter__(self):
        n = len(self.dataset)
        if self.shuffle:
            order = np.random.default_rng(self.seed + self.epoch).permutation(n)
        else:
            order = np.arange(n)
        if self.drop_last:
            order = order[:self.total_size]
        else:
            order = np.resize(order, self.total_size)   # repeats from the start
        return iter(order[self.rank:self.total_size:self.num_replicas].tolist())

    def __len__(self):
        return self.num_samples

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch


class BatchSampler(Sampler):
    """Groups a sampler's indices into lists of ``batch_size`` (the last one shorter unless
    ``drop_last``)."""

    def __init__(self, sampler, batch_size: int, drop_last: bool):
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
            raise ValueError(f"batch_size should be a positive integer value, but got "
                             f"batch_size={batch_size}")
        if not isinstance(drop_last, bool):
            raise ValueError(f"drop_last should be a boolean value, but got "
                             f"drop_last={drop_last}")
        self.sampler, self.batch_size, self.drop_last = sampler, batch_size, drop_last

    def __iter__(self):
        yield from _batched(iter(self.sampler), self.batch_size, self.drop_last)

    def __len__(self):
        return _num_batches(len(self.sampler), self.batch_size, self.drop_last)


def _batched(iterator, size: int, drop_last: bool):
    while batch := list(itertools.islice(iterator, size)):
        if len(batch) < size and drop_last:
            return
        yield batch


def _num_batches(n: int, size: int, drop_last: bool) -> int:
    return n // size if drop_last else -(-n // size)


# -- collation ------------------------------------------------------------------------------
_COLLATE_ERROR = ("default_collate: batch must contain tensors, numpy arrays, numbers, "
                  "dicts or lists; found {}")


def default_collate(batch):
    """Merge a list of samples into a batch, as torch's ``default_collate``: tensors (and
    NumPy arrays) are stacked along a new first dim, Python floats become a float64
    tensor, ints an int64 tensor, bools a bool tensor; strings stay a list; dicts,
    tuples/lists and namedtuples are collated field by field (tuples and lists come back
    as lists, as torch).
    """
    elem = batch[0]
    if isinstance(elem, Tensor):
        return shape_ops.stack(list(batch), 0)
    if isinstance(elem, (np.ndarray, np.generic)):
        if elem.dtype.kind in "SaUO":
            raise TypeError(_COLLATE_ERROR.format(elem.dtype))
        if elem.ndim == 0:
            return creation.as_tensor(np.stack(batch))
        return default_collate([creation.as_tensor(b) for b in batch])
    if isinstance(elem, float):
        return creation.tensor(batch, dtype=np.float64)
    if isinstance(elem, int):  # bool is an int: a list of bools makes a bool tensor
        return creation.tensor(batch)
    if isinstance(elem, (str, bytes)):
        return batch
    if isinstance(elem, Mapping):
        collated = {key: default_collate([d[key] for d in batch]) for key in elem}
        return _rebuild(type(elem), collated, dict)
    if isinstance(elem, tuple) and hasattr(elem, "_fields"):  # namedtuple
        return type(elem)(*(default_collate(list(s)) for s in zip(*batch)))
    if isinstance(elem, Sequence):
        if any(len(sample) != len(elem) for sample in batch):
            raise RuntimeError("each element in list of batch should be of equal size")
        collated = [default_collate(list(s)) for s in zip(*batch)]
        return collated if isinstance(elem, tuple) else _rebuild(type(elem), collated, list)
    raise TypeError(_COLLATE_ERROR.format(type(elem)))


def _rebuild(kind, value, fallback):
    """Keep the sample's container type (OrderedDict, a list subclass) when it can be built
    from a plain dict/list; otherwise the plain one."""
    try:
        return kind(value)
    except TypeError:
        return fallback(value)


def default_convert(data):
    """What the DataLoader applies to each sample when batching is off (``batch_size=None``):
    NumPy arrays become tensors, containers are converted element-wise (tuples come back
    as lists, as torch), the rest is kept."""
    if isinstance(data, np.ndarray) and data.dtype.kind not in "SaUO":
        return creation.as_tensor(data)
    if isinstance(data, Mapping):
        return _rebuild(type(data), {k: default_convert(v) for k, v in data.items()}, dict)
    if isinstance(data, tuple) and hasattr(data, "_fields"):
        return type(data)(*(default_convert(d) for d in data))
    if isinstance(data, tuple):  # tuples become lists, as in default_collate (and torch)
        return [default_convert(d) for d in data]
    if isinstance(data, list):
        return _rebuild(type(data), [default_convert(d) for d in data], list)
    return data


# -- the loader -----------------------------------------------------------------------------
class DataLoader:
    """Iterate over ``dataset`` in batches.

    ``shuffle=True`` draws a new order each epoch from ``generator`` (a ``dg.Generator``
    for a reproducible stream) or, without one, from the global generator;
    ``sampler``/``batch_sampler`` choose the indices yourself. ``collate_fn`` merges the
    samples of a batch (default :func:`default_collate`). ``batch_size=None`` turns
    batching off. ``num_workers > 0`` loads batches in that many worker processes
    (utils/workers.py: ``worker_init_fn``, ``prefetch_factor``, ``persistent_workers``,
    ``timeout``, ``multiprocessing_context`` as torch's). ``pin_memory`` is accepted and
    ignored (there is no device to pin for).
    """

    def __init__(self, dataset, batch_size: int | None = 1, shuffle: bool | None = None,
                 sampler=None, batch_sampler=None, num_workers: int = 0, collate_fn=None,
                 pin_memory: bool = False, drop_last: bool = False, timeout: float = 0,
                 worker_init_fn=None, multiprocessing_context=None, generator=None, *,
                 prefetch_factor: int | None = None, persistent_workers: bool = False,
                 pin_memory_device: str = ""):
        if num_workers < 0:
            raise ValueError("num_workers option should be non-negative; use "
                             "num_workers=0 to disable multiprocessing.")
        if timeout < 0:
            raise ValueError("timeout option should be non-negative")
        if num_workers == 0 and prefetch_factor is not None:
            raise ValueError("prefetch_factor option could only be specified in "
                             "multiprocessing.let num_workers > 0 to enable multiprocessing, "
                             "otherwise set prefetch_factor to None.")
        if persistent_workers and num_workers == 0:
            raise ValueError("persistent_workers option needs num_workers > 0")
        self.dataset, self.num_workers, self.generator = dataset, num_workers, generator
        self.pin_memory, self.timeout, self.worker_init_fn = pin_memory, timeout, worker_init_fn
        self.multiprocessing_context = multiprocessing_context
        self.prefetch_factor = 2 if prefetch_factor is None and num_workers else prefetch_factor
        self.persistent_workers, self._pool = persistent_workers, None
        if isinstance(dataset, IterableDataset):
            for name, value in (("shuffle", shuffle), ("sampler", sampler),
                                ("batch_sampler", batch_sampler)):
                if value not in (None, False):
                    raise ValueError(f"DataLoader with IterableDataset: expected unspecified "
                                     f"{name} option, but got {name}={value}")
        elif batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ValueError("batch_sampler option is mutually exclusive with "
                                 "batch_size, shuffle, sampler, and drop_last")
            batch_size, drop_last = None, False
        elif batch_size is None and drop_last:
            raise ValueError("batch_size=None option disables auto-batching and is mutually "
                             "exclusive with drop_last")
        if sampler is not None and shuffle:
            raise ValueError("sampler option is mutually exclusive with shuffle")
        if sampler is None and not isinstance(dataset, IterableDataset):
            sampler = (RandomSampler(dataset, generator=generator) if shuffle
                       else SequentialSampler(dataset))
        if batch_sampler is None and batch_size is not None and sampler is not None:
            batch_sampler = BatchSampler(sampler, batch_size, drop_last)
        self.batch_size, self.drop_last = batch_size, drop_last
        self.sampler, self.batch_sampler = sampler, batch_sampler
        if collate_fn is None:
            batching = batch_size is not None or batch_sampler is not None
            collate_fn = default_collate if batching else default_convert
        self.collate_fn = collate_fn

    def __iter__(self):
        # (a seed for the workers is drawn at every pass, workers or not, as torch draws
        # it: a shuffled order does not depend on num_workers)
        seed = int(rng_of(self.generator).integers(2**63 - max(self.num_workers, 1)))
        if self.num_workers:
            return self._through_workers(seed)
        if isinstance(self.dataset, IterableDataset):
            samples = iter(self.dataset)
            if self.batch_size is None:
                return map(self.collate_fn, samples)
            return map(self.collate_fn, _batched(samples, self.batch_size, self.drop_last))
        if self.batch_sampler is None:
            return (self.collate_fn(self.dataset[i]) for i in self.sampler)
        return (self.collate_fn([self.dataset[i] for i in batch])
                for batch in self.batch_sampler)

    def _through_workers(self, seed: int) -> WorkerIterator:
        """A pass through the worker processes (started now with seeds from ``seed``, or
        kept from the last pass when ``persistent_workers``)."""
        if self._pool is None or not self._pool.processes:
            self._pool = WorkerPool(self, seed)
        if isinstance(self.dataset, IterableDataset):
            return WorkerIterator(self, self._pool, None)
        indices = self.batch_sampler if self.batch_sampler is not None else self.sampler
        return WorkerIterator(self, self._pool, iter(indices))

    def _worker_parts(self) -> tuple:
        """``(dataset, fetch)`` for a worker: ``fetch`` makes a batch from a batch of
        indices (a sample from an index when batching is off), or from an
        IterableDataset's iterator the stream of its batches."""
        if isinstance(self.dataset, IterableDataset):
            return self.dataset, _StreamFetch(self.collate_fn, self.batch_size, self.drop_last)
        batched = self.batch_sampler is not None
        return self.dataset, _IndexFetch(self.dataset, self.collate_fn, batched)

    def __len__(self):
        if isinstance(self.dataset, IterableDataset):
            n = len(self.dataset)
            if self.batch_size is None:
                return n
            return _num_batches(n, self.batch_size, self.drop_last)
        if self.batch_sampler is None:
            return len(self.sampler)
        return len(self.batch_sampler)


class _IndexFetch:
    """A worker's fetch for a map-style dataset (a class, not a closure: picklable for
    ``spawn``)."""

    def __init__(self, dataset, collate_fn, batched: bool):
        self.dataset, self.collate_fn, self.batched = dataset, collate_fn, batched

    def __call__(self, index):
        if self.batched:
            return self.collate_fn([self.dataset[i] for i in index])
        return self.collate_fn(self.dataset[index])


class _StreamFetch:
    """A worker's batches from its copy of an IterableDataset's stream."""

    def __init__(self, collate_fn, batch_size, drop_last: bool):
        self.collate_fn, self.batch_size, self.drop_last = collate_fn, batch_size, drop_last

    def __call__(self, samples):
        if self.batch_size is None:
            return map(self.collate_fn, samples)
        return map(self.collate_fn, _batched(samples, self.batch_size, self.drop_last))


# torch's submodule paths (``torch.utils.data.dataloader.DataLoader``, ``...sampler``,
# ``...dataset``) all name this one module, registered under each so that imports work
dataloader = dataset = sampler = sys.modules[__name__]
for _name in ("dataloader", "dataset", "sampler"):
    sys.modules[f"{__name__}.{_name}"] = sys.modules[__name__]
