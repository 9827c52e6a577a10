"""Pipeline parallelism: a model split into consecutive stages, one per rank, fed with
micro-batches (``torch.distributed.pipelining``'s names; docs/distributed_pipeline.md).

Rank ``s`` holds stage ``s``. A micro-batch's forward runs stage 0 on rank 0, whose output
is sent to rank 1, and so on; the last stage computes the loss. Its backward runs the other
way: each stage receives the gradient of its output, backpropagates through its own part
(gradients accumulate into its parameters' ``.grad``) and sends the gradient of its input
to the stage before. Each micro-batch's loss is weighted by its share of the batch, so the
gradients equal those of the unsplit model on the whole batch (for a loss that is a mean
over the batch, the default of the ``nn`` losses).

Two schedules order the work: :class:`ScheduleGPipe` runs all forwards, then all
backwards (simple; keeps every micro-batch's activations); :class:`Schedule1F1B` runs
``num_stages - s - 1`` forwards, then alternates one forward and one backward (keeps at
most ``num_stages`` micro-batches' activations). A stage may be compiled
(``dg.compile(stage)``): its forward and backward then run as graphs.

>>> import dualgraph as dg, dualgraph.distributed as dist
>>> from dualgraph.distributed.pipeline import PipelineStage, Schedule1F1B, split_module
>>> dist.init_process_group("mpi")
>>> model = dg.nn.Sequential(dg.nn.Linear(8, 16), dg.nn.ReLU(), dg.nn.Linear(16, 4))
>>> part = split_module(model)                      # this rank's layers
>>> stage = PipelineStage(part, dist.get_rank(), dist.get_world_size())
>>> schedule = Schedule1F1B(stage, n_microbatches=4, loss_fn=dg.nn.functional.mse_loss)
>>> loss = schedule.step(dg.randn(32, 8), target=dg.randn(32, 4))  # None but on the last
"""
from __future__ import annotations

import contextlib

import numpy as np

from .. import dtypes
from ..ops import collective as _c
from ..tensor import Tensor
from .groups import resolve

__all__ = ["split_module", "PipelineStage", "PipelineSchedule", "ScheduleGPipe",
           "Schedule1F1B"]

# An activation travels after a header: its number of dims, dtype and shape (the receiving
# stage can't know them: they depend on the batch). Gradients have their output's shape.
_DTYPES = tuple(np.dtype(d.np) for d in dtypes.ALL)
_MAX_DIMS = 8


def split_module(model, num_stages: int | None = None, stage_index: int | None = None,
                 group=None):
    """Stage ``stage_index`` (default: this rank in ``group``, the world by default) of
    ``model`` cut into ``num_stages`` (default: the group's size): a list or tuple gives its
    item, a ``Sequential`` a slice of consecutive layers (as many per stage as possible, the
    first stages taking one more).

    >>> part = split_module(dg.nn.Sequential(a, b, c), 2, 0)   # Sequential(a, b)
    """
    rank, size = _c.world(resolve(group))
    num_stages = size if num_stages is None else num_stages
    stage_index = rank if stage_index is None else stage_index
    if not 0 <= stage_index < num_stages:
        raise ValueError(f"stage_index={stage_index} is not a stage of {num_stages}")
    if isinstance(model, (list, tuple)):
        if len(model) != num_stages:
            raise ValueError(f"a list of {len(model)} stages for {num_stages} stages; give "
                             "one module per stage (per rank)")
        return model[stage_index]
    n = len(model)
    if n < num_stages:
        raise ValueError(f"a Sequential of {n} layers can't be cut into {num_stages} "
                         "stages; give fewer ranks or a list of stage modules")
    per, extra = divmod(n, num_stages)
    lo = stage_index * per + min(stage_index, extra)
    return model[lo:lo + per + (stage_index < extra)]


