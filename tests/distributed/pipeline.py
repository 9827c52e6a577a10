"""Run by tests/test_distributed_pipeline.py as ``mpiexec -n 2 python pipeline.py``: a model
split into 2 stages trained with 4 micro-batches per step, GPipe and 1F1B, eager and with
each stage compiled, equals one process training the whole model on the whole batch
(parameters within 1e-6 relative after 3 SGD steps; the losses too). Prints ``OK <check>``
per check on the last rank."""
import numpy as np

import dualgraph as dg
import dualgraph.distributed as dist
from dualgraph.distributed.pipeline import (PipelineStage, Schedule1F1B, ScheduleGPipe,
                                            split_module)

dist.init_process_group("mpi")
RANK, SIZE = dist.get_rank(), dist.get_world_size()
STEPS, BATCH, MICRO = 3, 16, 4
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
    return flat(split_module(model)), losses


def pipelined(schedule_class, compiled):
    part = split_module(make())
    opt = dg.optim.SGD(part.parameters(), lr=0.1, momentum=0.9)
    stage = PipelineStage(dg.compile(part) if compiled else part, RANK, SIZE)
    schedule = schedule_class(stage, n_microbatches=MICRO, loss_fn=loss_fn)
    losses = []
    for s in range(STEPS):
        opt.zero_grad()
        micro = []
        loss = schedule.step(dg.tensor(X[s]), target=dg.tensor(Y[s]), losses=micro)
        opt.step()
        if stage.is_last:
            assert len(micro) == MICRO
            losses.append(loss.item())
    return flat(part), losses, stage


want, want_losses = reference()
for schedule_class in (ScheduleGPipe, Schedule1F1B):
    for compiled in (False, True):
        got, losses, stage = pipelined(schedule_class, compiled)
        name = f"{schedule_class.__name__} {'compiled' if compiled else 'eager'}"
        rel = np.max(np.abs(got - want)) / np.max(np.abs(want))
        assert rel <= 1e-6, f"{name} on rank {RANK}: parameters differ by {rel:.2e}"
        if compiled:   # one graph per stage, run for every micro-batch, no break
            report = stage.module.explain()
            assert "1 graph(s), 0 graph break(s)" in report, report
        if stage.is_last:
            np.testing.assert_allclose(losses, want_losses, rtol=1e-6)
        # every rank's parameters are checked: the job fails if any rank's assert does
        dist.barrier()
        if stage.is_last:
            print(f"OK {name} (rel {rel:.1e})", flush=True)
dist.destroy_process_group()
