"""Run by tests/test_distributed_pipeline.py as ``mpiexec -n 4 python pipeline_dp.py``:
pipeline x data parallel. Global rank ``2 * replica + stage``: the pipeline of each replica
runs over the group {2r, 2r + 1}, and each stage's ``DistributedDataParallel`` averages
over the group of the ranks that hold it ({0, 2} and {1, 3}). Each replica trains on its
half of the batch with 2 micro-batches (GPipe and 1F1B), eager and with each stage
compiled; DDP reduces once a step (the schedule runs the earlier micro-batches'
backwards under ``no_sync``); after 3 SGD steps every rank's parameters equal those of one process training
the whole model on the whole batch (1e-6 relative), and the losses too. Prints
``OK <check>`` per check on rank 0."""
import numpy as np

import dualgraph as dg
import dualgraph.distributed as dist
from dualgraph.distributed.pipeline import (PipelineStage, Schedule1F1B, ScheduleGPipe,
                                            split_module)
from dualgraph.ops import collective

dist.init_process_group("mpi")
RANK, SIZE = dist.get_rank(), dist.get_world_size()
assert SIZE == 4, "run with mpiexec -n 4"
REPLICA, STAGE = divmod(RANK, 2)
pipelines = [dist.new_group([0, 1]), dist.new_group([2, 3])]   # (every rank makes every group)
replicas = [dist.new_group([0, 2]), dist.new_group([1, 3])]
PIPE, DP = pipelines[REPLICA], replicas[STAGE]
STEPS, BATCH, MICRO = 3, 16, 2
rng = np.random.default_rng(0)
X = rng.standard_normal((STEPS, BATCH, 6)).astype(np.float32)
Y = rng.integers(0, 3, (STEPS, BATCH))
loss_fn = dg.nn.functional.cross_entropy
HALF = slice(REPLICA * BATCH // 2, (REPLICA + 1) * BATCH // 2)


def make():
    dg.manual_seed(0)
    return dg.nn.Sequential(dg.nn.Linear(6, 8), dg.nn.Tanh(), dg.nn.Linear(8, 3))


def flat(model):
    return np.concatenate([p.detach().numpy().ravel() for p in model.parameters()])


def reference():
    model = make()
    opt = dg.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    losses = []
    for s in range(STEPS):
        opt.zero_grad()
        loss = loss_fn(model(dg.tensor(X[s])), dg.tensor(Y[s]))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return flat(split_module(model, 2, STAGE)), losses


def trained(schedule_class, compiled):
    part = split_module(make(), group=PIPE)
    replica = dg.nn.parallel.DistributedDataParallel(part, process_group=DP)
    opt = dg.optim.SGD(replica.parameters(), lr=0.1, momentum=0.9)
    stage = PipelineStage(dg.compile(replica) if compiled else replica,
                          dist.get_rank(PIPE), 2, group=PIPE)
    schedule = schedule_class(stage, n_microbatches=MICRO, loss_fn=loss_fn)
    losses = []
    dp = collective.comm(DP.key)
    for s in range(STEPS):
        opt.zero_grad()
        calls = dp.calls
        loss = schedule.step(dg.tensor(X[s][HALF]), target=dg.tensor(Y[s][HALF]))
        assert dp.calls == calls + 1, "DDP reduces once a step (no_sync before the last)"
        opt.step()
        if stage.is_last:   # the batch's loss: the mean of the two replicas' halves
            total = dg.tensor([loss.item()])
            dist.all_reduce(total, op=dist.ReduceOp.AVG, group=DP)
            losses.append(total.item())
    return flat(part), losses, stage


want, want_losses = reference()
for schedule_class in (ScheduleGPipe, Schedule1F1B):
    for compiled in (False, True):
        got, losses, stage = trained(schedule_class, compiled)
        name = f"{schedule_class.__name__} x DDP {'compiled' if compiled else 'eager'}"
        rel = np.max(np.abs(got - want)) / np.max(np.abs(want))
        assert rel <= 1e-6, f"{name} on rank {RANK}: parameters differ by {rel:.2e}"
        if stage.is_last:
            np.testing.assert_allclose(losses, want_losses, rtol=1e-6)
        if compiled:   # one graph per stage, run for every micro-batch, no break
            report = stage.module.explain()
            assert "1 graph(s), 0 graph break(s)" in report, report
        dist.barrier()   # (every rank's asserts passed)
        if RANK == 0:
            print(f"OK {name} (rel {rel:.1e})", flush=True)
dist.destroy_process_group()
