"""``dg.backends.mha``: torch's switch for the fast path of ``MultiheadAttention`` and
``TransformerEncoder`` in inference. dualgraph has one path; the switch decides only
whether ``TransformerEncoder`` zeroes its padded positions as torch's nested tensors do
(nn/encoder_fastpath.py)."""

_enabled = True


def get_fastpath_enabled() -> bool:
    return _enabled


def set_fastpath_enabled(value: bool) -> None:
    global _enabled
    _enabled = bool(value)
