"""Run by tests/test_distributed.py as ``mpiexec -n 2 python collectives.py``: every
collective against NumPy on several dtypes and sizes, non-contiguous tensors, async
handles, gradients through the collectives, and a compiled function with collectives equal
to eager; before them, that a rank uses DUALGRAPH_NUM_THREADS=1 thread in OpenBLAS too. Rank 0 prints ``OK <check>`` per check; a failure on any rank aborts the job."""
import os

import numpy as np

import dualgraph as dg
import dualgraph.distributed as dist
import dualgraph.distributed.functional as F
from dualgraph.kernels import tuning

dist.init_process_group("mpi")
RANK, SIZE = dist.get_rank(), dist.get_world_size()
# (run with DUALGRAPH_NUM_THREADS=1: OpenBLAS follows it, and freed memory is kept)
blas = tuning.openblas()
assert blas is None or blas.threads() == 1, f"OpenBLAS runs {blas.threads()} threads"
assert "malloc" in tuning.active or tuning.SWITCH in os.environ, tuning.active


def ok(check):
    """Rank 0 reports (a failure on any rank aborts the job: mpiexec's status says so)."""
    if RANK == 0:
        print(f"OK {check}", flush=True)
DTYPES = {"float32": dg.float32, "float64": dg.float64, "float16": dg.float16,
          "bfloat16": dg.bfloat16, "int32": dg.int32, "int64": dg.int64}


def data(rank, shape, dtype, seed=0):
    """Rank ``rank``'s input (every rank can compute every rank's)."""
    rng = np.random.default_rng(seed * 100 + rank)
    a = rng.integers(-8, 8, shape) if dtype.startswith("int") else rng.standard_normal(shape)
    return a.astype(np.float32 if dtype == "bfloat16" else dtype)


def tensor(a, dtype):
    return dg.tensor(a).to(DTYPES[dtype])


def close(got, want, dtype, what):
    got = got.float().numpy() if dtype in ("bfloat16", "float16") else got.numpy()
    tol = {"float16": 1e-2, "bfloat16": 5e-2}.get(dtype, 1e-6)
    np.testing.assert_allclose(got, np.asarray(want, got.dtype), rtol=tol, atol=tol,
                               err_msg=f"{what} {dtype}")


def rounded(a, dtype):
    """``a`` as the rank holds it (16-bit inputs are rounded before they travel)."""
    return np.asarray(tensor(a, dtype).float().numpy(), np.float64)


for dtype in DTYPES:
    # (100, 65): 26 KB as float32; 52 KB as float64 and (1000, 65) as 16-bit (130 KB)
    # are reduced out of place (mpi.OUT_OF_PLACE_BYTES)
    for shape in [(1,), (7, 3), (100, 65), (1000, 65)]:
        inputs = [rounded(data(r, shape, dtype), dtype) for r in range(SIZE)]
        mine = data(RANK, shape, dtype)
        for op, want in [("SUM", sum(inputs)), ("MAX", np.max(inputs, 0)),
                         ("MIN", np.min(inputs, 0))] + (
                [("AVG", sum(inputs) / SIZE)] if not dtype.startswith("int") else []):
            t = tensor(mine, dtype)
            dist.all_reduce(t, op=op)
            close(t, want, dtype, f"all_reduce {op} {shape}")
        t = tensor(mine, dtype)
        dist.broadcast(t, src=SIZE - 1)
        close(t, inputs[SIZE - 1], dtype, "broadcast")
        parts = [tensor(np.zeros(shape), dtype) for _ in range(SIZE)]
        dist.all_gather(parts, tensor(mine, dtype))
        for r in range(SIZE):
            close(parts[r], inputs[r], dtype, "all_gather")
        out = tensor(np.zeros((SIZE * shape[0],) + shape[1:]), dtype)
        dist.all_gather_into_tensor(out, tensor(mine, dtype))
        close(out, np.concatenate(inputs), dtype, "all_gather_into_tensor")
        big = [rounded(data(r, (SIZE * shape[0],) + shape[1:], dtype, 1), dtype)
               for r in range(SIZE)]
        out = tensor(np.zeros(shape), dtype)
        dist.reduce_scatter_tensor(out, tensor(data(RANK, big[0].shape, dtype, 1), dtype))
        close(out, sum(big)[RANK * shape[0]:(RANK + 1) * shape[0]], dtype, "reduce_scatter")
        t = tensor(mine, dtype)
        dist.reduce(t, dst=0)
        close(t, sum(inputs) if RANK == 0 else inputs[RANK], dtype, "reduce")
ok("dtypes and sizes")

# non-contiguous tensors: a transposed view and a strided slice, written through
base = dg.tensor(data(RANK, (6, 8), "float64"))
view = base.t()
dist.all_reduce(view)
want = sum(data(r, (6, 8), "float64") for r in range(SIZE))
np.testing.assert_allclose(base.numpy(), want)
base = dg.tensor(data(RANK, (10,), "float64"))
dist.broadcast(base[::2], src=0)
np.testing.assert_allclose(base.numpy()[::2], data(0, (10,), "float64")[::2])
np.testing.assert_allclose(base.numpy()[1::2], data(RANK, (10,), "float64")[1::2])
ok("non-contiguous")

