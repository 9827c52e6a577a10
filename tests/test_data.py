"""dg.utils.data against torch.utils.data: datasets, samplers, DataLoader, default_collate."""
from __future__ import annotations

from collections import OrderedDict, namedtuple

import numpy as np
import pytest
import torch
import torch.utils.data as tdata

import dualgraph as dg
from dualgraph.utils import data

X = np.arange(20, dtype=np.float32).reshape(10, 2)
Y = np.arange(10)


def as_np(value):
    """A batch (nested containers of tensors) with every tensor turned into NumPy."""
    if isinstance(value, (dg.Tensor, torch.Tensor)):
        return value.numpy(), str(value.dtype).split(".")[-1]
    if isinstance(value, dict):
        return type(value).__name__, {k: as_np(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value).__name__, [as_np(v) for v in value]
    return value


def assert_same(a, b):
    def flat(v):
        if isinstance(v, tuple) and len(v) == 2 and isinstance(v[0], np.ndarray):
            return [("array", v[0].tolist(), str(v[0].dtype), v[1])]
        if isinstance(v, tuple):
            return [v[0]] + flat(v[1])
        if isinstance(v, dict):
            return [x for k, item in v.items() for x in [k] + flat(item)]
        if isinstance(v, list):
            return [x for item in v for x in flat(item)]
        return [v]
    assert flat(as_np(a)) == flat(as_np(b))


def loaders(**kwargs):
    ours = data.DataLoader(data.TensorDataset(dg.tensor(X), dg.tensor(Y)), **kwargs)
    theirs = tdata.DataLoader(tdata.TensorDataset(torch.tensor(X), torch.tensor(Y)), **kwargs)
    return ours, theirs


@pytest.mark.parametrize("kwargs", [dict(), dict(batch_size=3), dict(batch_size=3, drop_last=True),
                                    dict(batch_size=5), dict(batch_size=20),
                                    dict(batch_size=None)])
def test_sequential_batches_match_torch(kwargs):
    ours, theirs = loaders(**kwargs)
    assert len(ours) == len(theirs)
    batches = list(ours)
    assert len(batches) == len(ours)
    for a, b in zip(batches, theirs, strict=True):
        assert_same(a, b)


def test_shuffle_is_a_permutation_each_epoch_and_seeded_by_generator():
    ds = data.TensorDataset(dg.tensor(Y))

    def epoch(loader):
        return np.concatenate([b[0].numpy() for b in loader]).tolist()

    loader = data.DataLoader(ds, batch_size=4, shuffle=True, generator=dg.Generator(5))
    first, second = epoch(loader), epoch(loader)
    assert sorted(first) == sorted(second) == Y.tolist()
    assert first != second and first != Y.tolist()  # a new order each epoch
    replay = data.DataLoader(ds, batch_size=4, shuffle=True, generator=dg.Generator(5))
    assert [epoch(replay), epoch(replay)] == [first, second]
    dg.manual_seed(11)
    global_a = epoch(data.DataLoader(ds, batch_size=4, shuffle=True))
    dg.manual_seed(11)
    assert epoch(data.DataLoader(ds, batch_size=4, shuffle=True)) == global_a


def test_drop_last_lengths():
    for n, bs in [(10, 3), (10, 5), (3, 5)]:
        for drop_last in (False, True):
            ours, theirs = (lib.DataLoader(list(range(n)), batch_size=bs, drop_last=drop_last)
                            for lib in (data, tdata))
            assert len(ours) == len(theirs) == len(list(ours))
            assert [b.tolist() for b in ours] == [b.tolist() for b in theirs]


Point = namedtuple("Point", ["x", "y"])


@pytest.mark.parametrize("make", [
    lambda lib, i: (lib.tensor([i, i + 1.0]), i),
    lambda lib, i: [float(i), i, bool(i % 2)],
    lambda lib, i: {"x": lib.ones(2) * i, "meta": {"id": i, "name": f"s{i}"}},
    lambda lib, i: OrderedDict(b=i, a=np.full((2,), i, dtype=np.float32)),
    lambda lib, i: Point(np.float64(i), np.int32(i)),
    lambda lib, i: (np.arange(3, dtype=np.int64) + i, [np.float32(i)]),
], ids=["tuple", "list_numbers", "nested_dict", "ordered_dict_numpy", "namedtuple", "numpy"])
def test_default_collate_matches_torch(make):
    ours = data.default_collate([make(dg, i) for i in range(3)])
    theirs = tdata.default_collate([make(torch, i) for i in range(3)])
    assert_same(ours, theirs)


def test_default_collate_errors():
    with pytest.raises(RuntimeError, match="each element in list of batch should be of equal"):
        data.default_collate([[1, 2], [3]])
    with pytest.raises(TypeError, match="batch must contain tensors, numpy arrays, numbers"):
        data.default_collate([object(), object()])


def test_custom_collate_and_samplers():
    ds = list(range(10))
    loader = data.DataLoader(ds, batch_size=4, collate_fn=lambda b: sum(b))
    assert list(loader) == [6, 22, 17]
    sampler = data.SubsetRandomSampler([1, 3, 5], generator=dg.Generator(0))
    assert sorted(data.DataLoader(ds, sampler=sampler, batch_size=None)) == [1, 3, 5]
    batches = data.BatchSampler(data.SequentialSampler(ds), 4, drop_last=False)
    assert list(batches) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]] and len(batches) == 3
    loader = data.DataLoader(ds, batch_sampler=[[9, 0], [5]])
    assert [b.tolist() for b in loader] == [[9, 0], [5]]
    with_replacement = data.RandomSampler(ds, replacement=True, num_samples=50,
                                          generator=dg.Generator(1))
    drawn = list(with_replacement)
    assert len(drawn) == 50 and set(drawn) <= set(ds) and len(set(drawn)) < 50
    longer = list(data.RandomSampler(ds, num_samples=25, generator=dg.Generator(1)))
    assert len(longer) == 25 and sorted(longer[:10]) == ds and sorted(longer[10:20]) == ds


