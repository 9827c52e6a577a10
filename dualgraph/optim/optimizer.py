"""The :class:`Optimizer` base: parameter groups, per-parameter state, ``step`` and
``state_dict``, as in ``torch.optim.Optimizer``.

A subclass supplies two small functions: :meth:`Optimizer._init_state` (the state a
parameter gets before its first update) and :meth:`Optimizer._update` (one parameter's
update, written with in-place Tensor ops). The base runs them under ``no_grad`` for every
parameter that has a gradient. Because updates are Tensor ops, a captured training step
records them as graph nodes, and the in-place writes to parameters and state become
outputs of the graph (functionalisation).
"""
from __future__ import annotations

import copy
import functools
from collections import defaultdict

import numpy as np

from .. import dtypes
from ..autograd import enable_grad, no_grad
from ..ops import creation
from ..tensor import Tensor
from . import flat


class _Required:
    """Marks a hyper-parameter that has no default (torch's ``required``)."""

    def __repr__(self):
        return "<required parameter>"


required = _Required()


class Optimizer:
    """Base class of all optimisers.

    ``params`` is an iterable of tensors, or of dicts (parameter groups) with a ``"params"``
    entry and per-group hyper-parameters that override ``defaults``:

    >>> import dualgraph as dg
    >>> w, b = dg.zeros(3, requires_grad=True), dg.zeros(1, requires_grad=True)
    >>> opt = dg.optim.SGD([{"params": [w]}, {"params": [b], "lr": 0.5}], lr=0.1)
    >>> [g["lr"] for g in opt.param_groups]
    [0.1, 0.5]
    """

    def __init_subclass__(cls, **kwargs):
        """dualgraph's optimisers accept torch's implementation choices (``foreach``,
        ``fused``, ``capturable``), which change how torch runs an update, not what it
        computes: one loop (fused by ``dg.compile``) serves them all. A user's subclass
        keeps its own signature."""
        super().__init_subclass__(**kwargs)
        init = cls.__dict__.get("__init__")
        if init is None or not cls.__module__.startswith("dualgraph."):
            return

        @functools.wraps(init)
        def __init__(self, *args, foreach=None, fused=None, capturable=False,
                     differentiable=False, **kw):
            if differentiable:
                raise NotImplementedError(
                    f"{cls.__name__}(differentiable=True) is not supported: differentiate "
                    f"through a hand-written update (tensor ops outside no_grad) instead")
            init(self, *args, **kw)
        cls.__init__ = __init__

    def __init__(self, params, defaults: dict):
        self.defaults = defaults
        self.state: defaultdict = defaultdict(dict)
        self.param_groups: list[dict] = []
        if isinstance(params, Tensor):
            raise TypeError(
                "params argument given to the optimizer should be an iterable of Tensors or "
                "dicts, but got a Tensor; wrap it in a list: [tensor]")
        groups = list(params)
        if not groups:
            raise ValueError("optimizer got an empty parameter list")
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        for group in groups:
            self.add_param_group(group)

    def __repr__(self):
        lines = [f"{type(self).__name__} ("]
        for i, group in enumerate(self.param_groups):
            lines.append(f"Parameter Group {i}")
            lines += [f"    {k}: {v}" for k, v in sorted(group.items()) if k != "params"]
        return "\n".join(lines) + "\n)"

    def add_param_group(self, param_group: dict) -> None:
        """Add a group of parameters with its own hyper-parameters (e.g. a new layer to
        fine-tune); missing hyper-parameters come from ``defaults``."""
        if not isinstance(param_group, dict):
            raise TypeError(f"a param group must be a dict, got {type(param_group).__name__}")
        params = param_group["params"]
        if isinstance(params, Tensor):
            params = [params]
        elif isinstance(params, set):
            raise TypeError("optimizer parameters need to be organized in ordered collections, "
                            "but the ordering of tensors in sets changes between runs; "
                            "use a list")
        params = list(params)
        for p in params:
            if not isinstance(p, Tensor):
                raise TypeError(f"optimizer can only optimize Tensors, got {type(p).__name__}")
            if not p.is_leaf:
                raise ValueError("can't optimize a non-leaf Tensor; optimize the leaf it was "
                                 "computed from, or use .detach().requires_grad_()")
        if len({id(p) for p in params}) != len(params):
            raise ValueError("optimizer contains a parameter group with duplicate parameters")
        group = dict(param_group, params=params)
        for name, default in self.defaults.items():
            if default is required and name not in group:
                raise ValueError(f"parameter group didn't specify a value of required "
                                 f"optimization parameter {name}")
            group.setdefault(name, default)
        seen = {id(p) for g in self.param_groups for p in g["params"]}
        if any(id(p) in seen for p in params):
            raise ValueError("some parameters appear in more than one parameter group")
        self.param_groups.append(group)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Reset the gradients of all parameters: to ``None`` (the default, as in torch), or
        to zeros in place. Skip it to accumulate gradients over several backward passes."""
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                if set_to_none:
                    p.grad = None
                    continue
                if p.grad.grad_fn is not None:
                    p.grad.detach_()
                else:
                    p.grad.requires_grad_(False)
                with no_grad():
                    p.grad.zero_()

    def step(self, closure=None):
        """Update every parameter that has a gradient. ``closure``, when given, re-evaluates
        the model and returns the loss (it runs with grad enabled); ``step`` returns it."""
        loss = None
        if closure is not None:
            with enable_grad():
                loss = closure()
        with no_grad():
            for group in self.param_groups:
                params = []
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    state = self.state[p]
                    if not state:
                        state.update(self._init_state(p, group))
                    params.append(p)
                if self._elementwise():   # (the small ones in one update: optim/flat.py)
                    params = flat.flat_update(self, group, params, SCHEDULE_SCALARS)
                for p in params:
                    self._update(p, p.grad, self.state[p], group)
        return loss

    # Whether ``_update`` is elementwise (optim/flat.py says what that means): a class
    # that defines ``_update`` says so for its own, so a user's subclass that overrides
    # ``_update`` gets the parameter-by-parameter step unless it says so too.
    elementwise_update = False

    def _elementwise(self) -> bool:
        for cls in type(self).__mro__:
            if "_update" in cls.__dict__:
                return cls.__dict__.get("elementwise_update", False)
        return False

    def _init_state(self, p: Tensor, group: dict) -> dict:
        """The state of parameter ``p`` before its first update."""
        return {}

    def _update(self, p: Tensor, grad: Tensor, state: dict, group: dict) -> None:
        """Update ``p`` (and ``state``) in place from its gradient."""
        raise NotImplementedError

    # -- checkpoints -----------------------------------------------------------------------
    def state_dict(self) -> dict:
        """``{"state": {index: {name: value}}, "param_groups": [{..., "params": [index]}]}``
        with parameters replaced by their position over all groups, as in torch. The state
        tensors are the live buffers (not copies); ``dg.save`` writes them as they are now.
        """
        index: dict[int, int] = {}
        groups = []
        for group in self.param_groups:
            packed = {k: v for k, v in group.items() if k != "params"}
            packed["params"] = [index.setdefault(id(p), len(index)) for p in group["params"]]
            groups.append(packed)
        state = {index[id(p)]: s for p, s in self.state.items() if s}
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict) -> None:
        """Load a :meth:`state_dict` made by an optimiser over the same parameter layout.
        State tensors are copied (and floating ones cast to their parameter's dtype), so
        the loaded optimiser never shares buffers with ``state_dict``."""
        saved_groups = copy.deepcopy(state_dict["param_groups"])
        if len(saved_groups) != len(self.param_groups):
            raise ValueError(
                f"loaded state dict has {len(saved_groups)} parameter groups, this optimizer "
                f"has {len(self.param_groups)}")
        for i, (group, saved) in enumerate(zip(self.param_groups, saved_groups)):
            if len(group["params"]) != len(saved["params"]):
                raise ValueError(
                    f"loaded state dict contains a parameter group ({i}) of "
                    f"{len(saved['params'])} parameters, but this optimizer's group has "
                    f"{len(group['params'])}")
        by_index = {i: p for group, saved in zip(self.param_groups, saved_groups)
                    for i, p in zip(saved["params"], group["params"])}
        self.state = defaultdict(dict)
        for key, values in state_dict["state"].items():
            p = by_index.get(int(key))
            if p is None:
                continue
            self.state[p] = {name: _copy_state_value(p, name, v) for name, v in values.items()}
        self.param_groups = [dict(saved, params=group["params"])
                             for group, saved in zip(self.param_groups, saved_groups)]


SCHEDULE_SCALARS = ("step", "mu_product", "eta", "mu")


def _copy_state_value(p: Tensor, name: str, value):
    """A private copy of one loaded state entry; the schedule scalars (the step counter,
    NAdam's momentum product, ASGD's eta and mu: 0-d float64, see ``step_counter``) keep
    their own dtype."""
    if isinstance(value, np.ndarray):
        value = creation.tensor(value)
    if not isinstance(value, Tensor):
        return copy.deepcopy(value)
    value = value.detach()
    if name not in SCHEDULE_SCALARS and value.is_floating_point() and p.is_floating_point():
        value = value.to(p.dtype)
    return creation.clone(value)


def scalar_hypers(*values) -> bool:
    """Whether each value is a Python number (not a bool) or a 0-d tensor without history
    (a schedule's graph input): what the fused update ops take, as attributes or inputs."""
    return all(isinstance(v, (int, float)) and not isinstance(v, bool)
               or isinstance(v, Tensor) and v.shape == () and not v.requires_grad
               for v in values)


def step_counter(start=0.0) -> Tensor:
    """The per-parameter step count, a 0-d float64 tensor (see docs/optim.md for why);
    persistent state, so a compiled training step keeps counting. ``start``: its first
    value, made with the tensor (not added in place to it afterwards, a write that a
    compiled call replaying its Python lost); a 0-d tensor (a tensor lr) is added."""
    if isinstance(start, Tensor):
        return creation.state((), 0.0, dtype=dtypes.float64).add_(start)
    return creation.state((), float(start), dtype=dtypes.float64)


def check_hyper(name: str, value, low: float = 0.0, high: float | None = None) -> None:
    """Raise a ValueError unless ``low <= value`` (and ``value < high`` when given)."""
    if value < low or (high is not None and value >= high):
        bounds = f"[{low}, {high})" if high is not None else f">= {low}"
        raise ValueError(f"invalid {name}: {value} (expected {bounds})")


def regularized_grad(p: Tensor, grad: Tensor, group: dict) -> Tensor:
    """The gradient an update uses: negated for ``maximize``, plus the L2 term
    ``weight_decay * p`` (torch's coupled weight decay)."""
    if group["maximize"]:
        grad = -grad
    if group["weight_decay"] != 0:
        grad = grad.add(p, alpha=group["weight_decay"])
    return grad
