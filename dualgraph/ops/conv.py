"""Convolution and pooling primitives."""
__all__: list = []
METHODS: dict = {}
