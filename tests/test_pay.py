"""The "Will it pay here?" panel (viz/pay.py): one sentence on whether speculation pays on this machine and why,
the measured costs, and each method's break-even τ with predicted against measured numbers."""
from viz.pay import pay_panel, pay_reason


def verdict(method="nanospec", shape="tree 2/4/4 + context", tau=1.8, be=1.2, speedup=1.5, t_step=25.0, t_ar=21.0):
    return {"method": method, "shape": shape, "tau": tau, "break_even_tau": be, "speedup": speedup,
            "t_step_ms": t_step, "t_ar_ms": t_ar}


def report(**run) -> dict:
    """What core.cost.choose.report returns for a calibrated machine."""
    return {"shape": "tree 2/4/4", "shape_note": "auto: tree 2/4/4 + context, predicted 1.50×", "method": "nanospec",
            "machine": {"cpu": "Test CPU", "features": ["avx2", "fma"], "threads": 2}, "date": "2026-12-02",
            "runtime_note": "fast fp32", "costs": {"verify": {"1": 21.0, "8": 23.7, "32": 39.0}, "backbone": 0.8,
                                                    "head": {"full": 2.8, "nanospec": 0.02}},
            "run": verdict(**run), "methods": [verdict(), verdict("full", "tree 2/4/7", 1.5, 1.9, 0.8, 39.0)],
            "context": verdict(shape="context alone", tau=1.6, be=1.07, speedup=1.48, t_step=22.5)}


def test_speculation_loses_when_the_runs_tau_is_below_the_break_even():
    r = pay_reason(report(), tau=1.03, speedup=0.8)
    assert r.startswith("Speculation loses here") and "τ ≥ 1.20" in r and "τ 1.03" in r and "0.80× measured" in r


def test_speculation_pays_when_the_runs_tau_reaches_the_break_even():
    r = pay_reason(report(), tau=2.1, speedup=1.6)
    assert r.startswith("Speculation pays here") and "25.0 ms against 21.0 ms" in r


def test_before_the_run_ends_the_sentence_is_the_prediction():
    assert pay_reason(report(speedup=0.9), tau=None, speedup=None).startswith("Predicted to lose here (0.90×)")


def test_the_panel_holds_this_runs_row_the_other_heads_and_no_model_draft():
    html = pay_panel(report(), {"steps": 10, "mean_accept_len": 1.7}, 1.41)
    assert html.count('class="pay-own"') == 1 and "1.41×" in html and "1.70" in html
    assert "<b>full</b>" in html and "no model draft" in html and "target step</b> 21.0 ms" in html
    assert "avx2/fma" in html and "calibrated 2026-12-02" in html


def plain_report() -> dict:
    """auto chose plain decoding: no run verdict, the heads at their best shapes, the context alone."""
    return report() | {"shape": "plain decoding", "method": "ar", "run": None,
                       "shape_note": "auto: plain decoding, as no draft is predicted to pay on this machine",
                       "methods": [verdict(speedup=0.7, be=2.0, tau=1.4)],
                       "context": verdict(shape="context alone", tau=1.49, be=1.8, speedup=0.83, t_step=17.4, t_ar=9.8)}


def test_where_auto_decodes_plainly_the_sentence_names_the_best_draft_it_passed_over():
    r = pay_reason(plain_report(), tau=1.0, speedup=1.0)
    assert r.startswith("Plain decoding is fastest here: the best draft, the context alone, is predicted at 0.83×")
    assert "17.4 ms against 9.8 ms" in r and "τ ≥ 1.80" in r and "τ 1.49" in r


def test_where_a_probe_now_predicts_a_draft_to_pay_the_sentence_says_plain_decoding_ran_on_the_calibration():
    cost = plain_report()
    cost["context"]["speedup"] = 1.02
    r = pay_reason(cost, tau=1.0, speedup=1.0)
    assert r.startswith("Plain decoding ran, as the calibration predicted no draft to pay") and "1.02×" in r


def test_where_auto_decodes_plainly_the_panel_lists_every_head_and_the_context_alone():
    html = pay_panel(plain_report(), {"steps": 64, "mean_accept_len": 1.0}, 1.0)
    assert 'class="pay-own"' not in html and "<b>nanospec</b>" in html and "no model draft" in html
    assert "auto: plain decoding" in html


def test_without_a_calibration_the_panel_names_the_command_or_the_measuring_under_way():
    missing = {"shape": "tree 3/2/6", "shape_note": "", "missing": "python -m core calibrate", "machine": {}}
    assert "<code>python -m core calibrate</code>" in pay_panel(missing)
    running = pay_panel(missing, calibrating={"state": "running", "step": "target: 32 row counts", "seconds": 12})
    assert "measuring this machine" in running and "target: 32 row counts" in running


def test_before_any_run_the_panel_invites_one():
    assert "Run a prompt" in pay_panel(None)


def test_the_verdict_follows_the_measured_speedup_and_says_when_tau_disagrees():
    r = pay_reason(report(), tau=1.07, speedup=1.04)
    assert r.startswith("Speculation pays here") and "By τ it should lose" in r
    assert "By τ" not in pay_reason(report(), tau=1.03, speedup=0.8)


def test_the_sentence_names_the_ceiling_a_draft_always_accepted_would_reach():
    r = report()
    r["run"]["ceiling"] = 1.31
    assert "always accepted would gain at most 1.31×" in pay_reason(r, tau=1.03, speedup=0.8)
    assert "at most" not in pay_reason(report(), tau=1.03, speedup=0.8)  # the context alone: no drafter, no ceiling


def test_the_panel_lists_what_was_measured_on_cpus_like_this_one():
    import json

    from core.results import RESULTS
    rows = [json.loads(x) for x in RESULTS.read_text().splitlines() if x.strip()]
    zen4 = [r for r in rows if r["cpu_class"] == "avx512" and r["model"] == "smollm2-135m-instruct" and not r["isa_cap"]]
    html = pay_panel(report(), like=zen4)
    assert "Measured on CPUs like yours" in html and "1.85× llama.cpp" in html and "(203.2 / 109.9 tok/s)" in html
    assert "Measured on CPUs like yours" not in pay_panel(report(), like=[])
