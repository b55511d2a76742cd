"""The Maps tab: an uploaded map is read in memory and checked (ui/maps_tab.py), the report and the coverage plot
rendered from plain dicts (viz/maps.py); a pickle with code in it is refused by name and never runs."""
import os
from pathlib import Path

import pytest

from viz.maps import coverage_fig, report_html

FIX = Path(__file__).resolve().parent / "fixtures" / "maps"
PWNED = "/tmp/speclens-maps-unsafe-pickle-ran"
KEY = "smollm2-135m-instruct|auto"


def rep(findings, status):
    return {"file": "upload", "format": "pt ids", "size": 3, "model": "m", "vocab_size": 10, "findings": findings,
            "status": status}


def test_the_report_names_each_finding_and_escapes_its_text():
    html = report_html(rep([{"code": "eos_missing", "severity": "error", "message": "token '<|im_end|>'"}], "error"))
    assert 'data-code="eos_missing"' in html and "&lt;|im_end|&gt;" in html and 'data-status="error"' in html


def test_a_clean_report_says_every_check_passed():
    assert "Every check passed" in report_html(rep([], "ok"))


def test_the_coverage_plot_has_one_bar_group_per_map_column():
    rows = [{"category": c, "coverage": {"a": 0.5, "b": 0.9}} for c in ("conv", "all")]
    fig = coverage_fig(rows)
    assert [t.name for t in fig.data] == ["a", "b"] and list(fig.data[1].y) == [90.0, 90.0]


@pytest.mark.model
def test_an_uploaded_pickle_with_code_in_it_is_refused_by_name():
    from ui.maps_tab import maps_ui
    if os.path.exists(PWNED):
        os.remove(PWNED)
    out = maps_ui(str(FIX / "unsafe_pickle.pt"), KEY)
    assert 'data-code="unsafe_pickle"' in out["report"] and "posix.system" in out["report"]
    assert "plot" not in out and not os.path.exists(PWNED)


@pytest.mark.model
def test_an_upload_over_the_cap_is_refused_before_it_is_read(tmp_path):
    from ui.maps_tab import MAX_UPLOAD, maps_ui
    big = tmp_path / "big.json"
    big.write_bytes(b"[" + b"1," * MAX_UPLOAD + b"1]")
    out = maps_ui(str(big), KEY)
    assert 'data-code="too_large"' in out["report"]


@pytest.mark.model
def test_an_uploaded_map_gets_its_findings_and_a_coverage_plot_beside_frspec():
    from ui.maps_tab import maps_ui
    out = maps_ui(str(FIX / "eos_missing.pt"), KEY)
    assert 'data-code="eos_missing"' in out["report"]
    names = [t.name for t in out["plot"].data]
    assert names == ["uploaded map (255)", "FR-Spec shipped (255)", "NanoSpec I_t (text alone)"]
    assert list(out["plot"].data[0].x)[-1] == "all"


def test_a_typed_model_key_outside_the_list_is_refused():
    from ui.maps_tab import maps_ui
    out = maps_ui(str(FIX / "clean.pt"), "/etc/passwd|auto")
    assert "unknown model choice" in out["note"]