def test_iterable_dataset_batches_in_order():
    class Stream(data.IterableDataset):
        def __iter__(self):
            return iter(range(7))

        def __len__(self):
            return 7

    loader = data.DataLoader(Stream(), batch_size=3)
    assert [b.tolist() for b in loader] == [[0, 1, 2], [3, 4, 5], [6]] and len(loader) == 3
    assert len(data.DataLoader(Stream(), batch_size=3, drop_last=True)) == 2
    with pytest.raises(ValueError, match="expected unspecified shuffle option"):
        data.DataLoader(Stream(), shuffle=True)


def test_iterable_datasets_chained_as_torch_chains_them():
    """(ChainDataset was missing, and ``a + b`` of two iterable datasets raised.)"""
    class Stream(data.IterableDataset):
        def __init__(self, items):
            self.items = items

        def __iter__(self):
            return iter(self.items)

        def __len__(self):
            return len(self.items)

    both = Stream([1, 2]) + Stream([3])
    assert isinstance(both, data.ChainDataset) and list(both) == [1, 2, 3] and len(both) == 3
    loader = data.DataLoader(data.ChainDataset([Stream([0, 1, 2]), both]), batch_size=4)
    assert [b.tolist() for b in loader] == [[0, 1, 2, 1], [2, 3]]
    with pytest.raises(AssertionError, match="only supports IterableDataset"):
        list(data.ChainDataset([[1, 2]]))


def test_loader_argument_errors():
    ds = list(range(4))
    with pytest.raises(ValueError, match="num_workers option should be non-negative"):
        data.DataLoader(ds, num_workers=-1)
    with pytest.raises(ValueError, match="sampler option is mutually exclusive with shuffle"):
        data.DataLoader(ds, sampler=data.SequentialSampler(ds), shuffle=True)
    with pytest.raises(ValueError, match="batch_sampler option is mutually exclusive"):
        data.DataLoader(ds, batch_sampler=[[0]], batch_size=2)
    with pytest.raises(ValueError, match="batch_size=None option disables auto-batching"):
        data.DataLoader(ds, batch_size=None, drop_last=True)
    with pytest.raises(ValueError, match="batch_size should be a positive integer"):
        data.BatchSampler(ds, 0, False)


def test_datasets_subset_concat_and_tensor_dataset():
    ds = data.TensorDataset(dg.tensor(X), dg.tensor(Y))
    x, y = ds[3]
    assert x.tolist() == [6.0, 7.0] and y.item() == 3 and len(ds) == 10
    with pytest.raises(ValueError, match="Size mismatch between tensors"):
        data.TensorDataset(dg.zeros(3), dg.zeros(4))
    sub = data.Subset(list("abcdef"), [4, 0, 2])
    assert [sub[i] for i in range(len(sub))] == ["e", "a", "c"]
    both = data.ConcatDataset([list("ab"), list("cde")])
    assert len(both) == 5 and [both[i] for i in range(5)] == list("abcde") and both[-1] == "e"
    assert len(sub + both) == 8


@pytest.mark.parametrize("lengths,sizes", [([3, 7], [3, 7]), ([0.5, 0.5], [5, 5]),
                                           ([0.3, 0.3, 0.4], [3, 3, 4]),
                                           ([0.33, 0.33, 0.34], [4, 3, 3]), ([1.0], [10])])
def test_random_split_sizes_match_torch(lengths, sizes):
    ours = data.random_split(range(10), lengths, generator=dg.Generator(0))
    theirs = tdata.random_split(range(10), lengths, generator=torch.Generator().manual_seed(0))
    assert [len(s) for s in ours] == [len(s) for s in theirs] == sizes
    assert sorted(i for s in ours for i in s) == list(range(10))


def test_random_split_is_seeded_and_validates():
    a = data.random_split(range(10), [4, 6], generator=dg.Generator(3))
    b = data.random_split(range(10), [4, 6], generator=dg.Generator(3))
    assert [list(s) for s in a] == [list(s) for s in b]
    with pytest.raises(ValueError, match="does not equal the length of the input dataset"):
        data.random_split(range(10), [3, 3])


def test_import_path():
    assert dg.utils.data.DataLoader is data.DataLoader
