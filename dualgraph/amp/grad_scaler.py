"""``dg.amp.GradScaler``: dynamic loss scaling, as ``torch.amp.GradScaler``.

A float16 gradient underflows where the float32 one would not; multiplying the loss by a
large scale before ``backward`` keeps the small gradients representable, and dividing the
gradients by it (``unscale_``) before the optimiser step undoes it. The scale adapts: a
step whose gradients hold an inf or NaN is skipped and the scale shrinks by
``backoff_factor``; after ``growth_interval`` clean steps in a row it grows by
``growth_factor``.

The scale and the count of clean steps are persistent state tensors, and every decision is
a tensor op (``where`` on the found-inf flag), so a training step that ``dg.compile``
captures keeps them as graph state without a graph break: eagerly the optimiser step is
skipped outright (one ``.item()``), in a captured step the update is computed and then
discarded by a select on the flag, which gives the same values.
"""
from __future__ import annotations

import enum
import warnings
from collections import defaultdict

import numpy as np

from .. import dtypes
from ..autograd.tape import no_grad
from ..ops import creation, elementwise, reduce
from ..tensor import Tensor


class _Stage(enum.Enum):
    READY = 0
    UNSCALED = 1
    STEPPED = 2


def _fresh_state() -> dict:
    return {"stage": _Stage.READY, "found_inf": None}


