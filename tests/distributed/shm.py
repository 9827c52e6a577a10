"""Run by tests/test_distributed.py as ``mpiexec -n 2 python shm.py TRANSPORT``: allreduce
through shared memory (``dualgraph/distributed/shm.py``, TRANSPORT "shm", the default where
the ranks share a machine) or through MPI (TRANSPORT "mpi": ``DUALGRAPH_DIST_SHM=0``, set by
the test). Checks that the transport asked for is the one used, that results equal NumPy's
and are bit-identical on every rank (dtypes, reductions, sizes either side of the
thresholds), that many asynchronous allreduces in flight (more than the ring holds, mixed
with MPI's broadcasts) complete in any waiting order, and that DDP's buckets (and with
``gradient_as_bucket_view`` its gradients) live in the shared window, and that without
bucket views the averages are summed straight into the gradients' own arrays."""
import sys

import numpy as np

import dualgraph as dg
import dualgraph.distributed as dist
from dualgraph.distributed import mpi, shm
from dualgraph.nn.parallel import DistributedDataParallel as DDP
from dualgraph.ops import collective

TRANSPORT = sys.argv[1]
dist.init_process_group("mpi")
RANK, SIZE = dist.get_rank(), dist.get_world_size()
COMM = collective.comm()
SHARED = TRANSPORT == "shm"
assert (COMM.shared is not None) == SHARED, (TRANSPORT, COMM.shared)


def ok(name: str) -> None:
    if RANK == 0:
        print(f"OK {name}", flush=True)


def inputs(n: int, dtype, seed: int) -> list:
    """Every rank's input (each rank computes all of them: the reference needs them)."""
    rng = np.random.default_rng(seed)
    if np.dtype(dtype) == np.bool_:
        return [rng.random(n) < 0.3 for _ in range(SIZE)]
    if np.dtype(dtype).kind == "f":
        return [(rng.standard_normal(n) * 10).astype(dtype) for _ in range(SIZE)]
    return [rng.integers(-100, 100, n).astype(dtype) for _ in range(SIZE)]


def same_everywhere(a: np.ndarray) -> bool:
    """Whether every rank holds exactly these bytes."""
    raw = dg.tensor(np.frombuffer(np.ascontiguousarray(a).tobytes(), np.uint8).copy())
    parts = [dg.zeros_like(raw) for _ in range(SIZE)]
    dist.all_gather(parts, raw)
    return all(np.array_equal(p.numpy(), raw.numpy()) for p in parts)


REFERENCE = {"SUM": np.add, "AVG": np.add, "PRODUCT": np.multiply, "MAX": np.maximum,
             "MIN": np.minimum}
# sizes: below SHM_MIN_BYTES (MPI), summed whole, split in shares; above the ring (MPI)
# once (it is slow to check)
CASES = [(dtype, op, n)
         for dtype in (np.float32, np.float64, np.float16, np.int32, np.int64, np.bool_)
         for op in ("SUM", "AVG", "PRODUCT", "MAX", "MIN")
         if op != "AVG" or np.dtype(dtype).kind == "f"
         for n in ((100, 20_000, 100_000) if dtype in (np.float32, np.bool_) else
                   (20_000, 100_000))]
seed = 0
for dtype, op, n in CASES + [(np.float32, "SUM", mpi.SHM_BYTES // 8 + 3)]:
    seed += 1
    xs = inputs(n, dtype, seed)
    t = dg.tensor(xs[RANK].copy())
    dist.all_reduce(t, op)
    want = xs[0].copy()
    for x in xs[1:]:
        want = REFERENCE[op](want, x)
    if op == "AVG":
        want = want / SIZE
    got = t.numpy()
    tol = 1e-2 if dtype == np.float16 else 1e-6
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64),
                               rtol=tol, atol=tol, err_msg=f"{dtype} {op} {n}")
    assert same_everywhere(got), f"ranks differ: {dtype} {op} {n}"
ok("allreduce equals NumPy, bit-identical on every rank")

# many in flight at once: more bytes than the ring, MPI broadcasts between, waited backwards
works, wants = [], []
for i in range(12):
    xs = inputs(300_000 + 1000 * i, np.float32, 100 + i)
    t = dg.tensor(xs[RANK].copy())
    works.append((dist.all_reduce(t, async_op=True), t))
    wants.append(xs[0] + xs[1])
    b = dg.full((5000,), float(RANK))
    works.append((dist.broadcast(b, 1, async_op=True), b))
    wants.append(np.ones(5000, np.float32))
