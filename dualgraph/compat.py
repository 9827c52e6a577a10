"""Run PyTorch programs unchanged: ``import torch`` answered by dualgraph.

``install_torch_alias()`` puts an import hook at the front of ``sys.meta_path`` so that
``import torch``, ``import torch.nn.functional as F``, ``from torch.utils.data import
DataLoader`` and every other ``torch.X`` import give dualgraph's own module ``dualgraph.X``
(the same module object: there is no second copy of dualgraph, so ``torch.Tensor is
dualgraph.Tensor``). Nothing is installed at import; ``remove_torch_alias()`` undoes it.

>>> import dualgraph.compat
>>> dualgraph.compat.install_torch_alias()
>>> import torch.nn as nn
>>> import dualgraph
>>> nn is dualgraph.nn
True
>>> dualgraph.compat.remove_torch_alias()
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys

__all__ = ["install_torch_alias", "remove_torch_alias", "torch_alias_installed"]


class _TorchAlias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds ``alias.X`` as the already imported ``dualgraph.X`` and loads nothing."""

    def __init__(self, alias: str):
        self.alias = alias

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.alias and not fullname.startswith(self.alias + "."):
            return None
        real = "dualgraph" + fullname[len(self.alias):]
        try:
            module = importlib.import_module(real)
        except ModuleNotFoundError as e:
            if e.name != real:  # a module dualgraph.X itself needs is missing: not ours
                raise
            raise ModuleNotFoundError(
                f"No module named {fullname!r}: the {self.alias!r} alias points at dualgraph, "
                f"which has no module {real!r}; import it from real PyTorch without the alias "
                f"(dualgraph.compat.remove_torch_alias()) or tell dualgraph's authors you need "
                f"it", name=fullname) from None
        return importlib.util.spec_from_loader(fullname, self, is_package=hasattr(
            module, "__path__"))

    def create_module(self, spec):
        module = importlib.import_module("dualgraph" + spec.name[len(self.alias):])
        spec.loader_state = module.__spec__
        # dualgraph registers some modules only in sys.modules under a module that is no
        # package (``dualgraph.utils.data.dataloader``, ``dualgraph.nn.modules.linear``), which
        # the import system would never look for under the alias: name them all now
        for name, sub in list(sys.modules.items()):
            if name.startswith(module.__name__ + ".") and sub is not None:
                sys.modules.setdefault(self.alias + name[len("dualgraph"):], sub)
        return module

    def exec_module(self, module):
        # the import system stamped the alias's spec on dualgraph's module: give it back its
        # own, so that dualgraph's relative imports and importlib.reload keep working
        module.__spec__ = module.__spec__.loader_state


_installed: list[_TorchAlias] = []


def torch_alias_installed() -> bool:
    """Whether ``import torch`` currently gives dualgraph.

    >>> torch_alias_installed()
    False
    """
    return bool(_installed)


def install_torch_alias(alias: str = "torch") -> None:
    """Make ``import torch`` (and every ``torch.X``) give dualgraph's modules.

    Raises ``RuntimeError`` when the real PyTorch is already imported in this process: its
    modules would mix with dualgraph's. Calling it twice is harmless.

    >>> install_torch_alias(); import torch; torch.zeros(2).shape
    dualgraph.Size([2])
    >>> remove_torch_alias()
    """
    if _installed:
        return
    loaded = sys.modules.get(alias)
    if loaded is not None and not loaded.__name__.startswith("dualgraph"):
        raise RuntimeError(
            f"{alias!r} is already imported from {getattr(loaded, '__file__', '?')}: install "
            f"the alias before anything imports the real PyTorch (or run the program in a "
            f"fresh process)")
    finder = _TorchAlias(alias)
    sys.meta_path.insert(0, finder)
    _installed.append(finder)


def remove_torch_alias() -> None:
    """Undo ``install_torch_alias``: later ``import torch`` finds the real PyTorch again.

    >>> remove_torch_alias(); torch_alias_installed()
    False
    """
    while _installed:
        finder = _installed.pop()
        sys.meta_path.remove(finder)
        for name in [n for n in sys.modules if n == finder.alias
                     or n.startswith(finder.alias + ".")]:
            if sys.modules[name].__name__.startswith("dualgraph"):
                del sys.modules[name]
