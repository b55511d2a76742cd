"""Run as `PYTHONPATH=. python tests/ab_context_step.py`. Per-step time split of NanoSpec + context vs prompt lookup
alone (conv / qa / math prompts × 128 tokens, 2 rounds interleaved, one process): where the gap between them goes."""
import time
import torch
from collections import defaultdict
from core.pipeline import Pipeline
from core.config import SpecConfig
from core.prompts import load_prompts
torch.set_num_threads(2)
pipe = Pipeline.load()
ps = [p for p in load_prompts("assets/prompts/speclens_prompts.jsonl") if p.category in ("conv", "qa", "math")][:6]
ctx_pipe = Pipeline.load(draft="context")
for rnd in range(2):
    for name in ("nanospec+context", "context"):
        pp = pipe if name != "context" else ctx_pipe
        cfg = SpecConfig(method="nanospec", context="on", max_new_tokens=128)
        tot, n, wall, model_steps = defaultdict(float), 0, 0.0, 0
        for p in ps:
            t0 = time.perf_counter()
            recs = list(pp.run(p.text, cfg))
            wall += time.perf_counter() - t0
            for r in recs:
                if r.kind == "step":
                    n += 1
                    for k, v in r.timing_ms.items():
                        tot[k] += v
                    model_steps += any(o == "model" for o in r.tree.get("origin", []))
        print(rnd, name, "steps", n, "model steps", model_steps, "wall", round(wall, 2), "ms/step", round(wall * 1000 / n, 2),
              {k: round(v / n, 2) for k, v in tot.items()})
