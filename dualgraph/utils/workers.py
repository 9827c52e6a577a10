"""Worker processes for the DataLoader (``num_workers > 0``), as ``torch.utils.data``'s.

Each worker is a process with its own copy of the dataset (forked by default on Linux,
or ``multiprocessing_context="spawn"``). The loader's sampler runs in the main process;
batches of indices go to the workers round-robin, at most ``prefetch_factor`` ahead per
worker; each worker fetches and collates its batch and sends it back; the main process
yields the batches in the sampler's order whatever order they arrive in. An
``IterableDataset`` is iterated by every worker (shard it with :func:`get_worker_info`),
and its batches interleave worker by worker, as torch's do.

Each worker seeds Python's ``random``, NumPy's global generator and dualgraph's with
``base_seed + worker_id`` (``base_seed`` drawn per epoch from the loader's generator, or the
global one) and runs ``worker_init_fn(worker_id)``; it computes on one thread. A failure
in a worker is raised in the main process with the worker's traceback; a worker that dies
(killed, out of memory) or a batch slower than ``timeout`` seconds is an error rather than
a hang. With ``persistent_workers=True`` the processes live across epochs.

Results travel through ``multiprocessing`` queues, which pickle them: this is the loader
talking to processes it started itself, never a file being loaded.
"""
from __future__ import annotations

import multiprocessing
import os
import queue
import random
import time
import traceback
from dataclasses import dataclass

import numpy as np

from ..ops.random import manual_seed

_info = None   # this process's WorkerInfo, in a worker


@dataclass(frozen=True)
class WorkerInfo:
    """What a worker knows of itself: ``id`` (0-based), ``num_workers``, ``seed`` and its
    copy of the ``dataset``."""
    id: int
    num_workers: int
    seed: int
    dataset: object


def get_worker_info() -> WorkerInfo | None:
    """The current worker's :class:`WorkerInfo` inside a DataLoader worker, else None; an
    ``IterableDataset`` shards its stream with it.

    >>> get_worker_info() is None    # (the main process)
    True
    """
    return _info


@dataclass(frozen=True)
class _Failure:
    """An exception raised in a worker, carried back as its type and traceback text."""
    kind: type
    worker: int
    text: str

    def reraise(self):
        message = (f"Caught {self.kind.__name__} in DataLoader worker process {self.worker}."
                   f"\nOriginal {self.text}")
        if issubclass(self.kind, KeyError):   # (its str is the repr of its argument)
            message = _Verbatim(message)
        try:
            error = self.kind(message)
        except Exception:   # (an exception type that takes other arguments)
            error = RuntimeError(message)
        raise error


class _Verbatim(str):
    """A message whose repr is itself, so a KeyError prints its traceback's lines."""

    def __repr__(self):
        return str(self)


_EXHAUSTED = "exhausted"   # an IterableDataset worker's stream has ended


def _worker_loop(loader_parts, tasks, results, worker_id, num_workers, seed, init_fn):
    """A worker: take ``(epoch, task, indices)`` from ``tasks``, put ``(epoch, task,
    batch)`` on ``results``; ``("reset", epoch)`` starts an IterableDataset's stream
    again; None stops."""
    global _info
    os.environ["DUALGRAPH_NUM_THREADS"] = "1"   # (the loops' thread count: dg.set_num_threads)
    random.seed(seed)
    np.random.seed(seed % 2**32)
    manual_seed(seed)
    dataset, fetch = loader_parts
    _info = WorkerInfo(worker_id, num_workers, seed, dataset)
    stream = None
    try:
        if init_fn is not None:
            init_fn(worker_id)
    except Exception as e:
        results.put((None, None, _Failure(type(e), worker_id, traceback.format_exc())))
        return
    while True:
        task = tasks.get()
        if task is None:
            return
        if task[0] == "reset":
            stream = None
            continue
        epoch, task_id, indices = task
        try:
            if indices is None:   # an IterableDataset: its next batch
                if stream is None:
                    stream = fetch(iter(dataset))
                batch = next(stream, _EXHAUSTED)
            else:
                batch = fetch(indices)
            results.put((epoch, task_id, batch))
        except Exception as e:
            results.put((epoch, task_id,
                         _Failure(type(e), worker_id, traceback.format_exc())))


