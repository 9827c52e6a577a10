"""Run by tests/test_distributed.py as ``mpiexec -n 2 python hooks.py``: each built-in
communication hook trains the same classifier as plain data parallelism, to within 1% of
its test accuracy (scikit-learn's digits when installed, else separable blobs), and a
user's hook gets torch's GradBucket and returns a future; compiled, every built-in hook
gives the eager hook's parameters. Prints ``OK <hook>``."""
import numpy as np

import dualgraph as dg
import dualgraph.distributed as dist
from dualgraph.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
from dualgraph.distributed.algorithms.ddp_comm_hooks import topk_hook
from dualgraph.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("mpi")
RANK, SIZE = dist.get_rank(), dist.get_world_size()


def ok(check):
    """Rank 0 reports (a failure on any rank aborts the job: mpiexec's status says so)."""
    if RANK == 0:
        print(f"OK {check}", flush=True)
try:
    from sklearn.datasets import load_digits
    digits = load_digits()
    X, Y = (digits.data / 16.0).astype(np.float32), digits.target
except ImportError:   # (scikit-learn is not a test dependency)
    rng = np.random.default_rng(0)
    centres = rng.standard_normal((10, 64)) * 2
    Y = rng.integers(0, 10, 1800)
    X = (centres[Y] + rng.standard_normal((1800, 64))).astype(np.float32)
order = np.random.default_rng(1).permutation(len(Y))
X, Y = X[order], Y[order]
TRAIN, BATCH, EPOCHS = 1400, 32, 4


def accuracy(hook=None, state=None, compiled=False):
    """Test accuracy after EPOCHS of data-parallel SGD; ``compiled``: the step under
    dg.compile (PowerSGD's warm-up steps eagerly)."""
    dg.manual_seed(0)
    model = DDP(dg.nn.Sequential(dg.nn.Linear(64, 64), dg.nn.ReLU(), dg.nn.Linear(64, 10)),
                bucket_cap_mb=0.001)
    if hook is not None:
        model.register_comm_hook(state, hook)
    opt = dg.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    def step(x, y):
        opt.zero_grad()
        dg.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    fast = dg.compile(step) if compiled else step
    for _ in range(EPOCHS):
        for start in range(0, TRAIN, BATCH * SIZE):
            rows = slice(start + RANK * BATCH, start + (RANK + 1) * BATCH)
            warm_up = getattr(state, "iter", 1) < getattr(state, "start_powerSGD_iter", 0)
            (step if warm_up else fast)(dg.tensor(X[rows]), dg.tensor(Y[rows]))
    with dg.no_grad():
        predicted = model(dg.tensor(X[TRAIN:])).argmax(1).numpy()
    params = np.concatenate([p.detach().numpy().ravel() for p in model.parameters()])
    gathered = [dg.zeros(params.size) for _ in range(SIZE)]
    dist.all_gather(gathered, dg.tensor(params))
    for g in gathered:   # every rank applied the same averaged gradients
        np.testing.assert_array_equal(g.numpy(), params)
    return float(np.mean(predicted == Y[TRAIN:]))


baseline = accuracy()
assert baseline > 0.9, baseline
seen = []


def user_hook(state, bucket):
    seen.append((bucket.index(), len(bucket.parameters()), bucket.is_last()))
    assert bucket.buffer().numel() == sum(g.numel() for g in bucket.gradients())
    return default_hooks.allreduce_hook(state, bucket)


for name, hook, state in [
        ("user hook calling allreduce_hook", user_hook, None),
        ("fp16_compress_hook", default_hooks.fp16_compress_hook, None),
        ("bf16_compress_hook", default_hooks.bf16_compress_hook, None),
        ("topk_hook", topk_hook.topk_hook, topk_hook.TopKState(ratio=0.25)),
        ("powerSGD_hook", powerSGD_hook.powerSGD_hook,
         powerSGD_hook.PowerSGDState(None, matrix_approximation_rank=4, start_powerSGD_iter=5))]:
    got = accuracy(hook, state)
    assert got >= baseline - 0.01, f"{name}: accuracy {got:.3f}, uncompressed {baseline:.3f}"
    ok(f"{name} {got:.3f} (uncompressed {baseline:.3f})")
