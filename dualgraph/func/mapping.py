"""``vmap``, as ``torch.func.vmap``: a function mapped over a dimension of its inputs, run
once per index and the results stacked (the values of a batched call; the function sees
unbatched tensors). Traced by ``dg.compile``, the loop is unrolled into the graph."""
from __future__ import annotations

import contextlib
import functools

from .. import _pytree
from .._namespace import get_rng_state, set_rng_state
from ..dispatch import modes
from ..ops import creation, shape as shape_ops
from ..tensor import Tensor


def vmap(func, in_dims=0, out_dims=0, randomness: str = "error", *, chunk_size=None):
    """``func`` mapped over a dimension of its inputs: ``in_dims`` (an int or None for all
    arguments, or a tuple with one entry per argument, itself nested like the argument)
    says which dimension of each tensor is mapped (None: passed whole to every call);
    ``out_dims`` where the mapped dimension goes in each output. Keyword arguments are
    passed whole. ``randomness``: ``"error"`` (a random op inside raises), ``"different"``
    (each index draws its own numbers) or ``"same"`` (every index draws the same)."""
    if randomness not in ("error", "different", "same"):
        raise ValueError(f"vmap: randomness must be 'error', 'different' or 'same', got "
                         f"{randomness!r}")

    @functools.wraps(func)
    def mapped(*args, **kwargs):
        leaves, spec = _pytree.flatten(list(args))
        dims = _leaf_dims(in_dims, args)
        size = _mapped_size(leaves, dims)
        outputs = []
        with _random_draws(randomness) as before_each:
            for index in range(size):
                sample = [leaf if d is None else leaf.select(d, index)
                          for leaf, d in zip(leaves, dims)]
                before_each(index)
                outputs.append(func(*_pytree.unflatten(spec, sample), **kwargs))
        if size == 0:
            sample = [leaf if d is None else creation.zeros(
                _without(leaf.shape, d), dtype=leaf.dtype) for leaf, d in zip(leaves, dims)]
            outputs.append(func(*_pytree.unflatten(spec, sample), **kwargs))
        return _stacked(outputs, out_dims, size)
    return mapped


def _leaf_dims(in_dims, args: tuple) -> list:
    """One mapped dimension (or None) per leaf of ``args``, from ``in_dims`` read as a
    prefix of the arguments' structure."""
    if isinstance(in_dims, (int, type(None))):
        return [in_dims] * len(_pytree.flatten(list(args))[0])
    if not isinstance(in_dims, (tuple, list)) or len(in_dims) != len(args):
        raise ValueError(f"vmap: in_dims is {in_dims!r} but the function got {len(args)} "
                         "positional arguments; give an int, or a tuple with one entry each")
    dims: list = []
    for arg, spec in zip(args, in_dims):
        dims += _prefix_dims(spec, arg)
    return dims


def _prefix_dims(spec, tree) -> list:
    if isinstance(spec, (int, type(None))):
        return [spec] * len(_pytree.flatten(tree)[0])
    if isinstance(spec, dict) and isinstance(tree, dict) and set(spec) == set(tree):
        return [d for k in tree for d in _prefix_dims(spec[k], tree[k])]
    if isinstance(spec, (tuple, list)) and isinstance(tree, (tuple, list)) \
            and len(spec) == len(tree):
        return [d for s, t in zip(spec, tree) for d in _prefix_dims(s, t)]
    raise ValueError(f"vmap: in_dims entry {spec!r} does not match the structure of its "
                     f"argument ({type(tree).__name__})")


def _mapped_size(leaves: list, dims: list) -> int:
    sizes = set()
    for leaf, d in zip(leaves, dims):
        if d is None:
            continue
        if not isinstance(leaf, Tensor):
            raise ValueError(f"vmap: in_dim {d} was given for an input that is not a Tensor "
                             f"({type(leaf).__name__}); use None for it")
        if not -leaf.dim() <= d < max(leaf.dim(), 1) or leaf.dim() == 0:
            raise ValueError(f"vmap: in_dim {d} is out of range for an input of shape "
                             f"{tuple(leaf.shape)}")
        sizes.add(leaf.shape[d])
    if not sizes:
        raise ValueError("vmap: at least one input must be a Tensor with an in_dim that is "
                         "not None")
    if len(sizes) > 1:
        raise ValueError(f"vmap: the mapped dimensions have different sizes {sorted(sizes)}; "
                         "all inputs mapped must have the same size there")
    return sizes.pop()


def _without(shape, d: int) -> tuple:
    shape = list(shape)
    del shape[d]
    return tuple(shape)


@contextlib.contextmanager
def _random_draws(randomness: str):
    """Yields a function called before each index's call: with ``"same"`` it rewinds the
    generator to where the first call started; with ``"error"`` the block checks that no
    call drew a number. (Traced by ``dg.compile``, both are left to the eager run:
    each index draws its own numbers.)"""
    if randomness == "different" or modes.tracer is not None:
        yield lambda index: None
        return
    start, after_first = get_rng_state(), []

    def before_each(index: int) -> None:
        if randomness == "same" and index > 0:
            after_first[:] = after_first or [get_rng_state()]
            set_rng_state(start)
    yield before_each
    if randomness == "same" and after_first:
        set_rng_state(after_first[0])
    elif randomness == "error" and not bool((get_rng_state() == start).all()):
        raise RuntimeError("vmap: called a random operation while in randomness='error' mode; "
                           "pass randomness='same' or 'different' to vmap, or draw the random "
                           "numbers outside it")


def _stacked(outputs: list, out_dims, size: int):
    flat = [_pytree.flatten(o) for o in outputs]
    spec = flat[0][1]
    leaves_per_call = [f[0] for f in flat]
    dims = ([out_dims] * len(leaves_per_call[0]) if isinstance(out_dims, (int, type(None)))
            else _prefix_dims(out_dims, outputs[0]))
    result = []
    for j, d in enumerate(dims):
        column = [leaves[j] for leaves in leaves_per_call]
        if not isinstance(column[0], Tensor):
            raise ValueError(f"vmap: the function must return Tensors, got "
                             f"{type(column[0]).__name__}")
        if d is None:
            if modes.tracer is None and any(
                    c is not column[0] and not bool((c == column[0]).all()) for c in column):
                raise ValueError("vmap: out_dims is None for an output that differs between "
                                 "the mapped indices; give it a dimension to map to")
            result.append(column[0])
            continue
        stacked = shape_ops.stack(column[:size], dim=d) if size else \
            shape_ops.narrow(shape_ops.stack(column, dim=d), d, 0, 0)
        result.append(stacked)
    return _pytree.unflatten(spec, result)
