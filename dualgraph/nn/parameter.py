"""``nn.Parameter``: a tensor that a :class:`~dualgraph.nn.Module` registers as a weight."""
from __future__ import annotations

from ..tensor import Tensor, as_array, check_can_require_grad

# bumped by every attribute change of any module and every change of a parameter's
# requires_grad (Module._structure_version): dg.compile's guards re-read a model's facts
# only when it moved
STRUCTURE_VERSION = [0]

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

    def __setattr__(self, name, value):
        # (freezing a layer mid-training changes what a compiled step must compute; reads
        # of requires_grad, on every op, stay plain attribute reads)
        if name == "requires_grad" and value != self.requires_grad:
            STRUCTURE_VERSION[0] += 1
        object.__setattr__(self, name, value)

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
