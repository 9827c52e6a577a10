"""Run by tests/test_distributed.py as ``mpiexec -n 2 python fault.py MODE REPORT``: rank 1
stops in the middle of a data-parallel step ("freeze": SIGSTOP, a hung rank or a cut
network; "kill": SIGKILL), and rank 0's next collective must fail with the deadline error
(2 s here) instead of waiting forever ("freeze-all_reduce": rank 1 stops before a plain
``dist.all_reduce``, the short path of a blocking one; "freeze-shm-all_reduce": a 64 KiB one,
through shared memory). Rank 0 writes the error and the
seconds it waited to REPORT, then the error aborts the job."""
import datetime
import os
import signal
import sys
import time

import dualgraph as dg
import dualgraph.distributed as dist
from dualgraph.nn.parallel import DistributedDataParallel as DDP

MODE, REPORT = sys.argv[1], sys.argv[2]
dist.init_process_group("mpi", timeout=datetime.timedelta(seconds=2))
RANK = dist.get_rank()
model = DDP(dg.nn.Linear(50, 50), bucket_cap_mb=0.001)
for step in range(3):
    loss = model(dg.randn(8, 50)).square().mean()
    if step == 2 and RANK == 1:   # mid-step: after the forward, before the backward
        os.kill(os.getpid(), signal.SIGKILL if MODE == "kill" else signal.SIGSTOP)
        time.sleep(120)
    start = time.monotonic()
    try:
        if MODE == "freeze-all_reduce" and step == 2:
            dist.all_reduce(dg.ones(4))
        if MODE == "freeze-shm-all_reduce" and step == 2:
            dist.all_reduce(dg.ones(1 << 14))
        loss.backward()
    except dist.DistributedError as e:
        with open(REPORT, "w") as f:
            f.write(f"{time.monotonic() - start:.2f}\n{type(e).__name__}: {e}\n")
        raise
print("unreachable: the step finished without rank 1", flush=True)
