"""Pipeline parallelism, distributed checkpoints and a two-host run: scripts in
``tests/distributed/`` run under ``mpiexec -n 2`` (helpers of tests/test_distributed.py).

Skipped, with the reason, where mpi4py (the ``distributed`` extra) is not installed.
"""
from __future__ import annotations

import pytest

from test_distributed import mpiexec, needs_mpi, ok_lines

import dualgraph as dg


@needs_mpi
def test_pipeline_equals_the_unsplit_model_gpipe_and_1f1b_eager_and_compiled():
    lines = ok_lines(mpiexec("pipeline.py"))
    for check in ("ScheduleGPipe eager", "ScheduleGPipe compiled", "Schedule1F1B eager",
                  "Schedule1F1B compiled"):
        assert sum(line.startswith(f"OK {check}") for line in lines) == 1, lines


def test_split_module_and_schedule_orders(monkeypatch):
    from dualgraph.distributed.mpi import Communicator
    from dualgraph.distributed.pipeline import (PipelineStage, Schedule1F1B, ScheduleGPipe,
                                                split_module)
    from dualgraph.ops import collective
    monkeypatch.setattr(collective.STATE, "comm", Communicator(None, 5.0))
    layers = [dg.nn.Linear(2, 2) for _ in range(5)]
    model = dg.nn.Sequential(*layers)
    parts = [list(split_module(model, 3, s)) for s in range(3)]
    assert parts == [layers[:2], layers[2:4], layers[4:]]
    assert split_module(layers[:3], 3, 1) is layers[1]
    with pytest.raises(ValueError, match="can't be cut into 6 stages"):
        split_module(model, 6, 0)
    stage = PipelineStage(model, 0, 1)
    stage.num_stages, stage.is_last = 2, False   # stage 0 of 2: the order only
    assert Schedule1F1B(stage, 3).order() == [("F", 0), ("F", 1), ("B", 0), ("F", 2),
                                              ("B", 1), ("B", 2)]
    assert ScheduleGPipe(stage, 2).order() == [("F", 0), ("F", 1), ("B", 0), ("B", 1)]
    with pytest.raises(ValueError, match="one stage per rank"):
        PipelineStage(model, 1, 2)
