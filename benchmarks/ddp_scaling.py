"""Data-parallel scaling on MPI: W1's MLP on 2 ranks against 1 process, and collectives
against raw mpi4py.

    python -m benchmarks.ddp_scaling              # runs every part, prints markdown tables
    python -m benchmarks.ddp_scaling --rounds 5 --json out.json
    python -m benchmarks.ddp_scaling --breakdown  # where a DDP step's time goes, per rank
    python -m benchmarks.ddp_scaling --collectives --rounds 2   # the allreduce table only

The driver starts each part as its own job (``mpiexec -n 2 python -m benchmarks.ddp_scaling
--part ...``, one thread per rank: ``DUALGRAPH_NUM_THREADS=1``, ``OMP_NUM_THREADS=1``) and
reads the JSON line rank 0 prints:

- ``train``: W1 (784-512-512-10 ReLU MLP, SGD momentum, global batch 128) as steps per
  second: dualgraph in one process on the whole batch (eager and compiled), dualgraph
  ``DistributedDataParallel`` on 2 ranks with 64 rows each (eager and compiled), and the
  same with PyTorch (one process, and DDP over gloo on the same 2 processes); and, as
  extra rows, DDP with ``ZeroRedundancyOptimizer`` (the update sharded; eager: its step
  broadcasts outside a compiled graph) and DDP with ``gradient_as_bucket_view=True``
  (gradients zeroed in place: the backward accumulates into the buckets), eager and, as
  ``ddp,compiled,view``, compiled (the ``.grad``s views of the buckets: no copy); and
  ``single,half``: one process on 64 rows (a rank's share), whose ratio to the 128-row
  step is the most 2 ranks on 2 cores could reach if they did not slow each other; and
  ``single,half,concurrent``: two such processes started together (``mpiexec -n 2``, no
  DDP, no communication), the slower one's steps per second: the real bound of 2 ranks on
  2 cores (shared memory bandwidth, caches, frequency), which DDP's ratio is judged by.
- ``breakdown`` (only with ``--breakdown``): where a DDP step's time goes on each rank,
  eager and compiled (step wall and CPU time; the allreduce starts, progress polls and
  waits in wall and CPU time, their calls, the ``Test`` polls of the waits; the passes
  over the gradients: packing the buckets, summing this rank's share, copying out),
  against the same 64-row step without DDP in the same job.
- ``collectives``: allreduce (sum, float32) of 1 KB to 64 MB, median time of
  ``dg.distributed.all_reduce`` against mpi4py's ``Allreduce`` on the same arrays (and its
  in-place ``Iallreduce`` with a ``Test`` loop, what dualgraph runs underneath), the best
  of 3 interleaved medians each, and the bus bandwidth ``2 (n-1)/n * bytes / time``
  (``--collectives``: this part only).

The machine may be shared: ``--rounds N`` runs every part N times, one round after another
(so that load hits all of them alike), and keeps each part's best round.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

WARMUP, TIMED = 20, 100
GLOBAL_BATCH = 128
SIZES = (784, 512, 512, 10)


def _data(rows: slice):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((GLOBAL_BATCH, SIZES[0]), dtype=np.float32)
    y = rng.integers(0, SIZES[-1], GLOBAL_BATCH)
    return x[rows], y[rows]


def _time_steps(step) -> float:
    """Steps per second: the median step of TIMED after WARMUP."""
    for _ in range(WARMUP):
        step()
    times = []
    for _ in range(TIMED):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return 1.0 / float(np.median(times))


def _mlp(lib, rank: int, size: int):
    """(x, y, model): this rank's share of the global batch and W1's MLP in ``lib``."""
    local = GLOBAL_BATCH // size
    x, y = (lib.tensor(a) for a in _data(slice(rank * local, (rank + 1) * local)))
    lib.manual_seed(0)
    nn = lib.nn
    return x, y, nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512),
                               nn.ReLU(), nn.Linear(512, 10))


def _mlp_step(lib, rank: int, size: int, parallel: bool, zero: bool = False,
              view: bool = False):
    """W1's SGD step in ``lib`` (dualgraph or torch: one torch-style definition) on this
    rank's share of the global batch, the model wrapped in ``lib``'s DDP if ``parallel``,
    the optimiser sharded by ``lib``'s ZeroRedundancyOptimizer if ``zero``; ``view``: DDP
    with ``gradient_as_bucket_view=True`` and gradients zeroed in place (the backward
    accumulates into the buckets)."""
    x, y, model = _mlp(lib, rank, size)
    nn = lib.nn
    if parallel:
        model = nn.parallel.DistributedDataParallel(model, gradient_as_bucket_view=view)
    if zero:
        opt = lib.distributed.optim.ZeroRedundancyOptimizer(
            model.parameters(), optimizer_class=lib.optim.SGD, lr=0.01, momentum=0.9)
    else:
        opt = lib.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step():
        opt.zero_grad(set_to_none=not view)
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss
    return step


def dualgraph_train(parallel: bool, compiled: bool, zero: bool, view: bool,
                    half: bool = False) -> float:
    """``half``: each process on a rank's share of 2 ranks (64 rows) without DDP: one alone,
    or (launched on 2 ranks) two at once, the slower one's figure kept: the bounds."""
    import dualgraph as dg
    import dualgraph.distributed as dist
    dist.init_process_group("mpi")
    size = 2 if half else dist.get_world_size()
    step = _mlp_step(dg, dist.get_rank(), size, parallel, zero, view)
    sps = dg.tensor(np.float64(_time_steps(dg.compile(step) if compiled else step)))
    dist.all_reduce(sps, dist.ReduceOp.MIN)   # (after the timing: no communication in it)
    return float(sps.item())


