"""Run by tests/test_distributed.py as ``mpiexec -n 2 python sync_norm.py``: SyncBatchNorm
on two ranks, each holding half of a batch, equals BatchNorm in one process on the whole
batch: each rank's output is its half of the whole batch's, its input gradient its half of
the whole gradient, the all-reduced weight gradients the whole batch's, and the running
statistics the same after three steps; eagerly, compiled, and inside DDP (a model converted
by ``convert_sync_batchnorm``, trained as one process trains on the concatenated batch).
Prints ``OK <check>`` per check."""
import numpy as np

import dualgraph as dg
import dualgraph.distributed as dist
from dualgraph.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("mpi")
RANK, SIZE = dist.get_rank(), dist.get_world_size()
LOCAL = 3
rng = np.random.default_rng(0)
X = rng.standard_normal((3, SIZE * LOCAL, 4, 5, 6)).astype(np.float32)
G = rng.standard_normal((3, SIZE * LOCAL, 4, 5, 6)).astype(np.float32)
PART = slice(RANK * LOCAL, (RANK + 1) * LOCAL)


def ok(check):
    if RANK == 0:
        print(f"OK {check}", flush=True)


def close(a, b, what, tol=2e-5):
    err = np.abs(np.asarray(a) - np.asarray(b)).max()
    assert err <= tol * max(1.0, np.abs(np.asarray(b)).max()), f"{what}: {err}"


def check_layer(compiled):
    sync, whole = dg.nn.SyncBatchNorm(4), dg.nn.BatchNorm2d(4)
    with dg.no_grad():
        for layer in (sync, whole):
            layer.weight.copy_(dg.tensor([1.0, 0.5, 2.0, -1.0]))
            layer.bias.copy_(dg.tensor([0.1, 0.0, -0.2, 0.3]))
    sync_step = dg.compile(lambda x: sync(x)) if compiled else sync
    for step in range(3):
        x_local = dg.tensor(X[step, PART], requires_grad=True)
        x_whole = dg.tensor(X[step], requires_grad=True)
        y_local, y_whole = sync_step(x_local), whole(x_whole)
        close(y_local.detach().numpy(), y_whole.detach().numpy()[PART], "output")
        (y_local * dg.tensor(G[step, PART])).sum().backward()
        (y_whole * dg.tensor(G[step])).sum().backward()
        close(x_local.grad.numpy(), x_whole.grad.numpy()[PART], "input gradient")
    for name in ("weight", "bias"):
        grad = dist.functional.all_reduce(getattr(sync, name).grad)
        close(grad.numpy(), getattr(whole, name).grad.numpy(), f"{name} gradient")
    close(sync.running_mean.numpy(), whole.running_mean.numpy(), "running mean")
    close(sync.running_var.numpy(), whole.running_var.numpy(), "running var")
    sync.eval()
    whole.eval()
    with dg.no_grad():
        close(sync(dg.tensor(X[0, PART])).numpy(), whole(dg.tensor(X[0])).numpy()[PART], "eval")


check_layer(compiled=False)
ok("sync batch norm eager")
check_layer(compiled=True)
ok("sync batch norm compiled")


def net():
    dg.manual_seed(1)
    return dg.nn.Sequential(dg.nn.Conv2d(4, 3, 3, padding=1), dg.nn.BatchNorm2d(3),
                            dg.nn.ReLU(), dg.nn.Flatten(), dg.nn.Linear(3 * 5 * 6, 2))


replica = DDP(dg.nn.SyncBatchNorm.convert_sync_batchnorm(net()))
alone = net()
opt_r = dg.optim.SGD(replica.parameters(), lr=0.1)
opt_a = dg.optim.SGD(alone.parameters(), lr=0.1)
target = rng.standard_normal((SIZE * LOCAL, 2)).astype(np.float32)
for step in range(3):
    opt_r.zero_grad()
    opt_a.zero_grad()
    # the mean over the whole batch: each rank's part over its share (DDP averages ranks)
    ((replica(dg.tensor(X[step, PART, :, :, :])) - dg.tensor(target[PART])).square()
     .mean()).backward()
    ((alone(dg.tensor(X[step])) - dg.tensor(target)).square().mean()).backward()
    opt_r.step()
    opt_a.step()
for a, b in zip(replica.module.parameters(), alone.parameters()):
    close(a.detach().numpy(), b.detach().numpy(), "ddp parameters", 1e-5)
close(replica.module[1].running_var.numpy(), alone[1].running_var.numpy(), "ddp running var")
ok("ddp with converted sync batch norm")
