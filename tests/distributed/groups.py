"""Run by tests/test_distributed.py as ``mpiexec -n N python groups.py`` (N = 2 or 4):
process sub-groups. Every rank makes the group of the even ranks and the group of the odd
ranks (on 2 ranks, groups of one); collectives on each, eager, async, differentiated and
compiled, equal NumPy over the group's members; non-members get -1 and an error; a
mismatched new_group is an error on every rank; DistributedDataParallel over a group
(eager, compiled, with the fp16 hook compiled, with ZeroRedundancyOptimizer over the group)
equals one process on the rows of the group's ranks; on 4 ranks, a member that does not arrive
makes the other fail at the deadline with an error naming group and global ranks. Prints
``OK <check>`` per check on rank 0."""
import datetime

import numpy as np

import dualgraph as dg
import dualgraph.distributed as dist
import dualgraph.distributed.functional as F
from dualgraph.distributed import mpi
from dualgraph.ops import collective

dist.init_process_group("mpi")
RANK, SIZE = dist.get_rank(), dist.get_world_size()
evens = dist.new_group([r for r in range(SIZE) if r % 2 == 0])
odds = dist.new_group(range(1, SIZE, 2))
mine, other = (evens, odds) if RANK % 2 == 0 else (odds, evens)
members = dist.get_process_group_ranks(mine)


def ok(check):
    dist.barrier()   # (every rank got here: their asserts passed)
    if RANK == 0:
        print(f"OK {check}", flush=True)


# -- ranks ------------------------------------------------------------------------------------
assert members == list(range(RANK % 2, SIZE, 2)), members
assert dist.get_rank(mine) == members.index(RANK) == mine.rank()
assert dist.get_world_size(mine) == len(members)
assert dist.get_rank(other) == dist.get_world_size(other) == -1
assert other == dist.GroupMember.NON_GROUP_MEMBER and mine != dist.GroupMember.NON_GROUP_MEMBER
assert dist.get_group_rank(mine, RANK) == dist.get_rank(mine)
assert dist.get_global_rank(mine, 0) == members[0]
whole = dist.new_group(range(SIZE))   # all ranks: a group of its own, not the world
assert whole != dist.group.WORLD and dist.get_rank(whole) == RANK and whole.key == tuple(
    range(SIZE)) and dist.group.WORLD is dist.GroupMember.WORLD
assert dist.get_process_group_ranks(dist.group.WORLD) == list(range(SIZE))
ok("ranks")

# -- collectives against NumPy over the group's members ---------------------------------------
values = {r: np.arange(6, dtype=np.float32).reshape(2, 3) * (r + 1) for r in range(SIZE)}
want_sum = sum(values[r] for r in members)
t = dg.tensor(values[RANK])
dist.all_reduce(t, group=mine)
np.testing.assert_allclose(t.numpy(), want_sum)
t = dg.tensor(values[RANK])
work = dist.all_reduce(t, op=dist.ReduceOp.MAX, group=mine, async_op=True)
work.wait()
np.testing.assert_allclose(t.numpy(), values[members[-1]])
big = dg.tensor(np.full(40_000, RANK + 1.0, np.float32))   # (the out-of-place size)
dist.all_reduce(big, group=mine)
np.testing.assert_allclose(big.numpy(), sum(r + 1.0 for r in members))
t = dg.tensor(values[RANK])
dist.broadcast(t, src=members[-1], group=mine)   # src is a global rank
np.testing.assert_allclose(t.numpy(), values[members[-1]])
parts = [dg.zeros(2, 3) for _ in members]
dist.all_gather(parts, dg.tensor(values[RANK]), group=mine)
for p, r in zip(parts, members):
    np.testing.assert_allclose(p.numpy(), values[r])
out = dg.zeros(3)
dist.reduce_scatter_tensor(out, dg.tensor(np.ones((len(members), 3), np.float32) * (RANK + 1)),
                           group=mine)
np.testing.assert_allclose(out.numpy(), sum(r + 1.0 for r in members))
t = dg.tensor(values[RANK])
dist.reduce(t, dst=members[0], group=mine)
np.testing.assert_allclose(t.numpy(), want_sum if RANK == members[0] else values[RANK])
if len(members) > 1:   # point to point between the group's first two members
    first, second = members[:2]
    if RANK == first:
        dist.send(dg.tensor(values[RANK]), dst=second, group=mine, tag=3)
    elif RANK == second:
        got = dg.zeros(2, 3)
        dist.irecv(got, src=first, group=mine, tag=3).wait()
        np.testing.assert_allclose(got.numpy(), values[first])
