"""Neural-network modules, layers, functional and init (mirrors torch.nn)."""