class WorkerPool:
    """The processes and queues of one DataLoader (kept across epochs when persistent)."""

    def __init__(self, loader, seed: int):
        context = loader.multiprocessing_context
        if context is None or isinstance(context, str):
            context = multiprocessing.get_context(context)
        self.results = context.Queue()
        self.tasks, self.processes = [], []
        for worker_id in range(loader.num_workers):
            tasks = context.Queue()
            process = context.Process(
                target=_worker_loop, daemon=True,
                args=(loader._worker_parts(), tasks, self.results, worker_id,
                      loader.num_workers, seed + worker_id, loader.worker_init_fn))
            process.start()
            self.tasks.append(tasks)
            self.processes.append(process)
        self.epoch = 0

    def check_alive(self) -> None:
        dead = [p for p in self.processes if not p.is_alive()]
        if dead:
            pids = ", ".join(str(p.pid) for p in dead)
            codes = ", ".join(str(p.exitcode) for p in dead)
            self.shutdown()
            raise RuntimeError(f"DataLoader worker (pid(s) {pids}) exited unexpectedly "
                               f"with exit code(s) {codes}; a worker killed by a signal "
                               "(out of memory?) or calling os._exit ends the epoch")

    def shutdown(self) -> None:
        """Stop the workers (politely, then by force) and release the queues."""
        for tasks, process in zip(self.tasks, self.processes):
            if process.is_alive():
                try:
                    tasks.put(None)
                except (ValueError, OSError):
                    pass
        deadline = time.monotonic() + 5.0
        for process in self.processes:
            process.join(max(0.0, deadline - time.monotonic()))
            if process.is_alive():
                process.terminate()
                process.join(1.0)
        for q in (*self.tasks, self.results):
            q.cancel_join_thread()
            q.close()
        self.processes = []


class WorkerIterator:
    """One pass over the loader through its workers: batches in the sampler's order."""

    def __init__(self, loader, pool: WorkerPool, index_batches):
        self.loader, self.pool = loader, pool
        pool.epoch += 1
        self.epoch = pool.epoch
        self.iterable = index_batches is None
        if self.iterable:
            for tasks in pool.tasks:
                tasks.put(("reset", self.epoch))
        self.index_batches = index_batches
        self.active = list(range(len(pool.tasks)))   # workers with data left
        self.sent = self.next = 0
        self.owner: dict[int, int] = {}     # task -> worker
        self.arrived: dict[int, object] = {}
        self.turn = 0
        for _ in range(loader.prefetch_factor * len(pool.tasks)):
            self._send()

    def _send(self) -> None:
        if not self.active:
            return
        if self.iterable:
            indices = None
        else:
            indices = next(self.index_batches, None)
            if indices is None:
                return
        worker = self.active[self.turn % len(self.active)]
        self.turn += 1
        self.pool.tasks[worker].put((self.epoch, self.sent, indices))
        self.owner[self.sent] = worker
        self.sent += 1

    def __iter__(self):
        return self

    def __next__(self):
        while True:
            if self.next in self.arrived:
                batch = self.arrived.pop(self.next)
                worker = self.owner.pop(self.next)
                self.next += 1
                if isinstance(batch, _Failure):
                    self._end()
                    batch.reraise()
                if isinstance(batch, str) and batch == _EXHAUSTED:
                    if worker in self.active:
                        self.active.remove(worker)
                    continue
                self._send()
                return batch
            if self.next >= self.sent:
                self._end()
                raise StopIteration
            self._receive()

    def _receive(self) -> None:
        """Wait for one result of this epoch (polling the workers' health)."""
        timeout = self.loader.timeout
        start = time.monotonic()
        while True:
            try:
                epoch, task, batch = self.pool.results.get(timeout=1.0)
            except queue.Empty:
                self.pool.check_alive()
                if timeout and time.monotonic() - start > timeout:
                    self._end()
                    raise RuntimeError(f"DataLoader timed out after {timeout} seconds")
                continue
            if epoch is None:   # worker_init_fn failed
                self._end()
                batch.reraise()
            if epoch == self.epoch:
                self.arrived[task] = batch
                return

    def _end(self) -> None:
        if not self.loader.persistent_workers:
            self.pool.shutdown()
            self.loader._pool = None

    def __del__(self):
        if not self.loader.persistent_workers and self.pool.processes:
            self.pool.shutdown()
