"""``nn.utils.prune``: masks that zero entries of a module's parameter, as torch's.

Pruning ``module.<name>`` moves the Parameter to ``<name>_orig``, registers the mask as the
buffer ``<name>_mask``, sets the plain attribute ``<name> = <name>_orig * <name>_mask`` and
registers the pruning method as a forward pre-hook that recomputes it before every call
(so the state dict holds both, gradients reach ``_orig`` through the mask, and a weight
read between a step and the next forward is the one the last forward used, as torch's).
Pruning a parameter again combines the methods in a :class:`PruningContainer`: the new
method prunes among the entries (or channels) the mask still keeps. :func:`remove` makes
the pruned weight a Parameter again.

Masks are computed by tensor ops (``topk`` of magnitudes or of norms along a dim, ties
broken as torch's ``topk`` does not promise either), so they follow torch's on the same
weights; ``random_*`` draw from dualgraph's generator, not torch's."""
from __future__ import annotations

import numbers

from ...autograd import no_grad
from ...ops import creation, shape

__all__ = ["BasePruningMethod", "PruningContainer", "Identity", "RandomUnstructured",
           "L1Unstructured", "RandomStructured", "LnStructured", "CustomFromMask",
           "identity", "random_unstructured", "l1_unstructured", "random_structured",
           "ln_structured", "global_unstructured", "custom_from_mask", "remove", "is_pruned"]


def _check_amount(amount) -> None:
    """``amount`` is a float in [0, 1] (a fraction) or a non-negative int (a count)."""
    if isinstance(amount, bool) or not isinstance(amount, numbers.Real) or amount < 0 or (
            not isinstance(amount, numbers.Integral) and amount > 1):
        raise ValueError(f"amount={amount} should either be a float in the range [0, 1] "
                         "or a non-negative integer")


def _nparams_toprune(amount, tensor_size: int) -> int:
    """``amount`` as a count: an int as given, a fraction of ``tensor_size`` rounded."""
    _check_amount(amount)
    count = amount if isinstance(amount, numbers.Integral) else round(amount * tensor_size)
    if count > tensor_size:
        raise ValueError(f"amount={amount} should be smaller than the number of parameters "
                         f"to prune={tensor_size}")
    return int(count)


class BasePruningMethod:
    """A pruning method: ``compute_mask`` of the importance scores given the mask so far;
    as a forward pre-hook it sets ``module.<name>`` to the masked original."""
    PRUNING_TYPE = "unstructured"
    _tensor_name: str

    def __call__(self, module, inputs):
        setattr(module, self._tensor_name, self.apply_mask(module))

    def compute_mask(self, t, default_mask):
        raise NotImplementedError

    def apply_mask(self, module):
        orig = getattr(module, self._tensor_name + "_orig")
        mask = getattr(module, self._tensor_name + "_mask")
        return mask.to(dtype=orig.dtype) * orig

    @classmethod
    def apply(cls, module, name, *args, importance_scores=None, **kwargs):
        """Prune ``module.<name>`` by a new ``cls(*args, **kwargs)``, combined with the
        methods that pruned it before (a :class:`PruningContainer`)."""
        old, old_id = None, None
        for k, hook in module._forward_pre_hooks.items():
            if isinstance(hook, BasePruningMethod) and hook._tensor_name == name:
                if old is not None:
                    raise RuntimeError(f"Only one pruning method can be registered on "
                                       f"parameter {name!r} of the module")
                old, old_id = hook, k
        method = cls(*args, **kwargs)
        method._tensor_name = name
        if old is not None:
            if not isinstance(old, PruningContainer):
                old = PruningContainer(old)
            old.add_pruning_method(method)
            method = old
            del module._forward_pre_hooks[old_id]
        orig = getattr(module, name)
        if importance_scores is not None and tuple(importance_scores.shape) != tuple(orig.shape):
            raise ValueError(f"importance_scores should have the same shape as parameter "
                             f"{name} of {module}")
        scores = orig if importance_scores is None else importance_scores
        if old is None:
            module.register_parameter(name + "_orig", orig)
            del module._parameters[name]
            default_mask = creation.ones_like(orig)
        else:
            default_mask = getattr(module, name + "_mask").detach().clone()
        with no_grad():
            mask = method.compute_mask(scores.detach(), default_mask=default_mask)
        module.register_buffer(name + "_mask", mask)
        setattr(module, name, method.apply_mask(module))
        module.register_forward_pre_hook(method)
        return method

    def remove(self, module):
        """Make the pruned ``module.<name>`` its Parameter again (the mask applied)."""
        weight = self.apply_mask(module)
        delattr(module, self._tensor_name)
        orig = module._parameters.pop(self._tensor_name + "_orig")
        orig.data = weight.data
        del module._buffers[self._tensor_name + "_mask"]
        setattr(module, self._tensor_name, orig)


