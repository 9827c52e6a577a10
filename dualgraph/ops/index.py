"""Indexing ops: getitem, setitem, gather, scatter, index_select, masked_fill, topk, sort."""
__all__: list = []
METHODS: dict = {}
