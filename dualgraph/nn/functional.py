"""``dg.nn.functional``: the functional forms of layers, activations and losses (torch's F).

The op families define the functions; this module gathers them under torch's names.
"""
from ..ops.conv import *  # noqa: F401,F403
from ..ops.elementwise import *  # noqa: F401,F403
from ..ops.index import *  # noqa: F401,F403
from ..ops.linalg import *  # noqa: F401,F403
from ..ops.reduce import *  # noqa: F401,F403
from ..ops.shape import *  # noqa: F401,F403
