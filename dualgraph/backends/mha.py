"""``dg.backends.mha``: torch's switch for the fast path of ``MultiheadAttention`` and
``TransformerEncoder`` in inference. dualgraph has one path; the switch decides only
whether ``TransformerEncoder`` zeroes its padded positions as torch's nested tensors do
(nn/encoder_fastpath.py, which keeps the switch)."""
from ..nn import encoder_fastpath


def get_fastpath_enabled() -> bool:
    return encoder_fastpath.fastpath_enabled[0]


def set_fastpath_enabled(value: bool) -> None:
    encoder_fastpath.fastpath_enabled[0] = bool(value)