dist.barrier(group=mine)
ok("collectives")

# -- non-members, bad arguments, a mismatched new_group -----------------------------------------
for call in (lambda: dist.all_reduce(dg.ones(2), group=other),
             lambda: dist.barrier(group=other),
             lambda: F.all_gather(dg.ones(2), group=other)):
    try:
        call()
        raise AssertionError("a non-member's collective did not raise")
    except RuntimeError as e:
        assert f"global rank {RANK} is not a member of the process group" in str(e), e
try:
    dist.broadcast(dg.ones(2), src=dist.get_global_rank(other, 0), group=mine)
    raise AssertionError("a src outside the group did not raise")
except ValueError as e:
    assert "is not a rank of the group of global ranks" in str(e), e
try:
    dist.new_group([RANK])   # every rank a group of itself: the ranks' calls differ
    raise AssertionError("a mismatched new_group did not raise")
except dist.DistributedError as e:
    assert "called it with other ranks" in str(e), e
ok("non-members")

# -- two groups of the same ranks: communicators of their own ---------------------------------
# Each member starts the same operations on the two groups in its own order (the first
# member a's then b's, the others b's then a's) and waits in yet another: on one shared
# communicator MPI would match A's allreduce with B's and the sends across the groups.
def twins(ranks):
    a, b = dist.new_group(ranks), dist.new_group(ranks, timeout=7)
    assert a != b and b.key[:-1] == tuple(ranks) and f" {b.key[-1]})" in repr(b), (a, b)
    assert collective.comm(b.key).timeout == 7.0 != collective.comm(a.key).timeout
    first = dist.get_rank(a) == 0
    ta, tb = dg.tensor(np.full(40_000, RANK + 1.0, np.float32)), dg.tensor(
        np.full(3, 10.0 * (RANK + 1), np.float32))
    ba, bb = dg.tensor(np.full(5, RANK, np.float32)), dg.tensor(np.full(5, -RANK, np.float32))
    starts = [lambda: dist.all_reduce(ta, group=a, async_op=True),
              lambda: dist.broadcast(ba, src=ranks[-1], group=a, async_op=True),
              lambda: dist.all_reduce(tb, op=dist.ReduceOp.MAX, group=b, async_op=True),
              lambda: dist.broadcast(bb, src=ranks[0], group=b, async_op=True)]
    works = [start() for start in (starts if first else starts[2:] + starts[:2])]
    for w in works[::-1] if first else works[1::2] + works[::2]:
        w.wait()
    np.testing.assert_allclose(ta.numpy(), sum(r + 1.0 for r in ranks))
    np.testing.assert_allclose(tb.numpy(), 10.0 * (ranks[-1] + 1))
    np.testing.assert_allclose(ba.numpy(), ranks[-1])
    np.testing.assert_allclose(bb.numpy(), -ranks[0])
    if len(ranks) > 1:   # a send on each group, with the same tag, received in reverse order
        if RANK == ranks[0]:
            sends = [dist.isend(dg.tensor(np.full(4, v, np.float32)), dst=ranks[1], group=g,
                                tag=9) for v, g in ((1.0, a), (2.0, b))]
            for w in sends:
                w.wait()
        elif RANK == ranks[1]:
            got_b, got_a = dg.zeros(4), dg.zeros(4)
            wb = dist.irecv(got_b, src=ranks[0], group=b, tag=9)
            dist.irecv(got_a, src=ranks[0], group=a, tag=9).wait()
            wb.wait()
            np.testing.assert_allclose(got_a.numpy(), 1.0)
            np.testing.assert_allclose(got_b.numpy(), 2.0)
    dist.destroy_process_group(a)
    dist.destroy_process_group(b)


twins(tuple(range(SIZE)))
for ranks in ([r for r in range(SIZE) if r % 2 == 0], list(range(1, SIZE, 2))):
    if RANK in ranks:
        twins(tuple(ranks))
    else:   # (every rank makes every group)
        dist.new_group(ranks), dist.new_group(ranks, timeout=7)
ok("groups of the same ranks are independent")

# -- gradients through group collectives, and a compiled function with them ----------------------
x = dg.tensor(values[RANK], requires_grad=True)
y = F.all_reduce(x * x, group=mine)
y.sum().backward()   # d/dx of sum over members of their x^2, summed over members' outputs
np.testing.assert_allclose(x.grad.numpy(), 2 * values[RANK] * len(members), rtol=1e-6)
g = F.all_gather_tensor(x, group=mine)
assert tuple(g.shape) == (len(members), 2, 3)