# async handles: several in flight, completed by wait(), results in place (80 KB each:
# MPI reduces them out of place, the wait copies into the tensors: mpi.OUT_OF_PLACE_BYTES)
ts = [dg.tensor(data(RANK, (20000,), "float32", s)) for s in range(4)]
works = [dist.all_reduce(t, async_op=True) for t in ts]
out = dg.zeros(SIZE * 3)
works.append(dist.all_gather_into_tensor(out, dg.full((3,), float(RANK)), async_op=True))
for w in works:
    w.wait()
    assert w.is_completed()
for s, t in enumerate(ts):
    np.testing.assert_allclose(t.numpy(), sum(data(r, (20000,), "float32", s)
                                              for r in range(SIZE)), rtol=1e-6)
np.testing.assert_array_equal(out.numpy(), np.repeat(np.arange(SIZE), 3))
fut = dist.all_reduce(dg.ones(2), async_op=True).get_future().then(lambda f: f.value()[0] * 2)
np.testing.assert_array_equal(fut.wait().numpy(), [2 * SIZE] * 2)
peer = (RANK + 1) % SIZE
recv = dg.zeros(4)
rw = dist.irecv(recv, src=(RANK - 1) % SIZE, tag=7)
sw = dist.isend(dg.full((4,), float(RANK)), dst=peer, tag=7)
sw.wait()
rw.wait()
np.testing.assert_array_equal(recv.numpy(), [(RANK - 1) % SIZE] * 4)
dist.barrier()
ok("async")

# gradients through the collectives: y = f(x) on each rank, loss = sum over ranks of
# sum(w_r * y_r); the gradient of x on each rank against the hand-derived NumPy one
x_np = data(RANK, (4, 3), "float64")
w = [data(r, (SIZE, 4, 3), "float64", 5) for r in range(SIZE)]   # rank r's output weights


def grad_of(fn, w_shape):
    x = dg.tensor(x_np, requires_grad=True)
    y = fn(x)
    (y * dg.tensor(w[RANK][tuple(slice(0, n) for n in w_shape)])).sum().backward()
    return x.grad.numpy()


wsum = sum(wr[0] for wr in w)
np.testing.assert_allclose(grad_of(lambda x: F.all_reduce(x), (1, 4, 3))[None], wsum[None])
np.testing.assert_allclose(grad_of(lambda x: F.all_reduce(x, "AVG"), (1, 4, 3))[None],
                           wsum[None] / SIZE)
got = grad_of(lambda x: F.all_gather_tensor(x), (SIZE, 4, 3))
np.testing.assert_allclose(got, sum(wr[RANK] for wr in w))
got = grad_of(lambda x: F.broadcast(x, 0), (1, 4, 3))
np.testing.assert_allclose(got, wsum if RANK == 0 else np.zeros((4, 3)))
x = dg.tensor(data(RANK, (SIZE * 2, 3), "float64"), requires_grad=True)
y = F.reduce_scatter_tensor(x)
(y * dg.tensor(w[RANK][0][:2])).sum().backward()
np.testing.assert_allclose(x.grad.numpy(), np.concatenate([w[r][0][:2] for r in range(SIZE)]))
xs = [data(r, (4, 3), "float64") for r in range(SIZE)]
got = grad_of(lambda x: F.all_reduce(x, "MAX"), (1, 4, 3))
np.testing.assert_allclose(got, wsum * (xs[RANK] == np.max(xs, 0)))
ok("gradients")


# a compiled function with collectives, twice: equal to eager, nodes in the graph
def step(a):
    g = F.all_gather_tensor(a * 2)
    return F.all_reduce(g.sum(0)) + F.broadcast(a, 0)


compiled = dg.compile(step)
for s in range(2):
    a = dg.tensor(data(RANK, (3, 5), "float32", s))
    np.testing.assert_allclose(compiled(a).numpy(), step(a).numpy(), rtol=1e-6)
text = str(compiled.graph)
assert "all_gather" in text and "all_reduce" in text and "broadcast" in text, text
assert "collectives.py" in text, text   # nodes carry the user's line


# per-tensor allreduces in a compiled function run as one (communication fusion)
def average(*grads):
    return [F.all_reduce(g, "AVG") for g in grads]


grads = [dg.tensor(data(RANK, shape, "float32", 3)) for shape in [(4, 5), (5,), (3, 2, 2)]]
averaged = dg.compile(average)
for got, want in zip(averaged(*grads), average(*grads)):
    np.testing.assert_array_equal(got.numpy(), want.numpy())
assert averaged.code.count("k_all_reduce(") == 1, averaged.code
ok("compiled")
dist.destroy_process_group()
