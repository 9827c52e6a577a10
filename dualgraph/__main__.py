"""``python -m dualgraph COMMAND`` and the installed ``dualgraph`` script (see
``dualgraph/cli/``; ``python -m dualgraph --help`` lists the commands)."""
from __future__ import annotations

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
