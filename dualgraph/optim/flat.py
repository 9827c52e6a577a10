"""An eager optimiser step over many small parameters at once, as torch's ``foreach`` kernels.

An update is a dozen small Tensor ops per parameter, so on a model of many small tensors
(biases, norms, small layers) ``step()`` costs dispatch, not arithmetic. Where a class's
update is elementwise (every entry of a parameter and its state is updated from the same
entries of its gradient and state, with per-group hyper-parameters and per-parameter
schedule scalars such as the step count), running it once over the concatenation of the
parameters gives every entry the same arithmetic, so the same bits:

    p1 (3,), p2 (2, 2)   ->   flat p (7,), flat grad (7,), flat exp_avg (7,), one step
    _update(flat p, flat grad, flat state)   ->   p1, p2 and their state written back

The copies in and out cost less than the per-parameter ops only for small tensors
(``inplace.FLAT_MAX_NUMEL``); larger parameters keep their own update. Eager only: a captured step
records each parameter's update and the ``group_updates`` pass joins them in the graph.
"""
from __future__ import annotations

import numpy as np

from ..dispatch import modes
from ..ops import creation, inplace
from ..tensor import Tensor


def flat_update(opt, group: dict, params: list, scalars: tuple) -> list:
    """Update the small parameters among ``params`` (each has a gradient and its state) by
    one call of ``opt._update`` per set of them that can share it (one dtype, the same
    state names, equal schedule scalars); returns the parameters left for a step of their
    own. ``scalars``: the state names that are 0-d schedule values (the step count)."""
    if modes.tracer is not None:
        return params
    sets: dict = {}
    rest = []
    for p in params:
        key = _set_key(p, opt.state[p], scalars)
        if key is None:
            rest.append(p)
        else:
            sets.setdefault(key, []).append(p)
    for members in sets.values():
        if len(members) < 2:
            rest += members
        else:
            _update_together(opt, group, members, scalars)
    return rest


def _set_key(p: Tensor, state: dict, scalars: tuple):
    """What parameters must share to be updated together, or None where ``p`` can't be:
    too large, not an eager array, a gradient of another dtype, or a state entry that is
    not an array of its shape and dtype (nor a 0-d schedule scalar)."""
    data, grad = p._data, p.grad._data
    if (type(data) is not np.ndarray or data.size > inplace.FLAT_MAX_NUMEL
            or type(grad) is not np.ndarray or grad.dtype != data.dtype):
        return None
    key = [data.dtype]
    for name, value in state.items():
        if not isinstance(value, Tensor) or type(value._data) is not np.ndarray:
            return None
        value = value._data
        if name in scalars:
            if value.shape != ():
                return None
            key.append((name, value.item()))
        elif value.shape != data.shape or value.dtype != data.dtype:
            return None
        else:
            key.append(name)
    return tuple(key)


def _update_together(opt, group: dict, members: list, scalars: tuple) -> None:
    states = [opt.state[p] for p in members]
    flat_state = {}
    for key, first in states[0].items():
        if key in scalars:
            flat_state[key] = Tensor._make(first._data.copy())
        else:
            flat_state[key] = inplace.flat_of([s[key] for s in states])
    flat_p = inplace.flat_of(members)
    opt._update(flat_p, inplace.flat_of([p.grad for p in members]), flat_state, group)
    inplace.commit_flat(members, flat_p)
    for key, flat in flat_state.items():
        like = [flat] * len(members) if key in scalars else members
        for state, p in zip(states, like):
            if key not in state:   # (an entry the update makes at its first step)
                state[key] = creation.state_like(p)
        if key in scalars:
            for state in states:
                inplace.commit_inplace(state[key], flat)
        else:
            inplace.commit_flat([s[key] for s in states], flat)
