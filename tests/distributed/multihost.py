"""Run by tests/test_distributed_pipeline.py with one rank in each of two network
namespaces joined by a veth pair, over TCP: ``mpiexec ... python multihost.py DIR``.
Data parallelism on the two "hosts" equals one process on the whole batch (parameters
within 1e-6 relative after 3 steps); then, with a 2 s deadline, each rank writes
``DIR/ready-<rank>`` (its network namespace and the DDP error) and keeps all-reducing until the test cuts the link: the next
collective fails with the deadline error on both sides, which each rank writes, with the
seconds it waited, to ``DIR/report-<rank>`` before the error aborts the job."""
import datetime
import os
import sys
import time

import numpy as np

import dualgraph as dg
import dualgraph.distributed as dist
from dualgraph.nn.parallel import DistributedDataParallel as DDP
from dualgraph.ops import collective

OUT = sys.argv[1]
dist.init_process_group("mpi", timeout=datetime.timedelta(seconds=60))
RANK, SIZE = dist.get_rank(), dist.get_world_size()
# two "hosts": MPI's view of the machine splits them, so nothing goes through shared memory
assert collective.comm().shared is None, "the ranks of two hosts reduce through MPI"
STEPS, LOCAL = 3, 4
rng = np.random.default_rng(0)
X = rng.standard_normal((STEPS, SIZE * LOCAL, 12)).astype(np.float32)
Y = rng.integers(0, 5, (STEPS, SIZE * LOCAL))


def train(model, rows):
    opt = dg.optim.SGD(model.parameters(), lr=0.1)
    for s in range(STEPS):
        opt.zero_grad()
        loss = dg.nn.functional.cross_entropy(model(dg.tensor(X[s, rows])),
                                              dg.tensor(Y[s, rows]))
        loss.backward()
        opt.step()
    return np.concatenate([p.detach().numpy().ravel() for p in model.parameters()])


def make():
    dg.manual_seed(0)
    return dg.nn.Sequential(dg.nn.Linear(12, 16), dg.nn.Tanh(), dg.nn.Linear(16, 5))


want = train(make(), slice(None))
got = train(DDP(make()), slice(RANK * LOCAL, (RANK + 1) * LOCAL))
rel = np.max(np.abs(got - want)) / np.max(np.abs(want))
assert rel <= 1e-6, f"rank {RANK}: DDP parameters differ by {rel:.2e} relative"
NETNS = os.readlink("/proc/self/ns/net")   # the test checks that the ranks' differ

dist.destroy_process_group()   # again, with the short deadline for the cut
dist.init_process_group("mpi", timeout=datetime.timedelta(seconds=2))
dist.barrier()
with open(os.path.join(OUT, f".ready-{RANK}"), "w") as f:
    f.write(f"{NETNS} {rel:.1e}\n")
os.replace(os.path.join(OUT, f".ready-{RANK}"), os.path.join(OUT, f"ready-{RANK}"))
t = dg.ones(1000)
while True:
    start = time.monotonic()
    try:
        dist.all_reduce(t)
    except dist.DistributedError as e:
        with open(os.path.join(OUT, f"report-{RANK}"), "w") as f:
            f.write(f"{time.monotonic() - start:.2f}\n{type(e).__name__}: {e}\n")
        # the raise aborts the whole job at exit: give the other rank, whose allreduce may
        # have started a little later (a busy machine), time to reach its own deadline
        time.sleep(1.5)
        raise
    t.fill_(1.0)
    time.sleep(0.02)
