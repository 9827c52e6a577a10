"""Linear algebra ops: matmul, bmm, einsum, outer."""
METHODS: dict = {}
