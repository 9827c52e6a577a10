"""``torch.nn.utils.stateless``: the older home of :func:`dualgraph.func.functional_call`."""
from ...func.modules import functional_call  # noqa: F401

__all__ = ["functional_call"]
