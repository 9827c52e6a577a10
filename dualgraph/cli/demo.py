"""``dualgraph demo [options]``: train a small CNN on handwritten digits, eager and compiled
(``dualgraph demo --help`` lists its options)."""
from __future__ import annotations

HELP = "train a small CNN on handwritten digits (options: dualgraph demo --help)"
PASS_THROUGH = True


def run(argv: list) -> int:
    from .. import demo
    return demo.main(argv)
