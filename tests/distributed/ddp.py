"""Run by tests/test_distributed.py as ``mpiexec -n 2 python ddp.py``: data parallelism on
two ranks equals one process training on the concatenated batch (parameters within 1e-6
relative after 10 steps), with 25 MB buckets and with tiny ones, with ``no_sync``
gradient accumulation, with a parameter the forward does not use, and compiled; and
buffers of several dtypes (a BatchNorm's, bool, float64) different on every rank become
rank 0's, in one broadcast when DDP is made and before each forward. Prints ``OK <check>``
per check."""
import contextlib

import numpy as np

import dualgraph as dg
import dualgraph.distributed as dist
from dualgraph.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("mpi")
RANK, SIZE = dist.get_rank(), dist.get_world_size()


def ok(check):
    """Rank 0 reports (a failure on any rank aborts the job: mpiexec's status says so)."""
    if RANK == 0:
        print(f"OK {check}", flush=True)
STEPS, LOCAL = 10, 4
rng = np.random.default_rng(0)
X = rng.standard_normal((STEPS, 2, SIZE * LOCAL, 12)).astype(np.float32)
Y = rng.integers(0, 5, (STEPS, 2, SIZE * LOCAL))


class Net(dg.nn.Module):
    def __init__(self, hidden=32):
        super().__init__()
        self.a = dg.nn.Linear(12, hidden)
        self.b = dg.nn.Linear(hidden, hidden)
        self.c = dg.nn.Linear(hidden, 5)
        self.unused = dg.nn.Linear(3, 3)   # no gradient: must not stall the reduction
        self.register_buffer("scale", dg.ones(hidden))

    def forward(self, x):
        h = dg.tanh(self.a(x)) * self.scale
        return self.c(dg.relu(self.b(h)))


def make(seed, hidden=32):
    """A model initialised from ``seed``, its buffer too (DDP must broadcast rank 0's)."""
    dg.manual_seed(seed)
    net = Net(hidden)
    net.scale.mul_(1 + seed)
    return net


def flat(model):
    return np.concatenate([p.detach().numpy().ravel() for p in model.parameters()])


def batch(step, micro, ranks):
    rows = np.concatenate([np.arange(r * LOCAL, (r + 1) * LOCAL) for r in ranks])
    return dg.tensor(X[step, micro, rows]), dg.tensor(Y[step, micro, rows])


def train(model, ranks, micro_steps=1, sync=None, compiled=False):
    opt = dg.optim.Adam(model.parameters(), lr=1e-2)

    def step(x, y, last):
        context = sync() if (sync is not None and not last) else contextlib.nullcontext()
        with context:
            loss = dg.nn.functional.cross_entropy(model(x), y) / micro_steps
            loss.backward()
        return loss

    def full_step(s):
        opt.zero_grad()
        for m in range(micro_steps):
            step(*batch(s, m, ranks), m == micro_steps - 1)
        opt.step()

    def one(x, y):
        opt.zero_grad()
        loss = dg.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss
    run = dg.compile(one) if compiled else one
    for s in range(STEPS):
        if micro_steps == 1:
            run(*batch(s, 0, ranks))
        else:
            full_step(s)
    return run


def check(name, got, want):
    rel = np.max(np.abs(got - want)) / np.max(np.abs(want))
    assert rel <= 1e-6, f"{name}: parameters differ by {rel:.2e} relative"
    ok(f"{name} (rel {rel:.1e})")


ref_model = make(0)
train(ref_model, range(SIZE))
want = flat(ref_model)

for cap in (25, 1e-4):
    ddp = DDP(make(RANK), bucket_cap_mb=cap)
    assert len(ddp._buckets) >= (4 if cap < 1 else 1)
    train(ddp, [RANK])
    check(f"ddp bucket_cap_mb={cap}", flat(ddp.module), want)
    assert ddp.module.unused.weight.grad is None
    np.testing.assert_array_equal(ddp.module.scale.numpy(), np.ones(32))

# gradients as views of the buckets: the same result, and .grad shares the bucket's memory,
# eager and compiled (where the bucket is filled and reduced in place, as eagerly)
for set_to_none, compiled in ((True, False), (False, False), (True, True), (False, True)):
    model = make(RANK)
    model.unused.requires_grad_(not compiled)   # (a compiled DDP step needs every gradient)
    ddp = DDP(model, bucket_cap_mb=1e-3, gradient_as_bucket_view=True)
    opt = dg.optim.Adam(ddp.parameters(), lr=1e-2)

    def view_step(x, y):
        opt.zero_grad(set_to_none=set_to_none)
        dg.nn.functional.cross_entropy(ddp(x), y).backward()
        opt.step()
    run = dg.compile(view_step) if compiled else view_step
    for s in range(STEPS):
        run(*batch(s, 0, [RANK]))
    name = "compiled " if compiled else ""
    check(f"{name}gradient_as_bucket_view set_to_none={set_to_none}", flat(ddp.module), want)
    bucket = ddp._bucket_of[id(ddp.module.a.weight)]
    assert np.shares_memory(ddp.module.a.weight.grad.numpy(), bucket.flat)
    if compiled:
        assert "k_pack_bucket(" in run.code and "k_cat(" not in run.code, run.code

# no_sync: two micro-batches per step, the first without communication == one big batch
ref_model = make(0)
train(ref_model, range(SIZE), micro_steps=2)
ddp = DDP(make(RANK), bucket_cap_mb=1e-3)
train(ddp, [RANK], micro_steps=2, sync=ddp.no_sync)
check("no_sync accumulation", flat(ddp.module), flat(ref_model))

