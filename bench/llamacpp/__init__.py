"""llama.cpp as the benchmark peer (`python -m bench llamacpp build | bench | tg | passes`, cli.py): its build
(build.py), its runners (run.py), our decoding beside it (compare.py) and a verify's pass beside its batch (passes.py)."""
