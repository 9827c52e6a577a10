"""Devices: ``dg.device`` and the check every ``device=`` argument goes through.

dualgraph runs on the CPU. ``dg.device("cuda")`` can still be *named* (programs build it
before they ask ``dg.cuda.is_available()``), but a tensor or module placed on anything other
than the CPU raises a ``ValueError`` that says so, instead of silently computing elsewhere.
"""
from __future__ import annotations

NOT_AVAILABLE = ("is not available: dualgraph runs on the CPU only (dg.cuda.is_available() "
                 "is False); use device='cpu' or pick it with "
                 "'cuda' if dg.cuda.is_available() else 'cpu'")


class device:
    """A device name, as ``torch.device``: ``dg.device("cpu")``, ``dg.device("cuda:0")``,
    ``dg.device("cuda", 1)``; ``.type`` and ``.index``. Only ``"cpu"`` holds tensors.

    >>> dg.device("cuda:1")   # doctest: +SKIP
    device(type='cuda', index=1)
    >>> dg.zeros(2).device    # doctest: +SKIP
    device(type='cpu')
    """
    __slots__ = ("type", "index")

    def __init__(self, type, index: int | None = None):
        if isinstance(type, device):
            type, index = type.type, type.index if index is None else index
        elif isinstance(type, int) and not isinstance(type, bool):  # torch: an int is cuda:i
            type, index = "cuda", type
        elif isinstance(type, str) and ":" in type:
            if index is not None:
                raise ValueError(f"device {type!r} already names an index; pass no index")
            type, _, text = type.partition(":")
            if not text.isdigit():
                raise ValueError(f"invalid device string {type + ':' + text!r}: expected "
                                 "'type' or 'type:index', e.g. 'cpu' or 'cuda:0'")
            index = int(text)
        if not isinstance(type, str) or not type.isidentifier():
            raise ValueError(f"invalid device {type!r}: expected a string such as 'cpu'")
        if index is not None and (not isinstance(index, int) or index < 0):
            raise ValueError(f"device index must be a non-negative int, got {index!r}")
        self.type, self.index = type, index

    def __eq__(self, other):
        if not isinstance(other, device):
            return NotImplemented
        return (self.type, self.index) == (other.type, other.index)

    def __hash__(self):
        return hash((self.type, self.index))

    def __str__(self):
        return self.type if self.index is None else f"{self.type}:{self.index}"

    def __repr__(self):
        if self.index is None:
            return f"device(type={self.type!r})"
        return f"device(type={self.type!r}, index={self.index})"


CPU = device("cpu")


def check(dev) -> None:
    """Raise a ``ValueError`` unless ``dev`` (None, a string, an int or a ``device``) is the
    CPU, where every tensor lives."""
    if dev is None or dev == "cpu":
        return
    if isinstance(dev, (str, int, device)):
        if device(dev).type == "cpu":
            return
        raise ValueError(f"device {str(device(dev))!r} {NOT_AVAILABLE}")
    raise TypeError(f"device must be a string, an int or a dg.device, got "
                    f"{type(dev).__name__}")