class PipelineStage:
    """This rank's part of the pipeline: ``module`` (any callable of one tensor returning
    one tensor, e.g. a ``Sequential`` slice or ``dg.compile(part)``) is stage
    ``stage_index`` of ``num_stages``; stage ``s`` runs on rank ``s`` of ``group`` (the
    world by default; a ``dist.new_group`` to combine the pipeline with data parallelism:
    then wrap ``module`` in ``DistributedDataParallel(module, process_group=...)`` over the
    ranks that hold the same stage)."""

    def __init__(self, module, stage_index: int, num_stages: int, device=None, group=None):
        self.group = resolve(group)
        rank, size = _c.world(self.group)
        if num_stages != size or stage_index != rank:
            where = "rank" if self.group is None else "group rank"
            raise ValueError(f"stage {stage_index} of {num_stages} on {where} {rank} of "
                             f"{size}: run one stage per rank of the group (mpiexec -n "
                             f"NUM_STAGES, or a group of NUM_STAGES ranks), stage s on rank s")
        self.module, self.index, self.num_stages = module, stage_index, num_stages
        self.is_first, self.is_last = stage_index == 0, stage_index == num_stages - 1


class PipelineSchedule:
    """Runs one training step's forwards and backwards over ``n_microbatches`` in the
    order :meth:`order` gives. ``step(x, target=y)``: rank 0 needs ``x``, the last rank
    ``target`` (the others may pass them or not); it returns the batch's loss on the last
    rank and None on the others, and appends the micro-batches' losses to ``losses``
    there. Gradients accumulate into ``.grad``: zero them before the step, as usual."""

    def __init__(self, stage: PipelineStage, n_microbatches: int, loss_fn=None):
        if n_microbatches < 1:
            raise ValueError(f"n_microbatches={n_microbatches}: at least 1")
        if stage.is_last and loss_fn is None:
            raise ValueError("the last stage computes the loss: give loss_fn=")
        self.stage, self.n, self.loss_fn = stage, n_microbatches, loss_fn

    def order(self) -> list[tuple[str, int]]:
        """This stage's actions: ("F", m) runs micro-batch m's forward, ("B", m) its
        backward."""
        raise NotImplementedError

    def step(self, *args, target=None, losses: list | None = None):
        st = self.stage
        x = args[0] if args else None
        if st.is_first and not isinstance(x, Tensor):
            raise ValueError("stage 0 needs the input batch: schedule.step(x)")
        if st.is_last and not isinstance(target, Tensor):
            raise ValueError("the last stage needs the targets: schedule.step(target=y)")
        # (a middle stage slices nothing: its micro-batches arrive one by one)
        batch = (x if st.is_first else target).shape[0] if st.is_first or st.is_last else self.n
        if batch < self.n:
            raise ValueError(f"a batch of {batch} rows can't make {self.n} micro-batches")
        bounds = [m * batch // self.n for m in range(self.n + 1)]
        self._micro = [slice(lo, hi) for lo, hi in zip(bounds, bounds[1:])]
        self._weights = [(hi - lo) / batch for lo, hi in zip(bounds, bounds[1:])]
        self._x, self._target, self._saved, self._sends = x, target, {}, []
        self._losses = []
        order = self.order()
        self._last_backward = [m for action, m in order if action == "B"][-1]
        try:
            for action, m in order:
                (self._forward if action == "F" else self._backward)(m)
            self._comm().wait_all(self._sends)
        finally:
            self._saved, self._sends, self._x, self._target = {}, [], None, None
        if not st.is_last:
            return None
        if losses is not None:
            losses.extend(self._losses)
        total = sum(w * float(loss) for w, loss in zip(self._weights, self._losses))
        return Tensor._make(np.asarray(total, dtype=self._losses[0]._data.dtype))

    # -- one micro-batch ----------------------------------------------------------------------
    def _comm(self):
        return _c.comm(self.stage.group)

    def _forward(self, m: int) -> None:
        st = self.stage
        if st.is_first:
            inp = self._x[self._micro[m]]
        else:
            inp = self._receive_activation(m).requires_grad_()
        out = st.module(inp)
        if st.is_last:
            loss = self.loss_fn(out, self._target[self._micro[m]])
            self._losses.append(loss.detach())
            self._saved[m] = (inp, loss)
        else:
            self._send_activation(out.detach()._data, m)
            self._saved[m] = (inp, out)

    def _backward(self, m: int) -> None:
        st = self.stage
        inp, out = self._saved.pop(m)
        with self._no_sync_unless(m == self._last_backward):
            if st.is_last:
                (out * self._weights[m]).backward()
            else:
                grad = np.empty(out._data.shape, out._data.dtype)
                self._comm().recv(grad, st.index + 1, 2 * m + 1).wait()
                if out.requires_grad:   # (not for a first stage without parameters)
                    out.backward(Tensor._make(grad))
        if not st.is_first:
            g = inp.grad
            grad = g._data if g is not None else np.zeros(inp._data.shape, inp._data.dtype)
            self._sends.append(self._comm().send(grad, st.index - 1, 2 * m + 1))

    def _no_sync_unless(self, last: bool):
        """A data-parallel stage (one with ``no_sync``, as ``DistributedDataParallel``)
        reduces its gradients once per step, in the step's last backward: the earlier
        micro-batches' backwards accumulate locally."""
        no_sync = getattr(self.stage.module, "no_sync", None)
        return contextlib.nullcontext() if last or no_sync is None else no_sync()

    def _send_activation(self, array: np.ndarray, m: int) -> None:
        if array.ndim > _MAX_DIMS or array.dtype not in _DTYPES:
            raise TypeError(f"stage {self.stage.index} returned {array.dtype}"
                            f"{list(array.shape)}: a stage's output must be a tensor of at "
                            f"most {_MAX_DIMS} dims")
        header = np.zeros(2 + _MAX_DIMS, np.int64)
        header[:2] = array.ndim, _DTYPES.index(array.dtype)
        header[2:2 + array.ndim] = array.shape
        comm, dst = self._comm(), self.stage.index + 1
        # sends are waited at the end of the step: a stage never blocks on its sends while
        # its neighbour blocks on its own (1F1B's steady state sends both ways at once)
        self._sends += [comm.send(header, dst, 2 * m), comm.send(array, dst, 2 * m)]

    def _receive_activation(self, m: int) -> Tensor:
        comm, src = self._comm(), self.stage.index - 1
        header = comm.recv(np.empty(2 + _MAX_DIMS, np.int64), src, 2 * m).wait()
        ndim, code = int(header[0]), int(header[1])
        out = np.empty(tuple(int(d) for d in header[2:2 + ndim]), _DTYPES[code])
        return Tensor._make(comm.recv(out, src, 2 * m).wait())


class ScheduleGPipe(PipelineSchedule):
    """All micro-batches' forwards, then all their backwards (GPipe).

    >>> ScheduleGPipe(stage, n_microbatches=4, loss_fn=F.cross_entropy).step(x, target=y)
    """

    def order(self):
        return [("F", m) for m in range(self.n)] + [("B", m) for m in range(self.n)]


class Schedule1F1B(PipelineSchedule):
    """One forward, one backward (PipeDream-flush): stage ``s`` first runs
    ``num_stages - s - 1`` forwards, then alternates, then finishes the backwards.

    >>> Schedule1F1B(stage, n_microbatches=4, loss_fn=F.cross_entropy).step(x, target=y)
    """

    def order(self):
        warmup = min(self.stage.num_stages - self.stage.index - 1, self.n)
        actions = [("F", m) for m in range(warmup)]
        for m in range(warmup, self.n):
            actions += [("F", m), ("B", m - warmup)]
        return actions + [("B", m) for m in range(self.n - warmup, self.n)]
