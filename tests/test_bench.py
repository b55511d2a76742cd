"""The benchmark door (python -m bench): every registered suite is a module with main(argv), the harness interleaves
its contenders and reduces their samples, the A/B switches parse as suite options, bad input is one error line."""
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from bench import harness, options, registry
from core.errors import SpecError

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("name", list(registry.SUITES))
def test_every_registered_suite_is_a_module_with_main(name):
    module, desc = registry.SUITES[name]
    assert callable(importlib.import_module(module).main) and desc and "\n" not in desc


def test_the_harness_warms_up_then_interleaves_round_by_round():
    calls = []
    t = harness.interleave({"a": lambda: calls.append("a") or 1, "b": lambda: calls.append("b") or 2}, rounds=2,
                           warmup=1, before=lambda k: calls.append(f"<{k}"))
    assert calls == ["a", "b", "<a", "a", "<b", "b", "<a", "a", "<b", "b"]
    assert t.keys() == ["a", "b"] and t.outputs["b"] == [2, 2] and len(t.samples["a"]) == 2


def test_the_harness_reduces_samples_to_min_median_mean_and_ratios():
    t = harness.Timings()
    for ms in (3.0, 1.0, 2.0):
        t.add("a", ms)
    for ms in (4.0, 6.0):
        t.add("b", ms)
    assert (t.min("a"), t.median("a"), t.mean("a")) == (1.0, 2.0, 2.0)
    assert t.ratio("a", "b") == 0.25 and t.ratio("a", "b", "mean") == 0.4 and harness.ratio(1.0, 0) == ""
    assert harness.best(lambda: None, 3) >= 0 and harness.clock(lambda: 7)[1] == 7


def test_the_ab_switches_are_suite_options():
    import argparse
    p = argparse.ArgumentParser()
    options.add_switches(p)
    args = p.parse_args(["--fast", "codes=0,one_call=0", "--q8", "stream=0,interleave=0"])
    assert options.fast_switches(args) == {"codes": False, "one_call": False}
    cfg = options.fast_config(args)
    assert (cfg.codes, cfg.one_call) == (False, False)
    assert options.pairs("prefetch=2048,interleave=1", options.Q8, "--q8") == {"prefetch": 2048, "interleave": True}
    with pytest.raises(SpecError, match="--q8 'burst=1'"):
        options.pairs("burst=1", options.Q8, "--q8")


def test_the_door_lists_the_suites_and_turns_bad_input_into_one_error_line():
    listed = subprocess.run([sys.executable, "-m", "bench", "list"], cwd=ROOT, capture_output=True, text=True)
    assert listed.returncode == 0 and all(name in listed.stdout for name in registry.SUITES)
    bad = subprocess.run([sys.executable, "-m", "bench", "methods", "--methods", "full,bogus", "--out", "/tmp/x"],
                         cwd=ROOT, capture_output=True, text=True, timeout=600)
    err = [line for line in bad.stderr.splitlines() if line.startswith("error:")]
    assert bad.returncode == 2 and len(err) == 1 and "bogus" in err[0] and "Traceback" not in bad.stderr


def test_the_product_door_points_to_where_a_moved_subcommand_went():
    r = subprocess.run([sys.executable, "-m", "core", "bench-runtime"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 2 and "python -m bench runtime" in r.stderr
