"""``dg.backends.mps``: there is no Metal (MPS) backend."""


def is_available() -> bool:
    return False


def is_built() -> bool:
    return False
