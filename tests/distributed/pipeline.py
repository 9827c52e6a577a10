"""Run by tests/test_distributed_pipeline.py as ``mpiexec -n 2 python pipeline.py``: a model
split into 2 stages trained with 4 micro-batches per step, GPipe and 1F1B, eager and with
each stage compiled, equals one process training the whole model on the whole batch
(parameters within 1e-6 relative after 3 SGD steps; the losses too).

``mpiexec -n 4 python pipeline.py dp``: the same pipeline x data parallel. Global rank
``2 * replica + stage``: each replica's pipeline runs over the group {2r, 2r + 1} on its
half of the batch, and each stage's ``DistributedDataParallel`` averages over the group of
the ranks that hold it ({0, 2} and {1, 3}), reducing once a step (the schedule runs the
earlier micro-batches' backwards under ``no_sync``). Prints ``OK <check>`` per check on
the last rank."""
import sys

import numpy as np

import dualgraph as dg
import dualgraph.distributed as dist
from dualgraph.distributed.pipeline import (PipelineStage, Schedule1F1B, ScheduleGPipe,
                                            split_module)
from dualgraph.nn.parallel import DistributedDataParallel as DDP
from dualgraph.ops import collective

dist.init_process_group("mpi")
RANK, SIZE = dist.get_rank(), dist.get_world_size()
STEPS, BATCH, MICRO = 3, 16, 4
REPLICAS = 2 if sys.argv[1:] == ["dp"] else 1
if REPLICAS > 1:
    assert SIZE == 4, "pipeline.py dp runs on 4 ranks (2 stages x 2 replicas)"
    pipelines = [dist.new_group([0, 1]), dist.new_group([2, 3])]   # (every rank makes all)
    replicas = [dist.new_group([0, 2]), dist.new_group([1, 3])]
    REPLICA, STAGE = divmod(RANK, 2)
    PIPE, DP = pipelines[REPLICA], replicas[STAGE]
else:
    REPLICA, STAGE, PIPE, DP = 0, RANK, None, None
STAGES = SIZE // REPLICAS
ROWS = slice(REPLICA * BATCH // REPLICAS, (REPLICA + 1) * BATCH // REPLICAS)
rng = np.random.default_rng(0)
X = rng.standard_normal((STEPS, BATCH, 12)).astype(np.float32)
Y = rng.integers(0, 5, (STEPS, BATCH))
loss_fn = dg.nn.functional.cross_entropy


def make():
    dg.manual_seed(0)
    return dg.nn.Sequential(dg.nn.Linear(12, 32), dg.nn.Tanh(), dg.nn.Linear(32, 32),
                            dg.nn.ReLU(), dg.nn.Linear(32, 5))


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
    return flat(split_module(model, STAGES, STAGE)), losses


def pipelined(schedule_class, compiled):
    part = split_module(make(), group=PIPE)
    module = part if DP is None else DDP(part, process_group=DP)
    opt = dg.optim.SGD(part.parameters(), lr=0.1, momentum=0.9)
    stage = PipelineStage(dg.compile(module) if compiled else module, STAGE, STAGES,
                          group=PIPE)
    schedule = schedule_class(stage, n_microbatches=MICRO, loss_fn=loss_fn)
    losses, reductions = [], collective.comm(None if DP is None else DP.key)
    for s in range(STEPS):
        opt.zero_grad()
        micro, calls = [], reductions.calls
        loss = schedule.step(dg.tensor(X[s][ROWS]), target=dg.tensor(Y[s][ROWS]),
                             losses=micro)
        if DP is not None:
            assert reductions.calls == calls + 1, "DDP reduces once a step"
        opt.step()
        if stage.is_last:
            assert len(micro) == MICRO
            if DP is not None:   # the batch's loss: the mean of the replicas' halves
                loss = dg.tensor([loss.item()])
                dist.all_reduce(loss, op=dist.ReduceOp.AVG, group=DP)
            losses.append(loss.item())
    return flat(part), losses, stage


want, want_losses = reference()
for schedule_class in (ScheduleGPipe, Schedule1F1B):
    for compiled in (False, True):
        got, losses, stage = pipelined(schedule_class, compiled)
        name = (f"{schedule_class.__name__}{' x DDP' if DP is not None else ''} "
                f"{'compiled' if compiled else 'eager'}")
        rel = np.max(np.abs(got - want)) / np.max(np.abs(want))
        assert rel <= 1e-6, f"{name} on rank {RANK}: parameters differ by {rel:.2e}"
        if compiled:   # one graph per stage, run for every micro-batch, no break
            report = stage.module.explain()
            assert "1 graph(s), 0 graph break(s)" in report, report
        if stage.is_last:
            np.testing.assert_allclose(losses, want_losses, rtol=1e-6)
        # every rank's parameters are checked: the job fails if any rank's assert does
        dist.barrier()
        if RANK == SIZE - 1:
            print(f"OK {name} (rel {rel:.1e})", flush=True)
dist.destroy_process_group()
