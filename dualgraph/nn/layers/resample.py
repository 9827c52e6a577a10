"""Layers that resample, pad or reorder the spatial dims and channels: Upsample,
PixelShuffle, PixelUnshuffle, ChannelShuffle and the padding layers (ReflectionPad2d,
ReplicationPad2d, ZeroPad2d, ConstantPad2d, CircularPad2d, and their 1-d and 3-d forms), as
in ``torch.nn``; each calls its ``nn.functional`` form."""
from __future__ import annotations

from .. import functional as F
from ..module import Module


class Upsample(Module):
    """``F.interpolate`` with fixed settings: ``nn.Upsample(scale_factor=2, mode='nearest')``.

    >>> import dualgraph as dg
    >>> Upsample(scale_factor=2)(dg.zeros(1, 3, 4, 4)).shape
    (1, 3, 8, 8)
    """

    def __init__(self, size=None, scale_factor=None, mode="nearest", align_corners=None,
                 recompute_scale_factor=None):
        super().__init__()
        self.size = size
        self.scale_factor = float(scale_factor) if isinstance(scale_factor, (int, float)) \
            else scale_factor
        self.mode = mode
        self.align_corners = align_corners
        self.recompute_scale_factor = recompute_scale_factor

    def forward(self, input):
        return F.interpolate(input, self.size, self.scale_factor, self.mode,
                             self.align_corners, self.recompute_scale_factor)

    def extra_repr(self) -> str:
        what = f"scale_factor={self.scale_factor!r}" if self.scale_factor is not None \
            else f"size={self.size!r}"
        return f"{what}, mode={self.mode!r}"


class UpsamplingNearest2d(Upsample):
    """``Upsample`` in mode 'nearest'."""

    def __init__(self, size=None, scale_factor=None):
        super().__init__(size, scale_factor, mode="nearest")


class UpsamplingBilinear2d(Upsample):
    """``Upsample`` in mode 'bilinear' with ``align_corners=True`` (as torch's)."""

    def __init__(self, size=None, scale_factor=None):
        super().__init__(size, scale_factor, mode="bilinear", align_corners=True)


class PixelShuffle(Module):
    """(*, C * r * r, H, W) -> (*, C, H * r, W * r): sub-pixel upsampling."""

    def __init__(self, upscale_factor: int):
        super().__init__()
        self.upscale_factor = upscale_factor

    def forward(self, input):
        return F.pixel_shuffle(input, self.upscale_factor)

    def extra_repr(self) -> str:
        return f"upscale_factor={self.upscale_factor}"


class PixelUnshuffle(Module):
    """(*, C, H * r, W * r) -> (*, C * r * r, H, W), the inverse of PixelShuffle."""

    def __init__(self, downscale_factor: int):
        super().__init__()
        self.downscale_factor = downscale_factor

    def forward(self, input):
        return F.pixel_unshuffle(input, self.downscale_factor)

    def extra_repr(self) -> str:
        return f"downscale_factor={self.downscale_factor}"


class _PadNd(Module):
    _mode: str
    _ndim: int

    def __init__(self, padding, value=None):
        super().__init__()
        self.padding = (padding,) * (2 * self._ndim) if isinstance(padding, int) \
            else tuple(padding)
        if len(self.padding) != 2 * self._ndim:
            raise ValueError(f"{type(self).__name__}: padding {padding!r} should be an int "
                             f"or {2 * self._ndim} ints (left, right, ...)")
        self.value = value

    def forward(self, input):
        return F.pad(input, self.padding, self._mode, self.value)

    def extra_repr(self) -> str:
        if self.value is None:
            return f"{self.padding}"
        return f"padding={self.padding}, value={self.value}"   # (torch's own two forms)


def _pad_layer(name: str, mode: str, ndim: int, doc: str, constant: bool = False):
    """A padding layer class: ``mode`` over the last ``ndim`` dims."""
    if constant:
        def __init__(self, padding, value=0.0):
            _PadNd.__init__(self, padding, value)
    else:
        def __init__(self, padding):
            _PadNd.__init__(self, padding)
    return type(name, (_PadNd,), {"_mode": mode, "_ndim": ndim, "__doc__": doc,
                                  "__init__": __init__, "__module__": __name__})


ReflectionPad1d = _pad_layer("ReflectionPad1d", "reflect", 1, "Pad the last dim by reflection.")
ReflectionPad2d = _pad_layer("ReflectionPad2d", "reflect", 2,
                             "Pad the last two dims by reflection (no edge repeat).")
ReplicationPad1d = _pad_layer("ReplicationPad1d", "replicate", 1,
                              "Pad the last dim by repeating its edge.")
ReplicationPad2d = _pad_layer("ReplicationPad2d", "replicate", 2,
                              "Pad the last two dims by repeating their edges.")
ConstantPad1d = _pad_layer("ConstantPad1d", "constant", 1, "Pad the last dim with a value.",
                           constant=True)
ConstantPad2d = _pad_layer("ConstantPad2d", "constant", 2,
                           "Pad the last two dims with a value.", constant=True)
ZeroPad1d = _pad_layer("ZeroPad1d", "constant", 1, "Pad the last dim with zeros.")
ZeroPad2d = _pad_layer("ZeroPad2d", "constant", 2, "Pad the last two dims with zeros.")
ReflectionPad3d = _pad_layer("ReflectionPad3d", "reflect", 3,
                             "Pad the last three dims by reflection (no edge repeat).")
ReplicationPad3d = _pad_layer("ReplicationPad3d", "replicate", 3,
                              "Pad the last three dims by repeating their edges.")
ConstantPad3d = _pad_layer("ConstantPad3d", "constant", 3,
                           "Pad the last three dims with a value.", constant=True)
ZeroPad3d = _pad_layer("ZeroPad3d", "constant", 3, "Pad the last three dims with zeros.")
CircularPad1d = _pad_layer("CircularPad1d", "circular", 1,
                           "Pad the last dim with its other end (periodic).")
CircularPad2d = _pad_layer("CircularPad2d", "circular", 2,
                           "Pad the last two dims with their other ends (periodic).")
CircularPad3d = _pad_layer("CircularPad3d", "circular", 3,
                           "Pad the last three dims with their other ends (periodic).")


class ChannelShuffle(Module):
    """ShuffleNet's channel shuffle of (N, C, *) input in ``groups`` (``F.channel_shuffle``)."""

    def __init__(self, groups: int):
        super().__init__()
        self.groups = groups

    def forward(self, input):
        return F.channel_shuffle(input, self.groups)

    def extra_repr(self) -> str:
        return f"groups={self.groups}"
