"""Convolution and pooling primitives."""
METHODS: dict = {}
