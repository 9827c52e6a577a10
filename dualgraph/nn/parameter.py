"""``nn.Parameter``: a tensor that a :class:`~dualgraph.nn.Module` registers as a weight."""
from __future__ import annotations

from ..tensor import Tensor, as_array, check_can_require_grad


class Parameter(Tensor):
    """A leaf tensor that requires grad by default and that modules collect automatically.

    ``Parameter(t)`` shares ``t``'s storage, as in torch. Ops on a parameter return plain
    tensors, so only the registered object itself is a Parameter.

    >>> import dualgraph as dg
    >>> w = dg.nn.Parameter(dg.zeros(2))
    >>> w.requires_grad, isinstance(w, dg.Tensor)
    (True, True)
    """

    __slots__ = ()

    def __new__(cls, data=None, requires_grad: bool = True):
        array = as_array([] if data is None else data)
        if requires_grad:
            check_can_require_grad(array.dtype)
        param = cls._make(array)
        param.requires_grad = requires_grad
        return param

    def __init__(self, data=None, requires_grad: bool = True):
        pass  # all the work is in __new__ (Tensor.__init__ would copy the data)

    def __repr__(self):
        return "Parameter containing:\n" + super().__repr__()
