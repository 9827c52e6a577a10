"""dg.distributed on two MPI ranks: each check runs ``mpiexec -n 2 python <script>`` (the
scripts are in ``tests/distributed/``, one rank per core, ``DUALGRAPH_NUM_THREADS=1``) and
reads what the ranks print; in-process checks cover a world of one process.

Skipped, with the reason, where mpi4py (the ``distributed`` extra) is not installed.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import dualgraph as dg

HERE = Path(__file__).parent
ROOT = HERE.parent

try:
    import mpi4py  # noqa: F401
    MPIEXEC = shutil.which("mpiexec") or str(Path(sys.executable).parent / "mpiexec")
    MISSING = None if Path(MPIEXEC).exists() else "mpiexec is not on PATH"
except ImportError:
    MISSING = "mpi4py is not installed: pip install 'dualgraph[distributed]'"
needs_mpi = pytest.mark.skipif(MISSING is not None, reason=str(MISSING))


def mpiexec(script: str, *args, ranks: int = 2, timeout: float = 120, flags=(), env=None):
    env = dict(os.environ, PYTHONPATH=str(ROOT), DUALGRAPH_NUM_THREADS="1", **(env or {}))
    env.pop("PYTEST_XDIST_WORKER", None)
    return subprocess.run([MPIEXEC, *flags, "-n", str(ranks), sys.executable,
                           str(HERE / "distributed" / script), *map(str, args)],
                          capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)


def ok_lines(result, ranks: int = 2) -> list[str]:
    assert result.returncode == 0, result.stdout + result.stderr
    lines = [line for line in result.stdout.splitlines() if line.startswith("OK ")]
    return lines


@needs_mpi
def test_collectives_against_numpy_async_gradients_and_compiled():
    lines = ok_lines(mpiexec("collectives.py"))
    for check in ("dtypes and sizes", "non-contiguous", "async", "gradients", "compiled"):
        assert sum(line.startswith(f"OK {check}") for line in lines) == 1, lines


@needs_mpi
@pytest.mark.parametrize("ranks", [2, 4])
def test_process_groups_collectives_non_members_and_deadlines(ranks):
    """new_group over the even and the odd ranks (groups of one on 2 ranks, real MPI
    sub-communicators on 4, oversubscribed: about 14 s on 2 cores)."""
    lines = ok_lines(mpiexec("groups.py", ranks=ranks))
    checks = ["ranks", "collectives", "non-members", "gradients and compiled"] + [
        f"ddp over a group {name}" for name in ("eager", "compiled", "allreduce_hook",
                                                "fp16 hook compiled", "ZeroRedundancyOptimizer")]
    for check in checks + ["deadline names group and global ranks"] * (ranks >= 4):
        assert sum(line.startswith(f"OK {check}") for line in lines) == 1, lines


@needs_mpi
def test_sync_batch_norm_equals_batch_norm_on_the_whole_batch():
    lines = ok_lines(mpiexec("sync_norm.py"))
    for check in ("sync batch norm eager", "sync batch norm compiled",
                  "ddp with converted sync batch norm"):
        assert sum(line == f"OK {check}" for line in lines) == 1, lines


@needs_mpi
def test_ddp_equals_one_process_on_the_whole_batch():
    lines = ok_lines(mpiexec("ddp.py"))
    for check in ("ddp bucket_cap_mb=25", "ddp bucket_cap_mb=0.0001", "no_sync accumulation",
                  "compiled ddp (", "compiled ddp overlapped", "ZeroRedundancyOptimizer",
                  "compiled ZeroRedundancyOptimizer",
                  "gradient_as_bucket_view set_to_none=True",
                  "gradient_as_bucket_view set_to_none=False",
                  "compiled gradient_as_bucket_view set_to_none=True",
                  "compiled gradient_as_bucket_view set_to_none=False",
                  "buffers of several dtypes broadcast in one message"):
        assert sum(line.startswith(f"OK {check}") for line in lines) == 1, lines


@needs_mpi
@pytest.mark.parametrize("transport", ["shm", "mpi"])
def test_allreduce_through_shared_memory_or_mpi(transport):
    """Where the ranks share a machine, allreduces (and DDP's buckets) go through an MPI
    shared-memory window; DUALGRAPH_DIST_SHM=0 keeps them on MPI. Either way results equal
    NumPy's and are bit-identical on every rank, also with many in flight; DDP's averages
    go straight into the gradients' own arrays."""
    env = {"DUALGRAPH_DIST_SHM": "0" if transport == "mpi" else "1"}
    lines = ok_lines(mpiexec("shm.py", transport, env=env))
    for check in ("allreduce equals NumPy", "asynchronous allreduces", "out of place",
                  "ddp buckets", "ddp gradients summed into their own arrays",
                  "windows freed at destroy_process_group"):
        assert sum(line.startswith(f"OK {check}") for line in lines) == 1, lines


@needs_mpi
def test_compression_hooks_converge_like_plain_allreduce():
    lines = ok_lines(mpiexec("hooks.py"))
    for hook in ("user hook", "fp16_compress_hook", "bf16_compress_hook", "topk_hook",
                 "powerSGD_hook", "compiled fp16_compress_hook", "compiled bf16_compress_hook",
                 "compiled topk_hook", "compiled powerSGD_hook (",
                 "compiled powerSGD_hook in its warm-up raises",
                 "converged compiled topk_hook", "converged compiled powerSGD_hook"):
        assert sum(line.startswith(f"OK {hook}") for line in lines) == 1, lines


@needs_mpi
@pytest.mark.parametrize("mode", ["freeze", "freeze-all_reduce", "freeze-shm-all_reduce"])
def test_a_frozen_rank_ends_the_job_with_the_deadline_error(tmp_path, mode):
    """Rank 1 stops (SIGSTOP: hung, or cut off) mid-step; rank 0 fails with DeadlineError
    naming the operation, its line and rank 1 at the 2 s deadline, and the job ends (in
    DDP's bucket reduction, through shared memory, and in a plain blocking all_reduce, a
    small one by MPI and a 64 KiB one through shared memory)."""
    report = tmp_path / "report.txt"
    result = mpiexec("fault.py", mode, report, timeout=60)
    assert result.returncode != 0
    assert report.exists(), result.stdout + result.stderr
    waited, message = report.read_text().split("\n", 1)
    assert 1.9 <= float(waited) <= 6.0, waited   # (the backward's own time on a busy machine)
    assert message.startswith("DeadlineError: all_reduce(SUM)"), message
    assert "rank 1 did not arrive" in message and "fault.py:" in message, message
    assert "unreachable" not in result.stdout


@needs_mpi
def test_a_killed_rank_ends_the_job(tmp_path):
    """Rank 1 is killed mid-step. mpiexec (Hydra) kills the whole job when a rank dies;
    with -disable-auto-cleanup it signals the survivors (SIGUSR1), and rank 0's wait then
    fails at once with the DeadlineError, unless Hydra's cleanup kills it first (a race in
    Hydra). Either way the job ends well within the deadline instead of hanging."""
    report = tmp_path / "report.txt"
    result = mpiexec("fault.py", "kill", report, timeout=60, flags=["-disable-auto-cleanup"])
    assert result.returncode != 0
    assert "unreachable" not in result.stdout
    if report.exists():
        waited, message = report.read_text().split("\n", 1)
        assert float(waited) <= 2.5, waited
        assert message.startswith("DeadlineError: all_reduce(SUM)"), message
        assert "rank 1 did not arrive" in message, message


def test_a_lone_process_is_a_world_of_one(monkeypatch):
    """Without mpiexec (and here without MPI at all) the collectives are copies."""
    import dualgraph.distributed as dist
    from dualgraph.distributed.mpi import Communicator
    from dualgraph.ops import collective
    monkeypatch.setattr(collective.STATE, "comm", None)
    with pytest.raises(RuntimeError, match="init_process_group"):
        dist.get_rank()
    monkeypatch.setattr(collective.STATE, "comm", Communicator(None, 5.0))
    assert (dist.get_rank(), dist.get_world_size()) == (0, 1)
    t = dg.arange(4).float()
    work = dist.all_reduce(t, op=dist.ReduceOp.AVG, async_op=True)
    assert work.wait() and work.is_completed()
    np.testing.assert_array_equal(t.numpy(), [0, 1, 2, 3])
    parts = [dg.zeros(4)]
    dist.all_gather(parts, t)
    np.testing.assert_array_equal(parts[0].numpy(), [0, 1, 2, 3])
    model = dg.nn.parallel.DistributedDataParallel(dg.nn.Linear(3, 2), bucket_cap_mb=1e-5)
    model(dg.ones(2, 3)).sum().backward()
    np.testing.assert_allclose(model.module.bias.grad.numpy(), [2, 2])


def test_shared_memory_is_chosen_where_every_rank_shares_the_machine(monkeypatch):
    """DUALGRAPH_DIST_SHM: unset, shared memory where MPI says every rank is on this
    machine; 0, never; 1, required (an error naming the ranks where they span machines)."""
    from dualgraph.distributed.mpi import SHM_ENV, Communicator, DistributedError
    comm = Communicator.__new__(Communicator)   # (the decision only: no MPI here)
    comm.mpi, comm.size, comm.rank, comm.ranks = object(), 4, 0, None
    for node, env, want in [(4, None, True), (2, None, False), (4, "0", False),
                            (4, "1", True)]:
        comm.node_size = node
        if env is None:
            monkeypatch.delenv(SHM_ENV, raising=False)
        else:
            monkeypatch.setenv(SHM_ENV, env)
        assert comm._shm_wanted() is want, (node, env)
    comm.node_size = 2
    with pytest.raises(DistributedError, match=r"only 2 of the 4 ranks of rank 0 of 4 run on "
                       r"this machine; unset it \(or DUALGRAPH_DIST_SHM=0\)"):
        comm._shm_wanted()


def test_process_groups_in_a_lone_process(monkeypatch, tmp_path):
    """A world of one: each new group its own; bad ranks and bad groups are clear errors;
    a graph over a sub-group prints and serialises its group attr; errors of a sub-group's
    communicator name group and global ranks."""
    import dualgraph.distributed as dist
    import dualgraph.distributed.functional as F
    from dualgraph.distributed.mpi import Communicator, Pending
    from dualgraph.graph import serialize
    from dualgraph.ops import collective
    monkeypatch.setattr(collective, "STATE", collective._State())
    collective.STATE.comm = Communicator(None, 5.0)
    ones, again = dist.new_group([0]), dist.new_group()   # groups of their own, as in torch
    assert ones.key == (0,) and again.key == (0, "#1") and ones != again != dist.group.WORLD
    assert dist.get_rank(again) == 0 and repr(again) == "ProcessGroup(ranks=[0] #1)"
    with pytest.raises(RuntimeError, match=r"not a member of the process group of global "
                       r"ranks \[0\] #7 \(or the group was destroyed\)"):
        dist.all_reduce(dg.ones(2), group=dist.ProcessGroup((0,), (0, "#7")))
    assert dist.get_process_group_ranks(dist.group.WORLD) == [0]
    assert dist.get_rank(dist.group.WORLD) == 0 and dist.get_world_size(dist.group.WORLD) == 1
    for bad in ([1], [0, 0], []):
        with pytest.raises(ValueError, match="distinct ranks of the world"):
            dist.new_group(bad)
    with pytest.raises(TypeError, match="pass a group made by dist.new_group"):
        dist.all_reduce(dg.ones(2), group=[0])
    with pytest.raises(ValueError, match="src=3 is not a rank of the group"):
        dist.broadcast(dg.ones(2), src=3, group=dist.group.WORLD)
    # a sub-group's communicator, as a member of ranks (2, 5) sees it (group rank 0)
    sub = Communicator(None, 5.0, None, (2, 5))
    collective.STATE.groups[(2, 5)] = sub
    group = dist.ProcessGroup((2, 5))
    assert dist.get_process_group_ranks(group) == [2, 5]
    assert dist.get_global_rank(group, 1) == 5 and dist.get_group_rank(group, 5) == 1
    compiled = dg.compile(lambda x: F.all_reduce(x * 2, group=group))
    np.testing.assert_array_equal(compiled(dg.ones(3)).numpy(), [2, 2, 2])
    assert "all_reduce(%mul, reduction='SUM', group=(2, 5))" in str(compiled.graph)
    serialize.save(compiled.graph, tmp_path / "g.json")
    assert str(serialize.load(tmp_path / "g.json")) == str(compiled.graph)
    sub.size = 2   # (as if the other member were there: it names it)
    pending = Pending(sub, "all_reduce(SUM)", np.ones(3, np.float32), 7, [], None)
    pending.started = 0.0
    monkeypatch.setattr("dualgraph.distributed.mpi._failed", [False])   # (set by the error)
    with pytest.raises(dist.DeadlineError, match=r"on group rank 0 \(global rank 2\) of 2 in "
                       r"the group of global ranks \[2, 5\].*group rank 1 \(global rank 5\) "
                       "did not arrive"):
        sub._expired(pending)


def test_post_accumulate_grad_hooks_and_end_of_backward_callbacks():
    """What data parallelism is built on: a hook after .grad is accumulated (it sees the
    sum), and a callback once the whole backward is done."""
    from dualgraph.autograd.engine import queue_callback
    w = dg.ones(3, requires_grad=True)
    events = []

    def hook(p):
        events.append(("grad", p.grad.numpy().tolist()))
        if len(events) == 1:
            queue_callback(lambda: events.append(("done", w.grad.numpy().tolist())))
    handle = w.register_post_accumulate_grad_hook(hook)
    ((w * 2).sum() + (w * 3).sum()).backward()
    assert events == [("grad", [5, 5, 5]), ("done", [5, 5, 5])]
    handle.remove()
    (w * 2).sum().backward()
    assert len(events) == 2
    with pytest.raises(RuntimeError, match="leaf"):
        (w * 2).register_post_accumulate_grad_hook(hook)
    with pytest.raises(RuntimeError, match="during backward"):
        queue_callback(lambda: None)


def test_small_allreduces_are_joined_into_one(monkeypatch):
    """Communication fusion: a run of allreduces of one reduction and dtype becomes one
    (compiled == eager); a result read by the next allreduce, or another reduction, ends
    the run."""
    import dualgraph.distributed.functional as F
    from dualgraph.distributed.mpi import Communicator
    from dualgraph.ops import collective
    from dualgraph.passes import fuse_all_reduces
    monkeypatch.setattr(collective.STATE, "comm", Communicator(None, 5.0))

    def step(a, b, c):
        x = F.all_reduce(a * 2)
        y = F.all_reduce(b)
        z = F.all_reduce(x + c)    # reads x: a new run
        w = F.all_reduce(c.sum(), "MAX")
        return x, y, z, w
    compiled = dg.compile(step)
    args = [dg.randn(2, 3), dg.randn(4), dg.randn(2, 3)]
    for got, want in zip(compiled(*args), step(*args)):
        np.testing.assert_array_equal(got.numpy(), want.numpy())
    calls = compiled.code.count("k_all_reduce(") + compiled.code.count("k_all_reduce_start(")
    assert calls == 3, compiled.code
    fused, report = fuse_all_reduces(compiled.graph)
    assert report.counts == {"joined": 1}
    assert "cat(%reshape, %b, dim=0)" in str(fused), fused
    assert fuse_all_reduces(compiled.graph, bucket_bytes=32)[1].counts == {}

    def chained(a, b):   # a view of one allreduce's result prepares the next one's input
        x = F.all_reduce(a * 2)
        y = F.all_reduce(b)
        return y, F.all_reduce(x.reshape(-1) + 1)
    compiled = dg.compile(chained)
    for got, want in zip(compiled(*args[:2]), chained(*args[:2])):
        np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_hook_graph_forms_in_a_lone_process(monkeypatch):
    """A compiled DDP step with the top-k or PowerSGD hook (their graph forms, with their
    state written back by the graph) equals the eager hook over 4 steps in a world of one;
    a hook without a graph form raises under dg.compile, naming it."""
    from dualgraph.distributed.algorithms.ddp_comm_hooks import powerSGD_hook, topk_hook
    from dualgraph.distributed.mpi import Communicator
    from dualgraph.nn.parallel import DistributedDataParallel as DDP
    from dualgraph.ops import collective
    monkeypatch.setattr(collective.STATE, "comm", Communicator(None, 5.0))
    rng = np.random.default_rng(0)
    batches = [(dg.tensor(rng.standard_normal((8, 6), dtype=np.float32)),
                dg.tensor(rng.integers(0, 3, 8))) for _ in range(4)]

    def train(hook, state, compiled):
        dg.manual_seed(0)
        model = DDP(dg.nn.Sequential(dg.nn.Linear(6, 16), dg.nn.ReLU(), dg.nn.Linear(16, 3)),
                    bucket_cap_mb=1e-4)
        model.register_comm_hook(state, hook)
        opt = dg.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

        def step(x, y):
            opt.zero_grad()
            dg.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
        run = dg.compile(step) if compiled else step
        for x, y in batches:
            run(x, y)
        return np.concatenate([p.detach().numpy().ravel() for p in model.parameters()])

    for hook, make_state in [
            (topk_hook.topk_hook, lambda: topk_hook.TopKState(ratio=0.3)),
            (powerSGD_hook.powerSGD_hook, lambda: powerSGD_hook.PowerSGDState(
                None, matrix_approximation_rank=2, start_powerSGD_iter=0))]:
        np.testing.assert_allclose(train(hook, make_state(), True),
                                   train(hook, make_state(), False), rtol=1e-6, atol=1e-7)

    def my_hook(state, bucket):
        return topk_hook.topk_hook(state, bucket)
    with pytest.raises(NotImplementedError, match="my_hook has no graph form"):
        train(my_hook, topk_hook.TopKState(), True)


def test_an_mpi_rank_shares_the_cores_and_keeps_freed_memory(monkeypatch):
    """init_process_group with several ranks (kernels/tuning.join_mpi): OpenBLAS and the
    loops get the rank's share of the cores, or DUALGRAPH_NUM_THREADS where it is set, and
    the malloc trick is on unless DUALGRAPH_CPU_TUNING says otherwise."""
    from dualgraph.kernels import tuning
    calls = []
    monkeypatch.setattr(tuning, "share_cores", calls.append)
    monkeypatch.setattr(tuning, "configure", lambda tricks: calls.append(sorted(tricks)))
    monkeypatch.setattr(tuning, "active", frozenset({"blas"}))
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    monkeypatch.delenv(tuning.SWITCH, raising=False)
    monkeypatch.setenv("DUALGRAPH_NUM_THREADS", "1")
    tuning.join_mpi(2)
    assert calls == [1, ["blas", "malloc"]]
    calls.clear()
    monkeypatch.delenv("DUALGRAPH_NUM_THREADS")
    monkeypatch.setenv(tuning.SWITCH, "default")
    tuning.join_mpi(2)
    assert calls == [2]


def test_ddp_broadcasts_parameters_and_buffers_packed_in_messages_of_a_bounded_size(
        monkeypatch):
    """DDP's broadcast of rank 0's values: tensors packed as bytes, in order, a message
    closed before it would pass PACK_BYTES (one larger tensor goes alone)."""
    from dualgraph.distributed.mpi import Communicator
    from dualgraph.nn import parallel
    from dualgraph.ops import collective
    monkeypatch.setattr(collective.STATE, "comm", Communicator(None, 5.0))
    model = parallel.DistributedDataParallel(
        dg.nn.Sequential(dg.nn.Linear(4, 3), dg.nn.BatchNorm1d(3)))
    sent = []
    monkeypatch.setattr(parallel.DistributedDataParallel, "_broadcast_packed",
                        lambda self, tensors: sent.append([tuple(t.shape) for t in tensors]))
    monkeypatch.setattr(parallel, "PACK_BYTES", 40)
    model._sync(list(model.module.parameters()) + list(model.module.buffers()))
    assert sent == [[(3, 4)], [(3,), (3,), (3,)], [(3,), (3,), ()]]


def test_distributed_sampler_splits_and_shuffles_by_epoch():
    from dualgraph.utils.data import DistributedSampler
    data = list(range(10))
    parts = [list(DistributedSampler(data, num_replicas=3, rank=r, shuffle=False))
             for r in range(3)]
    assert parts == [[0, 3, 6, 9], [1, 4, 7, 0], [2, 5, 8, 1]]   # padded, as torch
    dropped = [list(DistributedSampler(data, num_replicas=3, rank=r, shuffle=False,
                                       drop_last=True)) for r in range(3)]
    assert dropped == [[0, 3, 6], [1, 4, 7], [2, 5, 8]]
    s = DistributedSampler(data, num_replicas=2, rank=0, seed=1)
    first = list(s)
    assert list(s) == first and len(s) == 5
    s.set_epoch(1)
    assert list(s) != first
    everyone = []
    for r in range(2):
        other = DistributedSampler(data, num_replicas=2, rank=r, seed=1)
        other.set_epoch(1)
        everyone += list(other)
    assert sorted(everyone) == data


def test_compiled_ddp_starts_each_bucket_during_the_backward(monkeypatch):
    """overlap_communication: in a compiled DDP step a bucket's allreduce starts as soon as
    its gradients are ready, before the backward's last product, is polled during it and
    waited on before the update; explain() says where; the result equals eager."""
    from dualgraph.distributed.mpi import Communicator
    from dualgraph.nn.parallel import DistributedDataParallel as DDP
    from dualgraph.ops import collective
    monkeypatch.setattr(collective.STATE, "comm", Communicator(None, 5.0))
    nn = dg.nn

    def make():
        dg.manual_seed(0)
        net = nn.Sequential(nn.Linear(300, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                            nn.Linear(256, 10))
        ddp = DDP(net, bucket_cap_mb=0.25)
        opt = dg.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)

        def step(x, y):
            opt.zero_grad()
            loss = nn.functional.cross_entropy(ddp(x), y)
            loss.backward()
            opt.step()
            return loss
        return net, step
    rng = np.random.default_rng(0)
    x = dg.tensor(rng.standard_normal((16, 300)).astype(np.float32))
    y = dg.tensor(rng.integers(0, 10, 16))
    (eager_net, eager), (net, step) = make(), make()
    compiled = dg.compile(step)
    for _ in range(3):
        np.testing.assert_allclose(compiled(x, y).item(), eager(x, y).item(), rtol=1e-6)
    for p, q in zip(net.parameters(), eager_net.parameters()):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-6,
                                   atol=1e-7)
    lines = compiled.code.splitlines()
    at = [i for i, line in enumerate(lines) if "k_all_reduce_start(" in line]
    backward = [i for i, line in enumerate(lines) if "k_linear_backward(" in line]
    waits = [i for i, line in enumerate(lines) if "k_all_reduce_wait(" in line]
    polls = [i for i, line in enumerate(lines) if "k_all_reduce_progress(" in line]
    assert at and at[0] < backward[-1] < waits[0], compiled.code
    assert any(at[0] < i < backward[-1] + 2 for i in polls), compiled.code
    report = compiled.explain()
    assert "overlap_communication" in report and "starts at node" in report, report
    assert "waited on at node" in report and "before sgd_update_group" in report, report