class PruningContainer(BasePruningMethod):
    """The methods that pruned one parameter, in order: the last prunes among what the
    earlier ones kept (entries, channels along its dim, or anywhere for a custom mask)."""

    def __init__(self, *args):
        self._pruning_methods: tuple = ()
        for method in args:
            self.add_pruning_method(method)

    def add_pruning_method(self, method):
        if not isinstance(method, BasePruningMethod) and method is not None:
            raise TypeError(f"{type(method)} is not a BasePruningMethod subclass")
        if method is not None:
            if self._pruning_methods and self._tensor_name != method._tensor_name:
                raise ValueError(f"Can only add pruning methods acting on the parameter named "
                                 f"{self._tensor_name!r} to PruningContainer. Found "
                                 f"{method._tensor_name!r}")
            self._tensor_name = method._tensor_name
            self._pruning_methods += (method,)

    def __len__(self):
        return len(self._pruning_methods)

    def __iter__(self):
        return iter(self._pruning_methods)

    def __getitem__(self, idx):
        return self._pruning_methods[idx]

    def compute_mask(self, t, default_mask):
        method = self._pruning_methods[-1]
        mask = default_mask.to(dtype=t.dtype)
        if method.PRUNING_TYPE == "unstructured":
            where = default_mask == 1
        elif method.PRUNING_TYPE == "structured":
            dim = method.dim % t.dim()
            kept = default_mask.sum(dim=[d for d in range(t.dim()) if d != dim]) != 0
            where = (slice(None),) * dim + (kept,)
        elif method.PRUNING_TYPE == "global":
            where = (slice(None),) * t.dim()
        else:
            raise ValueError(f"Unrecognized PRUNING_TYPE {method.PRUNING_TYPE}")
        partial = method.compute_mask(t[where], default_mask=default_mask[where])
        mask[where] = partial.to(dtype=mask.dtype)
        return mask


class Identity(BasePruningMethod):
    """Prunes nothing: a mask of ones."""

    def compute_mask(self, t, default_mask):
        return default_mask

    @classmethod
    def apply(cls, module, name):
        return super().apply(module, name)


class _Unstructured(BasePruningMethod):
    """Zeroes the ``amount`` entries of least ``_scores``."""

    def __init__(self, amount):
        _check_amount(amount)
        self.amount = amount

    def compute_mask(self, t, default_mask):
        count = _nparams_toprune(self.amount, t.numel())
        mask = default_mask.clone()
        if count:
            least = self._scores(t).reshape(-1).topk(count, largest=False).indices
            mask.view(-1)[least] = 0
        return mask

    @classmethod
    def apply(cls, module, name, amount, importance_scores=None):
        return super().apply(module, name, amount=amount, importance_scores=importance_scores)


class RandomUnstructured(_Unstructured):
    """Zeroes ``amount`` entries drawn at random."""

    def _scores(self, t):
        return -creation.rand_like(t)


class L1Unstructured(_Unstructured):
    """Zeroes the ``amount`` entries of least magnitude."""

    def _scores(self, t):
        return t.abs()


class _Structured(BasePruningMethod):
    """Zeroes the ``amount`` channels (slices along ``dim``) of least ``_scores``."""
    PRUNING_TYPE = "structured"

    def __init__(self, amount, dim=-1):
        _check_amount(amount)
        self.amount, self.dim = amount, dim

    def compute_mask(self, t, default_mask):
        if t.dim() <= 1:
            raise ValueError("Structured pruning can only be applied to multidimensional "
                             f"tensors. Found tensor of shape {tuple(t.shape)} with "
                             f"{t.dim()} dims")
        dim = self.dim % t.dim()
        count = _nparams_toprune(self.amount, t.shape[dim])
        if count == 0:
            return default_mask
        kept = self._scores(t, dim).topk(t.shape[dim] - count).indices
        mask = creation.zeros_like(t)
        mask[(slice(None),) * dim + (kept,)] = 1
        return mask * default_mask.to(dtype=mask.dtype)


