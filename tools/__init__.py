"""Tools outside the product: the GPU device check (`python -m tools.device_check`), the weights chunk shipper
(`python -m tools.chunks`), tiny random models for tests and the device check, greedy ids before / after a change."""