def torch_train(parallel: bool, zero: bool, view: bool) -> float:
    import torch
    import torch.distributed as tdist
    torch.set_num_threads(1)
    rank, size = int(os.environ.get("PMI_RANK", 0)), int(os.environ.get("PMI_SIZE", 1))
    if parallel:
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29533")
        tdist.init_process_group("gloo", rank=rank, world_size=size)
    if zero:
        import torch.distributed.optim  # noqa: F401 (torch.distributed.optim is a submodule)
    return _time_steps(_mlp_step(torch, rank, size, parallel, zero, view))


def collectives() -> list:
    import dualgraph as dg
    import dualgraph.distributed as dist
    from mpi4py import MPI
    dist.init_process_group("mpi")
    comm, size, rows = MPI.COMM_WORLD, dist.get_world_size(), []
    for kib in [1, 16, 32, 64, 128, 256, 1024, 4096, 16384, 65536]:
        n = kib * 256
        a = np.ones(n, np.float32)
        out = np.empty_like(a)
        t = dg.tensor(a)
        repeats = max(5, min(300, 2_000_000 // (n + 1000)))

        def median(fn):
            comm.Barrier()
            for _ in range(3):
                fn()
            times = []
            for _ in range(repeats):
                start = time.perf_counter()
                fn()
                times.append(time.perf_counter() - start)
            return float(np.median(times))

        def spin(request):   # (what dualgraph's wait does, less its deadline)
            while not request.Test():
                pass
        best = {}
        for _ in range(3):   # interleaved, the best median of each kept (a shared machine)
            for name, fn in (("raw", lambda: comm.Allreduce(a, out, MPI.SUM)),
                             ("inplace",
                              lambda: spin(comm.Iallreduce(MPI.IN_PLACE, a, MPI.SUM))),
                             ("ours", lambda: dist.all_reduce(t))):
                best[name] = min(best.get(name, 1.0), median(fn))
        rows.append({"bytes": a.nbytes, "mpi4py_us": best["raw"] * 1e6,
                     "mpi4py_iallreduce_us": best["inplace"] * 1e6,
                     "dualgraph_us": best["ours"] * 1e6,
                     "busbw_GBps": 2 * (size - 1) / size * a.nbytes / best["ours"] / 1e9})
    return rows


def breakdown() -> dict:
    """Where a DDP step's time goes on each rank (W1, 64 rows a rank), eager and compiled,
    against the same step without DDP in the same job: per step (medians of wall and
    process CPU ms) and the communication's share (means per step of wall ms, thread CPU
    ms and calls): the allreduce starts (the buckets' copies not included), the progress
    polls during the backward, and the waits (``Pending.wait``: polling until the reduction
    is there; ``tests`` counts the polls: MPI's ``Test`` calls, or through shared memory
    ``Window.advance``); and the passes over the gradients: ``pack`` (into the buckets,
    divided), ``sum`` (this rank's share of a reduction through shared memory: inside the
    polls and waits, counted there too) and ``copy out`` (the averages into ``.grad``)."""
    import dualgraph as dg
    import dualgraph.distributed as dist
    from dualgraph.distributed import mpi, shm
    from dualgraph.nn import parallel as data_parallel
    from dualgraph.ops import collective, creation
    dist.init_process_group("mpi")
    rank, size = dist.get_rank(), dist.get_world_size()
    spent = {}

    inside = set()   # (a call within a timed call of the same part counts once)

    def timed(name, fn):
        def run(*args, **kwargs):
            if name in inside:
                return fn(*args, **kwargs)
            inside.add(name)
            wall, cpu = time.perf_counter(), time.thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                inside.discard(name)
                got = spent.setdefault(name, [0.0, 0.0, 0])
                got[0] += time.perf_counter() - wall
                got[1] += time.thread_time() - cpu
                got[2] += 1
        return run

    def counted(fn):
        def run(self):
            spent.setdefault("tests", [0.0, 0.0, 0])[2] += 1
            return fn(self)
        return run
    # MPI's operations and those through shared memory (shm.py) alike
    for cls, method, part in ((mpi.Communicator, "all_reduce", "start"),
                              (mpi.Communicator, "all_reduce_shared", "start"),
                              (mpi.Communicator, "progress", "progress"),
                              (mpi.Pending, "wait", "wait"), (shm.Reduction, "wait", "wait"),
                              # the work on the gradients: copying them into the buckets
                              # (divided), this rank's share of the sums (inside the polls
                              # and waits above), the averages out into .grad (the other
                              # ranks' shares where this rank's is summed into .grad; the
                              # whole bucket by _write_grads or a compiled step's clone)
                              (collective, "pack", "pack"), (shm.Reduction, "sum", "sum"),
                              (shm.Reduction, "copy_rest", "copy out"),
                              (data_parallel, "_write_grads", "copy out"),
                              (creation.CLONE, "kernel", "copy out")):
        setattr(cls, method, timed(part, getattr(cls, method)))
    mpi.Pending.test = counted(mpi.Pending.test)
    shm.Window.advance = counted(shm.Window.advance)
    rows = {}
    for compiled in (False, True):
        for parallel in (False, True):
            step = _mlp_step(dg, rank, size, parallel)
            run = dg.compile(step) if compiled else step
            for _ in range(WARMUP):
                run()
            spent.clear()
            marks = []
            for _ in range(TIMED):
                wall, cpu = time.perf_counter(), time.process_time()
                run()
                marks.append((time.perf_counter() - wall, time.process_time() - cpu))
            row = dict(zip(("step", "cpu"), (np.median(np.array(marks), axis=0) * 1e3)))
            for part, calls in (("start", "starts"), ("progress", "polls"), ("wait", "waits"),
                                ("pack", "packs"), ("sum", "sums"), ("copy out", "copies")):
                got = spent.get(part, [0.0, 0.0, 0])
                row.update({f"{part} wall": got[0] / TIMED * 1e3,
                            f"{part} cpu": got[1] / TIMED * 1e3, calls: got[2] / TIMED})
            row["tests"] = spent.get("tests", [0, 0, 0])[2] / TIMED
            values = dg.tensor(np.array(list(row.values())))   # every rank's row, to rank 0
            parts = [dg.zeros_like(values) for _ in range(size)]
            dist.all_gather(parts, values)
            name = ("compiled " if compiled else "") + ("ddp" if parallel else "single")
            for r, got in enumerate(parts):
                rows[f"{name}, rank {r}"] = dict(zip(row, got.numpy().round(3).tolist()))
    return rows


def _part(name: str):
    if name == "collectives":
        return collectives()
    if name == "breakdown":
        return breakdown()
    impl, _, variant = name.partition(":")
    if impl == "dualgraph":
        return dualgraph_train("ddp" in variant, "compiled" in variant, "zero" in variant,
                               "view" in variant, "half" in variant)
    return torch_train("ddp" in variant, "zero" in variant, "view" in variant)


def _launch(part: str, ranks: int):
    env = dict(os.environ, DUALGRAPH_NUM_THREADS="1", OMP_NUM_THREADS="1",
               OPENBLAS_NUM_THREADS="1", PYTHONPATH=os.getcwd())
    command = [sys.executable, "-m", "benchmarks.ddp_scaling", "--part", part]
    if ranks > 1:
        command = ["mpiexec", "-n", str(ranks)] + command
    out = subprocess.run(command, capture_output=True, text=True, env=env, timeout=900)
    if out.returncode:
        raise RuntimeError(f"{part} failed:\n{out.stdout}\n{out.stderr}")
    return json.loads([line for line in out.stdout.splitlines() if line.startswith("{")][0])[
        "result"]


def _print_train(train: dict, rounds: int) -> None:
    print("| implementation | steps/s (global batch 128) | vs its own single process |")
    print("|---|---|---|")
    for name, sps in train.items():
        impl, variant = name.split(" ")
        base = train[f"{impl} single" + (",compiled" if "compiled" in variant else "")]
        print(f"| {name} | {sps:.1f} | {sps / base:.2f}x |")
    print(f"\ndualgraph DDP eager vs PyTorch DDP/gloo: "
          f"{train['dualgraph ddp'] / train['torch ddp']:.2f}x; compiled: "
          f"{train['dualgraph ddp,compiled'] / train['torch ddp']:.2f}x (best of "
          f"{rounds} rounds)\n")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--part")
    p.add_argument("--json")
    p.add_argument("--rounds", type=int, default=3, help="runs of every part; the best kept")
    p.add_argument("--breakdown", action="store_true",
                   help="only where an eager DDP step's time goes (2 ranks)")
    p.add_argument("--collectives", action="store_true", help="only the allreduce table")
    args = p.parse_args()
    if args.breakdown:
        rows = _launch("breakdown", 2)
        keys = next(iter(rows.values()))
        print("| 64 rows a rank, ms per step | " + " | ".join(keys) + " |")
        print("|---" * (1 + len(keys)) + "|")
        for name, row in rows.items():
            print(f"| {name} | " + " | ".join(f"{v:.2f}" for v in row.values()) + " |")
        return
    if args.part:
        result = _part(args.part)
        if int(os.environ.get("PMI_RANK", 0)) == 0:
            print(json.dumps({"result": result}), flush=True)
        return
    train, coll = {}, None
    for _ in range(args.rounds):
        runs = [] if args.collectives else [
            ("dualgraph", "single", 1), ("dualgraph", "ddp", 2),
            ("dualgraph", "single,compiled", 1), ("dualgraph", "ddp,compiled", 2),
            ("dualgraph", "single,half", 1), ("dualgraph", "single,compiled,half", 1),
            ("dualgraph", "single,half,concurrent", 2),
            ("dualgraph", "single,compiled,half,concurrent", 2),
            ("dualgraph", "ddp,zero", 2), ("dualgraph", "ddp,view", 2),
            ("dualgraph", "ddp,compiled,view", 2),
            ("torch", "single", 1), ("torch", "ddp", 2), ("torch", "ddp,zero", 2),
            ("torch", "ddp,view", 2)]
        for impl, variant, ranks in runs:
            name = f"{impl} {variant}"
            train[name] = max(train.get(name, 0.0), _launch(f"{impl}:{variant}", ranks))
        rows = _launch("collectives", 2)
        coll = rows if coll is None else [
            {k: min(a[k], b[k]) if k.endswith("_us") else max(a[k], b[k]) for k in a}
            for a, b in zip(coll, rows)]
    if train:
        _print_train(train, args.rounds)
    print("| bytes | mpi4py Allreduce (us) | mpi4py Iallreduce in place (us) | "
          "dg.distributed.all_reduce (us) | ratio to Allreduce | bus GB/s |")
    print("|---|---|---|---|---|---|")
    for row in coll:
        print(f"| {row['bytes']} | {row['mpi4py_us']:.1f} | {row['mpi4py_iallreduce_us']:.1f} | "
              f"{row['dualgraph_us']:.1f} | {row['dualgraph_us'] / row['mpi4py_us']:.2f} | "
              f"{row['busbw_GBps']:.2f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"train": train, "collectives": coll}, f, indent=1)


if __name__ == "__main__":
    main()
