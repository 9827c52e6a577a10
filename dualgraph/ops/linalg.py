"""Linear algebra ops: matmul, bmm, einsum, outer."""
__all__: list = []
METHODS: dict = {}
