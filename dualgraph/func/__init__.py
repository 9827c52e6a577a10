"""Function transforms, as ``torch.func``: :func:`functional_call` (a module run on given
parameters and buffers), :func:`stack_module_state`, :func:`vmap`, :func:`grad`,
:func:`grad_and_value`, :func:`vjp`, :func:`jvp`, :func:`jacrev`, :func:`jacfwd` and
:func:`hessian`.

``vmap`` maps by running the function once per index of the mapped dimension and stacking
the results: the values are what a batched call gives (the function sees unbatched
tensors, as under torch's vmap), at the cost of one call per sample rather than one
batched call; traced by ``dg.compile``, the loop is unrolled into the graph. The derivative
transforms are reverse mode on the tape (``jacfwd`` and ``jvp`` included: see
``dg.autograd.functional``), and nest: ``grad(grad(f))``, ``vmap(grad(f))``,
``jacrev(jacrev(f))``."""
from .derivatives import (grad, grad_and_value, hessian, jacfwd, jacrev, jvp,  # noqa: F401
                          vjp)
from .mapping import vmap  # noqa: F401
from .modules import functional_call, stack_module_state  # noqa: F401

__all__ = ["functional_call", "stack_module_state", "vmap", "grad", "grad_and_value", "vjp",
           "jvp", "jacrev", "jacfwd", "hessian"]
