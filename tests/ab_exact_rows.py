"""Run as `PYTHONPATH=. python tests/ab_exact_rows.py [tokens]`. A/B in one process: plain greedy decoding (method ar, default dtype) with the exact row padding vs without."""
import sys
import torch
import core.runtime.weights as rt
from core.pipeline import Pipeline
from core.config import SpecConfig
from core.prompts import example_prompts
torch.set_num_threads(2)
pipe = Pipeline.load()
print("dtype", pipe.model.dtype, pipe.runtime_note)
real = rt.row_pad
cfg = SpecConfig(method="ar", max_new_tokens=int(sys.argv[1]) if len(sys.argv) > 1 else 64)
prompts = example_prompts()
tot = {"padded": [0, 0.0], "unpadded": [0, 0.0]}
for rnd in range(3):
    for name in (("padded", "unpadded") if rnd % 2 == 0 else ("unpadded", "padded")):
        rt.row_pad = real if name == "padded" else (lambda *a: 1)
        for p in prompts:
            recs = list(pipe.run(p.text, cfg))
            steps = [r for r in recs if r.kind == "ar"]
            tot[name][0] += len(steps)
            tot[name][1] += sum(sum(r.timing_ms.values()) for r in steps)
for k, (n, ms) in tot.items():
    print(k, "steps", n, "ms/step", round(ms / n, 3))
print("padded/unpadded step time", round((tot["padded"][1] / tot["padded"][0]) / (tot["unpadded"][1] / tot["unpadded"][0]), 4))