class RandomStructured(_Structured):
    """Zeroes ``amount`` channels along ``dim`` drawn at random."""

    def _scores(self, t, dim):
        return creation.rand(t.shape[dim])

    @classmethod
    def apply(cls, module, name, amount, dim=-1):
        return super().apply(module, name, amount=amount, dim=dim)


class LnStructured(_Structured):
    """Zeroes the ``amount`` channels along ``dim`` of least ``n``-norm."""

    def __init__(self, amount, n, dim=-1):
        super().__init__(amount, dim)
        self.n = n

    def _scores(self, t, dim):
        return t.norm(p=self.n, dim=[d for d in range(t.dim()) if d != dim])

    @classmethod
    def apply(cls, module, name, amount, n, dim, importance_scores=None):
        return super().apply(module, name, amount=amount, n=n, dim=dim,
                             importance_scores=importance_scores)


class CustomFromMask(BasePruningMethod):
    """Zeroes where the given ``mask`` is 0 (on top of the mask so far)."""
    PRUNING_TYPE = "global"

    def __init__(self, mask):
        self.mask = mask

    def compute_mask(self, t, default_mask):
        return default_mask * self.mask.to(dtype=default_mask.dtype)

    @classmethod
    def apply(cls, module, name, mask):
        return super().apply(module, name, mask=mask)


def identity(module, name):
    """Prune nothing, but reparametrise ``module.<name>`` as pruning does."""
    Identity.apply(module, name)
    return module


def random_unstructured(module, name, amount):
    """Prune ``amount`` entries of ``module.<name>`` drawn at random."""
    RandomUnstructured.apply(module, name, amount)
    return module


def l1_unstructured(module, name, amount, importance_scores=None):
    """Prune the ``amount`` entries of least magnitude (of ``importance_scores``)."""
    L1Unstructured.apply(module, name, amount=amount, importance_scores=importance_scores)
    return module


def random_structured(module, name, amount, dim):
    """Prune ``amount`` channels along ``dim`` drawn at random."""
    RandomStructured.apply(module, name, amount, dim)
    return module


def ln_structured(module, name, amount, n, dim, importance_scores=None):
    """Prune the ``amount`` channels along ``dim`` of least ``n``-norm."""
    LnStructured.apply(module, name, amount, n, dim, importance_scores=importance_scores)
    return module


def global_unstructured(parameters, pruning_method, importance_scores=None, **kwargs):
    """Prune the ``(module, name)`` pairs of ``parameters`` together: ``pruning_method``'s
    mask over all their entries (the masks so far concatenated), each given its part by
    :func:`custom_from_mask`."""
    parameters = list(parameters)
    importance_scores = importance_scores or {}
    scores = shape.cat([importance_scores.get((m, n), getattr(m, n)).reshape(-1)
                        for m, n in parameters])
    default_mask = shape.cat([(getattr(m, n + "_mask") if hasattr(m, n + "_mask")
                               else creation.ones_like(getattr(m, n))).reshape(-1)
                              for m, n in parameters])
    container = PruningContainer()
    container._tensor_name = "temp"
    method = pruning_method(**kwargs)
    method._tensor_name = "temp"
    if method.PRUNING_TYPE != "unstructured":
        raise TypeError(f'Only "unstructured" PRUNING_TYPE supported for the '
                        f"`pruning_method`. Found method {pruning_method} of type "
                        f"{method.PRUNING_TYPE}")
    container.add_pruning_method(method)
    with no_grad():
        final = container.compute_mask(scores.detach(), default_mask)
    start = 0
    for module, name in parameters:
        param = getattr(module, name)
        custom_from_mask(module, name, final[start:start + param.numel()].view_as(param))
        start += param.numel()


def custom_from_mask(module, name, mask):
    """Prune ``module.<name>`` where ``mask`` is 0."""
    CustomFromMask.apply(module, name, mask)
    return module


def remove(module, name):
    """Make ``module.<name>`` a Parameter again, holding the pruned values; the original,
    the mask and the hook are gone."""
    for k, hook in module._forward_pre_hooks.items():
        if isinstance(hook, BasePruningMethod) and hook._tensor_name == name:
            hook.remove(module)
            del module._forward_pre_hooks[k]
            return module
    raise ValueError(f"Parameter {name!r} of module {module} has to be pruned before "
                     "pruning can be removed")


def is_pruned(module) -> bool:
    """Whether ``module`` or a submodule has a pruning method among its forward pre-hooks."""
    return any(isinstance(hook, BasePruningMethod) for m in module.modules()
               for hook in m._forward_pre_hooks.values())