for (work, t), want in reversed(list(zip(works, wants))):
    work.wait()
    np.testing.assert_allclose(t.numpy(), want, rtol=1e-6)
ok("asynchronous allreduces past the ring's size, waited in any order")

# out of place (the registry op, as a compiled graph runs it) and differentiated
x = dg.tensor(inputs(50_000, np.float32, 7)[RANK], requires_grad=True)
y = dist.functional.all_reduce(x * 2)
y.sum().backward()
np.testing.assert_allclose(x.grad.numpy(), np.full(50_000, 2.0 * SIZE), rtol=1e-6)
ok("out of place and gradients")

# DDP: the buckets (and, as bucket views, the gradients) live in the shared window
dg.manual_seed(0)
net = dg.nn.Sequential(dg.nn.Linear(64, 64), dg.nn.ReLU(), dg.nn.Linear(64, 4))
model = DDP(net, bucket_cap_mb=0.01, gradient_as_bucket_view=True)
model(dg.randn(8, 64)).square().mean().backward()
windows = {id(b.window) for b in model._buckets}
assert windows == ({id(COMM.windows[-1])} if SHARED else {id(None)}), windows
region = COMM.windows[-1].regions[RANK] if SHARED else None
for p in net.parameters():
    assert SHARED == (region is not None and np.shares_memory(p.grad.numpy(), region))
    assert same_everywhere(p.grad.numpy())
ok(f"ddp buckets {'in the shared window' if SHARED else 'by MPI'}")

# DDP without bucket views: each rank sums its share of the averages straight into the
# .grads' own arrays (kept from step to step with zero_grad(set_to_none=False)) and copies
# the other ranks' shares in; the averages of every rank's own gradients, bit-identical
def gradients_apart() -> None:
    """(one bucket of four .grads, 80 KiB each on average: summed into them, the shares
    spanning several of them)"""
    dg.manual_seed(1)
    own = dg.nn.Sequential(dg.nn.Linear(256, 256), dg.nn.ReLU(), dg.nn.Linear(256, 64))
    model = DDP(own)
    opt = dg.optim.SGD(own.parameters(), lr=0.1)
    arrays, rests, copy_rest = None, [], shm.Reduction.copy_rest
    shm.Reduction.copy_rest = lambda self: (rests.append(self), copy_rest(self))[1]
    for step in range(2):
        opt.zero_grad(set_to_none=False)
        x = dg.tensor(inputs(8 * 256, np.float32, 40 + step)[RANK].reshape(8, 256))
        loss = model(x).square().mean()
        grads = dg.autograd.grad(loss, list(own.parameters()), retain_graph=True)
        loss.backward()
        if arrays is not None:
            assert all(p.grad.numpy() is a for p, a in zip(own.parameters(), arrays))
        arrays = [p.grad.numpy() for p in own.parameters()]
        for p, g in zip(own.parameters(), grads):
            every = [dg.zeros_like(g) for _ in range(SIZE)]
            dist.all_gather(every, g)
            want = sum(e.numpy() for e in every) / SIZE
            np.testing.assert_allclose(p.grad.numpy(), want, rtol=1e-5, atol=1e-7)
            assert same_everywhere(p.grad.numpy())
            window = COMM.windows[-1].regions[RANK] if SHARED else np.empty(0)
            assert not np.shares_memory(p.grad.numpy(), window)
        opt.step()
    shm.Reduction.copy_rest = copy_rest
    assert len(rests) == (2 if SHARED else 0), rests


gradients_apart()
ok("ddp gradients summed into their own arrays")

# destroy_process_group frees every window no array views any more (a DDP dropped before
# it), and keeps a window still viewed mapped (this model's .grads are views of its own)
dropped = DDP(dg.nn.Linear(64, 4))
dropped(dg.randn(8, 64)).sum().backward()
windows, kept = list(COMM.windows), net[0].weight.grad.numpy()
del model, dropped
dist.destroy_process_group()
freed = [not w.regions for w in windows]
# the ring, model's, apart's (its .grads are arrays of their own), dropped's
assert freed == ([True, False, True, True] if SHARED else []), freed
assert np.isfinite(kept).all()   # (still mapped, readable)
ok("windows freed at destroy_process_group where nothing views them")
