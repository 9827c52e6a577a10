"""``dg.backends.cudnn``: settable flags with torch's defaults; there is no cuDNN."""
enabled = True
benchmark = False
deterministic = False
allow_tf32 = True


def is_available() -> bool:
    """False: dualgraph has no cuDNN backend."""
    return False


def version():
    """None: no cuDNN library is loaded."""
    return None
