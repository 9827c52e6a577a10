"""dg.save / dg.load (being written)."""