# the same with the step compiled (the hooks' graph forms)
for name, hook, state in [
        ("topk_hook", topk_hook.topk_hook, topk_hook.TopKState(ratio=0.25)),
        ("powerSGD_hook", powerSGD_hook.powerSGD_hook,
         powerSGD_hook.PowerSGDState(None, matrix_approximation_rank=4, start_powerSGD_iter=5))]:
    got = accuracy(hook, state, compiled=True)
    assert got >= baseline - 0.01, f"{name}: accuracy {got:.3f}, uncompressed {baseline:.3f}"
    ok(f"converged compiled {name} {got:.3f} (uncompressed {baseline:.3f})")
assert seen and seen[-1][2] and {i for i, _, _ in seen} == {0, 1}, seen[:4]


def train_steps(hook, state, compiled, steps=8, eager_steps=0):
    """Parameters after ``steps`` SGD steps of the digits classifier with ``hook`` (the
    first ``eager_steps`` eagerly), and the step function."""
    dg.manual_seed(0)
    model = DDP(dg.nn.Sequential(dg.nn.Linear(64, 64), dg.nn.ReLU(), dg.nn.Linear(64, 10)),
                bucket_cap_mb=0.01)
    model.register_comm_hook(state, hook)
    opt = dg.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    def step(x, y):
        opt.zero_grad()
        loss = dg.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss
    run = dg.compile(step) if compiled else step
    for s in range(steps):
        rows = slice((2 * s + RANK) * BATCH, (2 * s + RANK + 1) * BATCH)
        (step if s < eager_steps else run)(dg.tensor(X[rows]), dg.tensor(Y[rows]))
    params = np.concatenate([p.detach().numpy().ravel() for p in model.parameters()])
    return params, run


def same(name, got, want, tol):
    rel = np.max(np.abs(got - want)) / np.max(np.abs(want))
    assert rel <= tol, f"compiled {name}: parameters differ by {rel:.2e} relative"
    return rel


# compiled: the compression hook is a graph rewrite (casts around the fused allreduce) and
# gives the eager hook's parameters
for name in ("fp16_compress_hook", "bf16_compress_hook"):
    hook = getattr(default_hooks, name)
    want, _ = train_steps(hook, None, compiled=False)
    got, run = train_steps(hook, None, compiled=True)
    rel = same(name, got, want, 1e-6)
    report = run.explain()
    wire = "float16" if name.startswith("fp16") else "bfloat16"
    assert f"compress_all_reduces: 18.8 KiB sent as {wire}" in report, report
    ok(f"compiled {name} (rel {rel:.1e})")

# compiled top-k and PowerSGD: the hooks' ops (written once, with dualgraph ops) traced
# around the bucket's collectives, their residuals and Qs tensors the graph writes back:
# the eager hooks' parameters after 8 steps (PowerSGD's first 2 eagerly, its warm-up)
for name, hook, make_state, eager_steps in [
        ("topk_hook", topk_hook.topk_hook, lambda: topk_hook.TopKState(ratio=0.25), 0),
        ("powerSGD_hook", powerSGD_hook.powerSGD_hook, lambda: powerSGD_hook.PowerSGDState(
            None, matrix_approximation_rank=4, start_powerSGD_iter=2), 2)]:
    want, _ = train_steps(hook, make_state(), compiled=False)
    got, run = train_steps(hook, make_state(), compiled=True, eager_steps=eager_steps)
    rel = same(name, got, want, 1e-6)
    graph = str(run.graph)
    assert ("all_gather(" if name == "topk_hook" else "all_reduce(") in graph, graph
    ok(f"compiled {name} (rel {rel:.1e})")

# a compiled PowerSGD step traced in its warm-up is an error (it would keep that phase)
try:
    train_steps(powerSGD_hook.powerSGD_hook, powerSGD_hook.PowerSGDState(
        None, start_powerSGD_iter=5), compiled=True, steps=1)
except NotImplementedError as e:
    assert "start_powerSGD_iter=5" in str(e), e
    ok("compiled powerSGD_hook in its warm-up raises")
else:
    raise AssertionError("a compiled PowerSGD step traced in its warm-up did not raise")
dist.destroy_process_group()
