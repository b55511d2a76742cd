"""Measurements: benchmarks, the paper figures, the GPU device check and the serving export (token maps).
Nothing in spec/, runtime/ or kernels/ imports these."""