def step(a):
    s = F.all_reduce(a * 2, group=mine)
    return s, F.broadcast(a, src=members[0], group=mine), F.all_reduce(a)


compiled = dg.compile(step)
for got, want in zip(compiled(dg.tensor(values[RANK])), step(dg.tensor(values[RANK]))):
    np.testing.assert_allclose(got.numpy(), want.numpy())
printed = str(compiled.graph)
assert f"group={tuple(members)}" in printed, printed
ok("gradients and compiled")

# -- data parallelism over a group: DDP (eager, compiled, a hook compiled) and ZeRO ------------
from dualgraph.distributed.algorithms.ddp_comm_hooks import default_hooks  # noqa: E402
from dualgraph.distributed.optim import ZeroRedundancyOptimizer  # noqa: E402
from dualgraph.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

rng = np.random.default_rng(0)
X = rng.standard_normal((4, SIZE, 3, 5)).astype(np.float32)   # step, rank, rows, features
Y = rng.integers(0, 2, (4, SIZE, 3))


def net(seed):
    dg.manual_seed(seed)
    return dg.nn.Sequential(dg.nn.Linear(5, 8), dg.nn.Tanh(), dg.nn.Linear(8, 2))


def train(model, rows, compiled=False, zero=False):
    params = model.parameters()
    opt = (ZeroRedundancyOptimizer(params, dg.optim.Adam, process_group=mine, lr=0.05) if zero
           else dg.optim.Adam(params, lr=0.05))

    def step(x, y):
        opt.zero_grad()
        dg.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    run = dg.compile(step) if compiled else step
    for s in range(len(X)):
        run(dg.tensor(X[s, rows].reshape(-1, 5)), dg.tensor(Y[s, rows].reshape(-1)))
    return np.concatenate([p.detach().numpy().ravel() for p in model.parameters()]), run


want, _ = train(net(members[0]), members)   # one process on the rows of the group
for name, hook, state, compiled, zero in (
        ("eager", None, None, False, False), ("compiled", None, None, True, False),
        ("allreduce_hook", default_hooks.allreduce_hook, mine, False, False),
        # (a built-in hook whose state names no group reduces over the DDP's)
        ("fp16 hook compiled", default_hooks.fp16_compress_hook, None, True, False),
        ("ZeroRedundancyOptimizer", None, None, False, True)):
    # (rank 0 of the group's values win; tiny buckets: a compiled step overlaps them)
    model = DDP(net(RANK), process_group=mine, bucket_cap_mb=1e-4)
    if hook is not None:
        model.register_comm_hook(state, hook)
    got, run = train(model, [RANK], compiled, zero)
    tolerance = 1e-3 if "fp16" in name else 1e-6   # (fp16 rounds the gradients)
    rel = np.max(np.abs(got - want)) / np.max(np.abs(want))
    assert rel <= tolerance, f"DDP over {members}, {name}: parameters differ by {rel:.1e}"
    if compiled and len(members) > 1:
        assert f"group={tuple(members)}" in str(run.graph), run.graph
        if hook is None:   # (the fp16 casts' allreduces are joined into one, at the end)
            assert "k_all_reduce_start(" in run.code, run.code
    ok(f"ddp over a group {name}")

# -- a member that does not arrive: the deadline names group and global ranks ---------------------
if SIZE >= 4:
    evens = dist.new_group(range(0, SIZE, 2), timeout=datetime.timedelta(seconds=1))
    odds = dist.new_group(range(1, SIZE, 2), timeout=1.0)   # (the same ranks, a 1 s deadline)
    mine = evens if RANK % 2 == 0 else odds
    assert collective.comm(mine.key).timeout == 1.0
    for n in (3, 16384):   # (64 KB: reduced out of place, mpi.OUT_OF_PLACE_BYTES)
        if dist.get_rank(mine) == 0:
            try:
                dist.all_reduce(dg.ones(n), group=mine)
                raise AssertionError("the deadline did not expire")
            except dist.DeadlineError as e:
                message = str(e)
                assert f"group rank 1 (global rank {members[1]}) did not arrive" in message, (
                    message)
                assert f"on group rank 0 (global rank {RANK}) of {len(members)}" in message, (
                    message)
                assert f"float32[{n}]" in message and "groups.py:" in message, message
            mpi._failed[0] = False   # (the late member's allreduce completes this one below)
        dist.barrier()
        if dist.get_rank(mine) == 1:
            dist.all_reduce(dg.ones(n), group=mine)   # late: after rank 0's deadline
    ok("deadline names group and global ranks")

dist.destroy_process_group(mine)
dist.destroy_process_group()
