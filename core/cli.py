"""The command line's door: python -m core generate|bench|freq|train-eagle|train-slim|export|example|calibrate|maps|
doctor dispatches to the module that runs it, turns its SpecError into one line and exit status
2, and hands the paper figures their drawing (viz.paper): like app.py, the door composes the layers; nothing below it
imports viz."""
import importlib
import sys

from core.errors import one_line_errors

SUBCOMMANDS = {  # name -> module whose main(argv) runs it
    "generate": "core.generate",
    "bench": "core.paper",  # --figures DIR: the paper experiments (the methods table: python -m bench methods)
    "freq": "core.train.freq",
    "train-eagle": "core.train.eagle",
    "train-slim": "core.train.slim",
    "export": "core.maps.export",
    "maps": "core.maps.cli",  # check | compare: the token-map doctor
    "example": "core.examples",
    "calibrate": "core.cost.measure",
    "doctor": "core.kernels.cpu.doctor",
}
DRAWN = {"bench"}  # its main(argv, draw) writes the paper figures with viz.paper.draw_figures
MOVED = {  # subcommands that left the product (benchmarks, tools): where they are now; the product never imports them
    "bench-runtime": "python -m bench runtime",
    "device-check": "python -m tools.device_check",
}


def run(name: str, argv: list) -> int:
    module = importlib.import_module(SUBCOMMANDS[name])
    if name in DRAWN:
        return module.main(argv, draw=drawing()) or 0
    return module.main(argv) or 0


def drawing():
    """viz.paper.draw_figures, or None where plotly is not installed (a bare GPU machine): the tables, CSV and
    report are still written, the figures are skipped with a note."""
    try:
        from viz.paper import draw_figures
    except ModuleNotFoundError as e:
        print(f"note: figures not drawn ({e}); tables, CSV and report.md are still written", file=sys.stderr)
        return None
    return draw_figures


def dispatch(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in MOVED:
        print(f"error: `python -m core {argv[0]}` moved out of the product: run {MOVED[argv[0]]} (--help)", file=sys.stderr)
        return 2
    if not argv or argv[0] not in SUBCOMMANDS:
        print("usage: python -m core {" + "|".join(SUBCOMMANDS) + "} [options]  (--help on each)", file=sys.stderr)
        return 2
    return one_line_errors(lambda: run(argv[0], argv[1:]))
