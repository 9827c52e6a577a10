"""``nn.utils.spectral_norm`` / ``remove_spectral_norm``, the hook-based spelling most GAN
code uses (Miyato et al.): ``module.<name>`` is ``<name>_orig`` divided by its largest
singular value, estimated by power iteration with the vectors ``<name>_u`` and
``<name>_v`` (buffers; torch's state-dict keys). As torch's, a forward pre-hook runs
``n_power_iterations`` steps (``v`` then ``u``) before each training-mode call.

Torch's hook also stores the divided weight as a plain attribute; here ``module.<name>`` is
a property of a subclass made for the module (as nn/utils/weight_norm.py does), computed
from the current vectors when read, so a compiled call computes it in its graph. Read
outside a forward, it is the weight of the current ``<name>_orig`` (torch's attribute is
the one of the last forward)."""
from __future__ import annotations

from ...autograd import no_grad
from .. import functional as F
from ..parameter import Parameter
from .weight_norm import parameter_to_reparametrise, restore_class, subclass_with


def _matrix(weight, dim: int):
    if dim != 0:
        weight = weight.permute(dim, *(d for d in range(weight.dim()) if d != dim))
    return weight.flatten(1)


def _weight_property(name: str, dim: int) -> property:
    def get(module):
        weight = getattr(module, name + "_orig")
        u, v = getattr(module, name + "_u").clone(), getattr(module, name + "_v").clone()
        sigma = (u * _matrix(weight, dim).mv(v)).sum()
        return weight / sigma
    return property(get, doc=f"{name}_orig / its spectral norm (spectral_norm, dim={dim})")


def _power_iteration(name: str, dim: int, n_power_iterations: int, eps: float):
    def hook(module, args):
        if not module.training:
            return None
        with no_grad():
            weight_mat = _matrix(getattr(module, name + "_orig").detach(), dim)
            u, v = getattr(module, name + "_u"), getattr(module, name + "_v")
            for _ in range(n_power_iterations):
                v.copy_(F.normalize(weight_mat.T.mv(u), dim=0, eps=eps))
                u.copy_(F.normalize(weight_mat.mv(v), dim=0, eps=eps))
        return None
    return hook


def spectral_norm(module, name: str = "weight", n_power_iterations: int = 1,
                  eps: float = 1e-12, dim: int | None = None):
    """Divide ``module.<name>`` by its spectral norm before each call; returns the module.
    ``dim``: the weight's dim that is the matrix's rows (1 for transposed convolutions,
    0 otherwise, by default)."""
    weight = parameter_to_reparametrise(module, name, "_spectral_norms", "spectral_norm")
    if dim is None:
        dim = 1 if type(module).__name__.startswith("ConvTranspose") else 0
    h, w = _matrix(weight, dim).shape
    with no_grad():
        u = F.normalize(weight.new_empty(h).normal_(0, 1), dim=0, eps=eps)
        v = F.normalize(weight.new_empty(w).normal_(0, 1), dim=0, eps=eps)
    del module._parameters[name]
    module.register_parameter(name + "_orig", Parameter(weight.detach().clone()))
    module.register_buffer(name + "_u", u)
    module.register_buffer(name + "_v", v)
    handle = module.register_forward_pre_hook(_power_iteration(name, dim, n_power_iterations,
                                                               eps))
    subclass_with(module, name, _weight_property(name, dim), "_spectral_norms", handle)
    return module


def remove_spectral_norm(module, name: str = "weight"):
    """Undo :func:`spectral_norm`: ``module.<name>`` a plain parameter again, holding the
    current normalised weight."""
    handle, weight = restore_class(module, name, "_spectral_norms", "spectral_norm")
    handle.remove()
    del module._parameters[name + "_orig"]
    del module._buffers[name + "_u"], module._buffers[name + "_v"]
    module.register_parameter(name, Parameter(weight))
    return module
