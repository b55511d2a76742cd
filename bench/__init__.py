"""The benchmarks, outside the product: `python -m bench <suite>` (bench/registry.py), one timing harness
(bench/harness.py), the results file they append to (bench/results.py). How to add one: bench/README.md."""