class GradScaler:
    """Dynamic loss scaling (``torch.amp.GradScaler``'s arguments and methods).

    ``device`` defaults to "cpu", dualgraph's device (torch's default, "cuda", gives a
    disabled scaler here, as in a CPU-only torch). Typical use, one optimiser::

        scaler.scale(loss).backward()
        scaler.unscale_(opt)            # optional: before clipping the true gradients
        scaler.step(opt)                # skipped when a gradient is inf or NaN
        scaler.update()

    >>> import dualgraph as dg
    >>> w = dg.tensor([1.0, 2.0], requires_grad=True)
    >>> opt = dg.optim.SGD([w], lr=0.1)
    >>> scaler = dg.amp.GradScaler(init_scale=1024.0)
    >>> scaler.scale((w * w).sum()).backward()
    >>> w.grad
    tensor([2048., 4096.])
    >>> scaler.step(opt); scaler.update()
    >>> w, scaler.get_scale()
    (tensor([0.8000, 1.6000], requires_grad=True), 1024.0)
    """

    def __init__(self, device: str = "cpu", init_scale: float = 2.0 ** 16,
                 growth_factor: float = 2.0, backoff_factor: float = 0.5,
                 growth_interval: int = 2000, enabled: bool = True):
        if device not in ("cpu", "cuda"):
            raise ValueError(f"GradScaler: device must be 'cpu' or 'cuda', got {device!r}")
        if enabled and device == "cuda":
            warnings.warn("GradScaler(device='cuda'): dualgraph runs on the CPU only, so the "
                          "scaler is disabled here (as in a CPU-only torch); use "
                          "GradScaler('cpu')", stacklevel=2)
            enabled = False
        if enabled and not growth_factor > 1.0:
            raise ValueError(f"growth_factor must be > 1.0, got {growth_factor}")
        if enabled and not 0.0 < backoff_factor < 1.0:
            raise ValueError(f"backoff_factor must be in (0, 1), got {backoff_factor}")
        if enabled and not (isinstance(growth_interval, int) and growth_interval > 0):
            raise ValueError(f"growth_interval must be a positive int, got {growth_interval}")
        self._device, self._enabled = device, bool(enabled)
        self._init_scale = float(init_scale)
        self._growth_factor, self._backoff_factor = float(growth_factor), float(backoff_factor)
        self._growth_interval = growth_interval
        # (state tensors: a captured step reads them as inputs and writes them back)
        self._scale = creation.state((), init_scale, dtype=dtypes.float32)
        self._growth_tracker = creation.state((), 0, dtype=dtypes.int32)
        self._per_optimizer_states = defaultdict(_fresh_state)
        # per optimiser, its found-inf flag: a state tensor too, written in place (1: inf or
        # NaN, 0: clean, -1: nothing recorded since the last update), so a captured step
        # that leaves ``update`` to eager code hands it over without a graph break
        self._found_inf = {}

    # -- the training step -----------------------------------------------------------------
    def scale(self, outputs):
        """``outputs`` (a tensor, or lists and tuples of them) times the scale."""
        if not self._enabled:
            return outputs
        if isinstance(outputs, Tensor):
            return outputs * self._scale
        if isinstance(outputs, (list, tuple)):
            return type(outputs)(self.scale(o) for o in outputs)
        raise ValueError(f"GradScaler.scale: outputs must be a tensor or an iterable of "
                         f"tensors, got {type(outputs).__name__}")

    def unscale_(self, optimizer) -> None:
        """Divide ``optimizer``'s gradients by the scale in place and note whether any holds
        an inf or NaN. Call it before clipping (``clip_grad_norm_``) to clip the true
        gradients; ``step`` calls it when you have not. Once per optimiser per step."""
        if not self._enabled:
            return
        state = self._per_optimizer_states[id(optimizer)]
        if state["stage"] is _Stage.UNSCALED:
            raise RuntimeError("unscale_() has already been called on this optimizer since "
                               "the last update().")
        if state["stage"] is _Stage.STEPPED:
            raise RuntimeError("unscale_() is being called after step().")
        with no_grad():
            # (the reciprocal in float64 and rounded once, as torch does)
            inv_scale = elementwise.cast_to(1.0 / elementwise.cast_to(self._scale,
                                                                        dtypes.float64),
                                            dtypes.float32)
            bad = None
            for group in optimizer.param_groups:
                for p in group["params"]:
                    g = p.grad
                    if g is None:
                        continue
                    if g.dtype == dtypes.float16:
                        raise ValueError("Attempting to unscale FP16 gradients: keep the "
                                         "parameters in float32 (autocast casts them per op)")
                    # (checked before the division, as torch's kernel does)
                    not_finite = elementwise.logical_not(
                        reduce.all(elementwise.isfinite(g)))
                    bad = not_finite if bad is None else elementwise.logical_or(bad,
                                                                                not_finite)
                    g.mul_(inv_scale)
            flag = self._found_inf.get(id(optimizer))
            if flag is None:
                flag = self._found_inf[id(optimizer)] = creation.state((), -1.0)
            flag.copy_(creation.zeros(()) if bad is None else bad)
        state["found_inf"] = flag
        state["stage"] = _Stage.UNSCALED

    def step(self, optimizer, *args, **kwargs):
        """``optimizer.step()`` unless a gradient holds an inf or NaN (unscaling first if
        ``unscale_`` was not called); returns what ``optimizer.step`` returns, or None when
        skipped."""
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        if "closure" in kwargs:
            raise RuntimeError("Closure use is not currently supported if GradScaler is "
                               "enabled.")
        state = self._per_optimizer_states[id(optimizer)]
        if state["stage"] is _Stage.STEPPED:
            raise RuntimeError("step() has already been called since the last update().")
        if state["stage"] is _Stage.READY:
            self.unscale_(optimizer)
        found = state["found_inf"]
        if type(found._data) is np.ndarray:   # eager: skip the step outright
            result = None if found.item() else optimizer.step(*args, **kwargs)
        else:   # captured: the step's values, or the old ones where found (no graph break)
            result = _select_step(optimizer, found, args, kwargs)
        state["stage"] = _Stage.STEPPED
        return result

    def update(self, new_scale=None) -> None:
        """Adapt the scale after the step: times ``backoff_factor`` if this step found an
        inf or NaN, times ``growth_factor`` after ``growth_interval`` clean steps (kept when
        that overflows); or set it to ``new_scale`` (a float or a one-element tensor)."""
        if not self._enabled:
            return
        with no_grad():
            if new_scale is not None:
                if isinstance(new_scale, Tensor):
                    if new_scale.numel() != 1 or new_scale.requires_grad:
                        raise ValueError("new_scale must be a one-element tensor that does "
                                         "not require grad")
                    self._scale.copy_(new_scale.reshape(()))
                else:
                    self._scale.fill_(float(new_scale))
            else:
                found = [s["found_inf"] for s in self._per_optimizer_states.values()
                         if s["found_inf"] is not None]
                if not found:   # a compiled step's unscale_ wrote the flags, not this dict
                    found = [f for f in self._found_inf.values()
                             if type(f._data) is np.ndarray and f.item() >= 0]
                if not found:
                    raise RuntimeError("No inf checks were recorded prior to update(): call "
                                       "step() (or unscale_()) first")
                total = found[0]
                for f in found[1:]:
                    total = total + f
                self._update_scale(total > 0)
            for f in self._found_inf.values():
                f.fill_(-1.0)
        self._per_optimizer_states = defaultdict(_fresh_state)

    def _update_scale(self, found):
        # torch's _amp_update_scale_: the products in float64, rounded to float32 once
        scale, tracker = self._scale, self._growth_tracker
        wide = elementwise.cast_to(scale, dtypes.float64)
        backed_off = elementwise.cast_to(wide * self._backoff_factor, dtypes.float32)
        grown = elementwise.cast_to(wide * self._growth_factor, dtypes.float32)
        clean = tracker + 1
        at_interval = clean == self._growth_interval
        grow = elementwise.logical_and(at_interval, elementwise.isfinite(grown))
        scale.copy_(elementwise.where(found, backed_off,
                                      elementwise.where(grow, grown, scale)))
        tracker.copy_(elementwise.where(elementwise.logical_or(found, at_interval),
                                        0, clean))

    # -- queries and checkpoints -----------------------------------------------------------
    def get_scale(self) -> float:
        """The scale now, a Python float (1.0 when disabled)."""
        return self._scale.item() if self._enabled else 1.0

    def get_growth_factor(self) -> float:
        return self._growth_factor

    def set_growth_factor(self, new_factor: float) -> None:
        self._growth_factor = float(new_factor)

    def get_backoff_factor(self) -> float:
        return self._backoff_factor

    def set_backoff_factor(self, new_factor: float) -> None:
        self._backoff_factor = float(new_factor)

    def get_growth_interval(self) -> int:
        return self._growth_interval

    def set_growth_interval(self, new_interval: int) -> None:
        self._growth_interval = int(new_interval)

    def is_enabled(self) -> bool:
        return self._enabled

    def state_dict(self) -> dict:
        """The scale, factors, interval and clean-step count, as torch's keys (empty when
        disabled); ``dg.save`` writes it."""
        if not self._enabled:
            return {}
        return {"scale": self.get_scale(), "growth_factor": self._growth_factor,
                "backoff_factor": self._backoff_factor,
                "growth_interval": self._growth_interval,
                "_growth_tracker": int(self._growth_tracker.item())}

    def load_state_dict(self, state_dict: dict) -> None:
        """Load what :meth:`state_dict` returned (into the same state tensors, so a compiled
        step that holds them sees the loaded values)."""
        if not self._enabled:
            return
        if len(state_dict) == 0:
            raise RuntimeError("The source state dict is empty, possibly because it was "
                               "saved from a disabled instance of GradScaler.")
        self._growth_factor = float(state_dict["growth_factor"])
        self._backoff_factor = float(state_dict["backoff_factor"])
        self._growth_interval = int(state_dict["growth_interval"])
        with no_grad():
            self._scale.fill_(float(state_dict["scale"]))
            self._growth_tracker.fill_(int(state_dict["_growth_tracker"]))


def _select_step(optimizer, found, args, kwargs):
    """``optimizer.step()`` whose effects are undone where ``found`` is set: every parameter
    and state tensor keeps its old value (a fresh state is made first, as ``step`` would,
    so it keeps its initial value); a state tensor the update itself creates (SGD's
    momentum buffer) is zero, which is what a fresh one acts as, except with dampening,
    where torch's starts as the first gradient undamped."""
    before = {}
    with no_grad():
        for group in optimizer.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = optimizer.state[p]
                if not state and hasattr(optimizer, "_init_state"):
                    # (made now, so that the snapshot holds the values a fresh state has)
                    state.update(optimizer._init_state(p, group))
                for t in [p, *(v for v in state.values() if isinstance(v, Tensor))]:
                    before[id(t)] = creation.clone(t)
    result = optimizer.step(*args, **kwargs)
    skip = found > 0
    with no_grad():
        for group in optimizer.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                for t in [p, *(v for v in optimizer.state[p].values()
                               if isinstance(v, Tensor))]:
                    old = before.get(id(t), 0)
                    t.copy_(elementwise.where(skip, old, t))
    return result
