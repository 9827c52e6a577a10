"""``dg.nn.utils``: gradient clipping (being written)."""