def test_zero_redundancy_optimizer_in_one_process_is_the_optimizer(monkeypatch):
    """A world of one: the rank owns every parameter, the result is the wrapped
    optimiser's, and its state_dict round-trips (2 ranks: tests/distributed/ddp.py)."""
    from dualgraph.distributed.mpi import Communicator
    from dualgraph.distributed.optim import ZeroRedundancyOptimizer
    from dualgraph.ops import collective
    monkeypatch.setattr(collective.STATE, "comm", Communicator(None, 5.0))

    def train(make_opt):
        dg.manual_seed(0)
        net = dg.nn.Linear(4, 3)
        opt = make_opt(net.parameters())
        for _ in range(3):
            opt.zero_grad()
            net(dg.ones(2, 4)).square().sum().backward()
            opt.step()
        return net, opt
    net, opt = train(lambda ps: ZeroRedundancyOptimizer(ps, optimizer_class=dg.optim.Adam,
                                                        lr=0.1))
    ref, _ = train(lambda ps: dg.optim.Adam(ps, lr=0.1))
    for p, q in zip(net.parameters(), ref.parameters()):
        np.testing.assert_array_equal(p.detach().numpy(), q.detach().numpy())
    assert set(opt.owner.values()) == {0} and len(opt.state) == 2
    opt.load_state_dict(opt.state_dict())
    assert opt.param_groups[0]["lr"] == 0.1