# the whole step compiled: the bucket allreduces are nodes of the step's graph
# (a parameter without gradient is an error there: whether another rank has one for it is
# known only at run time)
ref_model = make(0)
train(ref_model, range(SIZE))
model = make(RANK)
model.unused.requires_grad_(False)
ddp = DDP(model, bucket_cap_mb=1e-3)
run = train(ddp, [RANK], compiled=True)
check("compiled ddp", flat(ddp.module), flat(ref_model))
assert str(run.graph).count("= all_reduce(") == len(ddp._buckets), str(run.graph)

# compiled with buckets large enough not to be joined (the first closes at 1 MB): the first
# starts during the backward and is polled and waited on before the update; the same
# parameters as eager DDP (a 600-wide layer's sums split by rank round differently from
# one process's, 2e-5 after 10 Adam steps, eager as compiled)
eager = DDP(make(RANK, hidden=600))
eager.module.unused.requires_grad_(False)
train(eager, [RANK])
model = make(RANK, hidden=600)
model.unused.requires_grad_(False)
ddp = DDP(model)
run = train(ddp, [RANK], compiled=True)
check("compiled ddp overlapped", flat(ddp.module), flat(eager.module))
assert len(ddp._buckets) == 2 and "k_all_reduce_start(" in run.code, run.code
assert "k_all_reduce_progress(" in run.code and "k_all_reduce_wait(" in run.code, run.code
# each bucket filled in its place in one pass, reduced there (no copy in or out of the
# allreduce), and copied into .grad: a .grad kept across steps does not change
assert run.code.count("k_pack_bucket(") == 2 and "k_cat(" not in run.code, run.code
mine = dg.tensor(flat(ddp.module))
everyone = [dg.zeros_like(mine) for _ in range(SIZE)]
dist.all_gather(everyone, mine)
assert all(np.array_equal(t.numpy(), mine.numpy()) for t in everyone), "ranks differ"
kept = ddp.module.a.weight.grad
before = kept.numpy().copy()
assert not any(np.shares_memory(kept.numpy(), b.flat) for b in ddp._buckets)
train(ddp, [RANK], compiled=True)
np.testing.assert_array_equal(kept.numpy(), before)
# ZeroRedundancyOptimizer: each rank keeps and updates half of Adam's state, the owners
# broadcast the new values: the same parameters as the unsharded optimiser
from dualgraph.distributed.optim import ZeroRedundancyOptimizer   # noqa: E402

for sharded, compiled in ((False, False), (True, False), (True, True)):
    net = make(RANK)
    net.unused.requires_grad_(False)   # (a compiled DDP step needs every gradient)
    model = DDP(net, bucket_cap_mb=1e-3)
    opt = (ZeroRedundancyOptimizer(model.parameters(), optimizer_class=dg.optim.Adam, lr=1e-2)
           if sharded else dg.optim.Adam(model.parameters(), lr=1e-2))

    def zero_step(x, y):
        opt.zero_grad()
        dg.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    run = dg.compile(zero_step) if compiled else zero_step
    for s in range(STEPS):
        run(*batch(s, 0, [RANK]))
    if not sharded:
        unsharded = flat(model.module)
        continue
    owned = [p for p in model.parameters() if opt.owner[id(p)] == RANK and p.grad is not None]
    assert 0 < len(opt.state) == len(owned) < len(list(model.parameters())), len(opt.state)
    if not compiled:
        check("ZeroRedundancyOptimizer", flat(model.module), unsharded)
        continue
    # the sharded update and the owners' broadcasts are nodes of the step's graph (one per
    # shard, after DDP's broadcast of the buffer)
    assert str(run.graph).count("= broadcast(") == 1 + SIZE, str(run.graph)
    check("compiled ZeroRedundancyOptimizer", flat(model.module), unsharded)


# -- buffers of several dtypes, different on every rank: rank 0's everywhere, in one message --
def norm_net(seed):
    dg.manual_seed(seed)
    net = dg.nn.Sequential(dg.nn.Linear(12, 8), dg.nn.BatchNorm1d(8), dg.nn.Linear(8, 5))
    net.register_buffer("flag", dg.tensor([seed % 2 == 0]))
    net.register_buffer("wide", dg.tensor(np.full((2, 3), seed, np.float64)))
    return net


def state(module):
    return [t.numpy().copy() for t in module.state_dict().values()]


def as_float64(module):
    return np.concatenate([x.astype(np.float64).ravel() for x in state(module)])


def rank0s(module):
    """Rank 0's state, on every rank (every rank calls it: a broadcast)."""
    values = dg.tensor(as_float64(module))
    dist.broadcast(values, 0)
    return values.numpy()


from dualgraph.ops import collective   # noqa: E402

calls = collective.comm().calls
model = DDP(norm_net(RANK))
assert collective.comm().calls - calls == 1, "parameters and buffers: one broadcast"
assert all(x.dtype == y.dtype and np.array_equal(x, y)
           for x, y in zip(state(model.module), state(norm_net(0))))
model(batch(0, 0, [RANK])[0])   # (training: each rank its own running statistics)
differ = not np.array_equal(as_float64(model.module), rank0s(model.module))
assert differ == (RANK != 0)
model.eval()
model(batch(0, 0, [RANK])[0])   # broadcasts the buffers first, then changes nothing
assert np.array_equal(as_float64(model.module), rank0s(model.module)), "buffers differ"
ok("buffers of several dtypes broadcast in one message")
dist.destroy_process_group()
