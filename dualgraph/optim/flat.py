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
(``MAX_NUMEL``); larger parameters keep their own update. Eager only: a captured step
records each parameter's update and the ``group_updates`` pass joins them in the graph.
"""
from __future__ import annotations

import numpy as np

from ..dispatch import modes
from ..ops import creation
from ..ops.inplace import commit_inplace
from ..tensor import Tensor

# Parameters of up to this many elements take the flat step: below it (16 KiB of float32)
# gathering and scattering a parameter and its state costs less than its update's ops.
MAX_NUMEL = 4096


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
    if (type(data) is not np.ndarray or data.size > MAX_NUMEL
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
            flat_state[key] = _concat([s[key] for s in states])
    flat_p = _concat(members)
    opt._update(flat_p, _concat([p.grad for p in members]), flat_state, group)
    _scatter(flat_p, members, [None] * len(members))
    for key, flat in flat_state.items():
        if key in scalars:
            for state in states:
                _commit(state, key, flat, flat._data)
        else:
            _scatter(flat, members, states, key)


def _concat(tensors) -> Tensor:
    return Tensor._make(np.concatenate([t._data.reshape(-1) for t in tensors]))


def _scatter(flat: Tensor, members, states, key=None) -> None:
    """Write each member's slice of ``flat`` into the member (``key`` None) or into its
    state entry ``key`` (made where the flat update created it)."""
    data, offset = flat._data, 0
    for p, state in zip(members, states):
        n = p._data.size
        part = data[offset:offset + n].reshape(p._data.shape)
        offset += n
        if key is None:
            commit_inplace(p, Tensor._make(part))
        else:
            _commit(state, key, p, part)


def _commit(state: dict, key: str, like: Tensor, value: np.ndarray) -> None:
    target = state.get(key)
    if target is None:   # (a state entry the update makes at its first step)
        target = state[key] = creation.state_like(like)
    commit_inplace(target, Tensor._make(value))
