"""The experiments behind the paper figures (NanoSpec, FR-Spec, SlimSpec) for one model and draft: one module per
figure or table, named after its drawing function in viz/paper.py; grid.py runs the prompts × variants on the
methods × prompts runner (runs.py, which `python -m bench methods` prints as a table), run.py reduces the rows to
tables and writes CSV, figures and report.md (report.py)."""
from core.paper.ablation import ABLATION_COLS  # noqa: F401  (the package's API)
from core.paper.grid import plan
from core.paper.latency_table import LATENCY_COLS
from core.paper.nu_rho import NU_RHO_COLS, nu_rho_table, predicted_speedup
from core.paper.oracle_vs_actual import ORACLE_COLS
from core.paper.run import main, run_paper
from core.paper.speed_table import SPEED_COLS
from core.paper.vocab_evolution import EVOLUTION_COLS

__all__ = ["ABLATION_COLS", "EVOLUTION_COLS", "LATENCY_COLS", "NU_RHO_COLS", "ORACLE_COLS", "SPEED_COLS", "main",
           "nu_rho_table", "plan", "predicted_speedup", "run_paper"]
