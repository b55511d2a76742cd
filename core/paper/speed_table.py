"""Table 2 (viz.paper.fig_speed_table): tokens/s and speedup over plain decoding per category and method."""
from core.config import METHODS
import core.paper.runs as runner

SPEED_COLS = ["category", "method", "n_prompts", "tokens_per_s", "speedup_vs_ar", "mean_accept_len",
              "mean_active_vocab", "coverage"]


def speed_table(rows) -> list:
    """Table 2: the runner's summary of the main runs, per category and `all`."""
    main = [r for r in rows if r["variant"] in METHODS]
    return [{c: s[c] for c in SPEED_COLS} for s in runner.summarize_rows(main)]
