"""DataLoader worker processes (dualgraph/utils/workers.py) against the single-process
loader and against torch's DataLoader: order, seeding, worker_init_fn, sharding an
IterableDataset, persistent workers, and failures (an exception, a dead worker, a
timeout) raised in the main process instead of hanging."""
from __future__ import annotations

import os
import random
import time

import numpy as np
import pytest
import torch

import dualgraph as dg
from dualgraph.utils.data import (DataLoader, Dataset, IterableDataset, RandomSampler,
                                  TensorDataset, get_worker_info)


def _dataset():
    return TensorDataset(dg.arange(60.0).reshape(30, 2), dg.arange(30))


@pytest.mark.parametrize("shuffle", [False, True])
def test_batches_come_in_the_samplers_order(shuffle):
    runs = []
    for workers in (0, 2):
        loader = DataLoader(_dataset(), batch_size=4, shuffle=shuffle, num_workers=workers,
                            generator=dg.Generator().manual_seed(3))
        runs.append([[x.tolist(), y.tolist()] for _ in range(2) for x, y in loader])
    assert runs[0] == runs[1]
    assert len(runs[0]) == 2 * 8


class _WhoAmI(Dataset):
    """Each sample says which worker made it, its seed and its first random draws."""

    def __len__(self):
        return 8

    def __getitem__(self, i):
        info = get_worker_info()
        return np.array([info.id, info.seed % 1000, random.random(), np.random.rand(),
                         float(dg.rand(1)), float(os.environ["DUALGRAPH_NUM_THREADS"])])


def _mark_started(worker_id):
    os.environ["DG_TEST_STARTED"] = str(worker_id)
    assert get_worker_info().id == worker_id


def test_seeds_worker_info_and_worker_init_fn():
    loader = DataLoader(_WhoAmI(), batch_size=2, num_workers=2,
                        worker_init_fn=_mark_started)
    rows = np.concatenate([b.numpy() for b in loader])
    ids, seeds = rows[:, 0], rows[:, 1]
    assert ids.tolist() == [0, 0, 1, 1, 0, 0, 1, 1]   # round-robin, as torch
    assert (seeds[ids == 1] - seeds[ids == 0] + 1000) % 1000 == pytest.approx(1)
    # the two workers' random streams differ (Python, NumPy and dualgraph seeded apart)
    assert len({tuple(r) for r in rows[[0, 2], 2:5]}) == 2
    assert (rows[:, 5] == 1).all()       # one compute thread per worker
    assert get_worker_info() is None     # (in the main process)


class _Shards(IterableDataset):
    def __init__(self, n):
        self.n = n

    def __iter__(self):
        info = get_worker_info()
        start, step = (0, 1) if info is None else (info.id, info.num_workers)
        return iter(range(start, self.n, step))


class _TorchShards(torch.utils.data.IterableDataset):
    def __init__(self, n):
        self.n = n

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        return iter(range(info.id, self.n, info.num_workers))


@pytest.mark.parametrize("n, batch, drop_last", [(10, 2, False), (11, 3, True), (7, 4, False)])
def test_an_iterable_dataset_interleaves_its_workers_as_torch(n, batch, drop_last):
    ours = DataLoader(_Shards(n), batch_size=batch, num_workers=2, drop_last=drop_last)
    theirs = torch.utils.data.DataLoader(_TorchShards(n), batch_size=batch, num_workers=2,
                                         drop_last=drop_last)
    assert [b.tolist() for b in ours] == [b.tolist() for b in theirs]


def test_persistent_workers_live_across_epochs():
    loader = DataLoader(_Shards(6), batch_size=2, num_workers=2, persistent_workers=True)
    first = [b.tolist() for b in loader]
    pids = [p.pid for p in loader._pool.processes]
    second = [b.tolist() for b in loader]
    assert first == second == [[0, 2], [1, 3], [4], [5]]
    assert [p.pid for p in loader._pool.processes] == pids
    loader._pool.shutdown()
    plain = DataLoader(_Shards(6), batch_size=2, num_workers=2)
    assert [b.tolist() for b in plain] == first and plain._pool is None


def test_a_break_mid_epoch_and_a_new_pass_with_persistent_workers():
    loader = DataLoader(_dataset(), batch_size=3, num_workers=2, persistent_workers=True)
    for i, (_, y) in enumerate(loader):
        if i == 1:
            break
    assert [y.tolist() for _, y in loader][0] == [0, 1, 2]   # the old pass's results dropped
    loader._pool.shutdown()


class _Faulty(Dataset):
    def __init__(self, how):
        self.how = how

    def __len__(self):
        return 8

    def __getitem__(self, i):
        if i == 5:
            if self.how == "raise":
                raise KeyError(f"no sample {i}")
            if self.how == "die":
                os._exit(3)
            time.sleep(30)
        return np.float32(i)


def test_an_exception_in_a_worker_is_raised_with_its_traceback():
    with pytest.raises(KeyError, match=r"(?s)Caught KeyError in DataLoader worker process 1"
                                       r".*no sample 5"):
        list(DataLoader(_Faulty("raise"), batch_size=1, num_workers=2))


def test_a_dead_worker_is_an_error_not_a_hang():
    start = time.monotonic()
    with pytest.raises(RuntimeError, match="exited unexpectedly"):
        list(DataLoader(_Faulty("die"), batch_size=1, num_workers=2))
    assert time.monotonic() - start < 20


def test_a_batch_slower_than_the_timeout_is_an_error():
    start = time.monotonic()
    with pytest.raises(RuntimeError, match="timed out after 1 seconds"):
        list(DataLoader(_Faulty("sleep"), batch_size=1, num_workers=2, timeout=1))
    assert time.monotonic() - start < 20


def test_arguments_are_checked_as_torch_checks_them():
    for kwargs, match in [(dict(prefetch_factor=2), "prefetch_factor option could only"),
                          (dict(persistent_workers=True), "persistent_workers option needs"),
                          (dict(timeout=-1), "timeout option should be non-negative")]:
        for lib in (torch.utils.data, dg.utils.data):
            with pytest.raises(ValueError, match=match):
                lib.DataLoader([1, 2], **kwargs)


def test_spawned_workers():
    loader = DataLoader(_dataset(), batch_size=8, num_workers=1,
                        multiprocessing_context="spawn")
    assert [y.tolist()[0] for _, y in loader] == [0, 8, 16, 24]


def test_random_sampler_with_replacement_draws_as_it_goes():
    sampler = RandomSampler(range(10), replacement=True, num_samples=10**12,
                            generator=dg.Generator().manual_seed(0))
    it = iter(sampler)
    draws = [next(it) for _ in range(10_000)]
    assert len(sampler) == 10**12 and set(draws) == set(range(10))
    exact = list(RandomSampler(range(7), num_samples=17))
    assert len(exact) == 17 and sorted(exact[:14]) == sorted(list(range(7)) * 2)
