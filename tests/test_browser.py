"""End to end in headless Chromium: the shipped example, a real run of the default prompt, replay, phone layout.

Needs Debian's chromium (apt-get install -y chromium) and the `playwright` pip package (no browser download).
Screenshots and measured numbers go to test-artifacts/ (gitignored).
"""
import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch

from conftest import served_app

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--headless", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
ROOT = Path(__file__).resolve().parent.parent
ART = ROOT / "test-artifacts"
RUN_TOKENS = int(os.environ.get("SPECLENS_BROWSER_TOKENS", "16"))  # short: CPU CI

pytestmark = [
    pytest.mark.browser,
    pytest.mark.model,
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"{CHROMIUM} missing: apt-get install -y chromium"),
    pytest.mark.skipif(importlib.util.find_spec("playwright") is None, reason="pip package playwright missing"),
]

# Seconds from the Run click until the first streamed step shows up (the note flips to "Generating… step").
FIRST_STEP_JS = """() => {
  const note = document.querySelector('#source-note');
  const txt = note ? note.innerText : '';
  return (txt.includes('Generating') || txt.includes('your run')) ? (performance.now() - window.__clickAt) / 1000 : false;
}"""


# Logs every change of the status note with its time since the click: [[seconds, text], ...].
NOTE_LOG_JS = """() => {
  window.__clickAt = performance.now();
  window.__notes = [];
  const note = document.querySelector('#source-note');
  new MutationObserver(() => window.__notes.push([(performance.now() - window.__clickAt) / 1000,
                                                   note.innerText.slice(0, 40)]))
    .observe(note, {subtree: true, childList: true, characterData: true});
}"""


def set_max_tokens(page, n: str):
    """Open the settings accordion and type a token budget; returns the number box."""
    page.locator("#settings-accordion").get_by_role("button", name="Settings").click()
    box = page.get_by_label("number input for Max new tokens")
    box.fill(n)
    box.press("Enter")
    return box


@contextmanager
def calibrated_default(where: Path):
    """The default model's step costs measured quickly (few rows, one rep) into `where`, for the cost panel."""
    from core.cost import measure, store
    from ui.models import DEFAULT_KEY, load_pipeline
    shipped = store.costs_path
    path = lambda key: where / shipped(key).name  # noqa: E731
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(store, "costs_path", path)
        mp.setattr(measure, "costs_path", path)
        pipe = load_pipeline(DEFAULT_KEY)
        with torch.no_grad():
            measure.save_costs(pipe, measure.defaults(rows=16, width=4, contexts="64", reps=1), lambda msg: None)
        yield


@pytest.fixture(scope="module")
def url(tmp_path_factory):
    with calibrated_default(tmp_path_factory.mktemp("calibration")), served_app() as u:
        yield u


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright
    ART.mkdir(exist_ok=True)
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


def card(page, name: str) -> str:
    return page.locator(f'#summary [data-card="{name}"] .card-v').inner_text()


def open_page(browser, url, width=1400, height=900):
    page = browser.new_page(viewport={"width": width, "height": height})
    page.goto(url)
    page.wait_for_selector("#text-panel .tok-acc", timeout=60_000)
    page.evaluate("window.__firstPaint = performance.now() / 1000")
    page.wait_for_selector("#coverage-plot .js-plotly-plot .scatterlayer .trace", timeout=60_000)
    return page


def test_example_is_shown_before_any_run(browser, url):
    page = open_page(browser, url)
    assert page.locator("#text-panel .tok-acc").count() > 0
    assert page.locator("#stream-panel .stream-window .chip").count() > 0
    assert page.locator("#summary .card").count() == 7
    assert page.locator('#summary [data-card="tokens/s"] .card-v').inner_text() != "0.3"
    page.screenshot(path=str(ART / "example-desktop.png"), full_page=True)
    page.close()


def test_replay_buttons_scrub_the_panels(browser, url):
    page = open_page(browser, url)
    page.get_by_role("button", name="◀ step").click()
    page.wait_for_selector("#text-panel .step-now", timeout=30_000)
    page.close()


def test_run_default_prompt_streams_every_panel(browser, url):
    from ui.models import DEFAULT_KEY, load_pipeline
    from ui.run_tab import LAST_RUN_STATS
    load_pipeline(DEFAULT_KEY)  # measure latency with the model already loaded
    page = open_page(browser, url)
    set_max_tokens(page, str(RUN_TOKENS))
    page.locator("#shape-radio").get_by_label("the tree set below").check()  # a model tree: drafts get rejected
    page.evaluate(NOTE_LOG_JS)
    page.locator("#run-btn").click()
    first = page.wait_for_function(FIRST_STEP_JS, timeout=120_000).json_value()
    page.wait_for_selector("#source-note :text('your run')", timeout=300_000)
    total = page.evaluate("performance.now() - window.__clickAt") / 1000
    assert page.locator("#text-panel .tok-acc").count() > 0, "no accepted (green) token"
    assert page.locator("#text-panel .tok-rej").count() > 0, "no rejected (red) token"
    assert page.locator("#stream-panel .stream-window .chip").count() > 0
    assert page.locator("#coverage-plot .js-plotly-plot .scatterlayer .trace").count() >= 2
    assert page.locator("#downloads a").count() >= 2
    page.screenshot(path=str(ART / "run-desktop.png"), full_page=True)
    stats = dict(LAST_RUN_STATS)
    shown = float(card(page, "tokens/s"))
    assert abs(shown - stats["tokens_per_s"]) <= 0.1 * stats["tokens_per_s"], (shown, stats["tokens_per_s"])
    assert card(page, "speedup vs AR").endswith("×"), "no speedup with no checkbox ticked"
    assert page.locator("#summary .badge-ok").count() == 1, "no lossless verdict"
    notes = page.evaluate("window.__notes")
    starting = next((s for s, txt in notes if "Starting" in txt), None)
    metrics = {"first_step_latency_s": round(first, 3), "first_step_engine_s": round(stats["first_gen_s"], 3), "click_to_handler_start_s": starting and round(starting, 3), "click_to_done_s": round(total, 3),
               "engine_s": round(stats["gen_s"], 3), "server_render_s": round(stats["render_s"], 3),
               "server_render_overhead": round(stats["render_s"] / stats["gen_s"], 3),
               "server_handler_s": round(stats.get("handler_s", 0), 3),
               "end_to_end_overhead": round(total / stats["gen_s"] - 1, 3), "steps": stats["steps"],
               "note_timeline": [[round(s, 2), txt] for s, txt in notes]}
    (ART / "browser-metrics.json").write_text(json.dumps(metrics, indent=2))
    print("browser metrics:", metrics)
    # the goal is < 3 s on an idle 2-vCPU box; here assert only what the UI adds on top of the engine's prefill
    assert first - stats["first_gen_s"] < 5, f"first streamed step took {first:.1f}s"
    page.close()


def test_a_run_on_the_auto_shape_shows_why_speculation_pays_or_loses_here(browser, url):
    page = open_page(browser, url)
    assert "Run a prompt to see this machine" in page.locator("#pay-panel").inner_text()
    set_max_tokens(page, str(RUN_TOKENS))
    page.locator("#run-btn").click()
    page.wait_for_selector("#pay-panel .pay-reason", timeout=300_000)
    panel = page.locator("#pay-panel")
    reason = panel.locator(".pay-reason").inner_text()
    if not reason.startswith("Plain decoding"):  # a speculative run: the speedup once plain decoding has run too
        page.wait_for_function("() => document.querySelector('#summary [data-card=\"speedup vs AR\"] .card-v')"
                               ".innerText.includes('×')", timeout=300_000)
    assert "must emit τ ≥" in reason and " ms " in reason
    assert panel.locator(".pay-shape").inner_text().startswith("auto: ")
    if reason.startswith("Plain decoding"):  # no draft predicted to pay (a 2-core AVX2-only CPU)
        assert "auto: plain decoding" in panel.locator(".pay-shape").inner_text()
        assert panel.locator("tr.pay-own").count() == 0 and panel.locator("tr").count() >= 4  # heads, no model draft
    else:
        assert reason.startswith(("Speculation pays here", "Speculation loses here")), reason
        assert panel.locator("tr.pay-own td").count() == 7  # this run: shape, break-even, τ and speedup both ways
        measured = panel.locator("tr.pay-own td").nth(6).inner_text()
        assert measured.endswith("×") and float(measured[:-1]) > 0
        assert panel.locator("tr").count() >= 4  # this run, the other heads at their best shapes
    assert "target step" in panel.locator(".pay-costs").inner_text()
    panel.screenshot(path=str(ART / "pay-panel.png"))
    page.screenshot(path=str(ART / "run-auto-desktop.png"), full_page=True)
    page.close()


def test_phone_layout_starts_on_the_text_with_text_and_coverage_above_the_fold(browser, url):
    page = open_page(browser, url, width=390, height=844)
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    page.wait_for_selector("body.speclens-text-view", timeout=30_000)
    page.wait_for_selector("#coverage-plot .js-plotly-plot", timeout=60_000)
    page.screenshot(path=str(ART / "example-phone.png"), full_page=True)
    assert overflow <= 2, f"page scrolls sideways on a phone by {overflow}px"
    assert page.locator("#text-panel del.tok-rej").first.is_hidden()
    for sel in ("#text-panel .text-scroll", "#coverage-plot"):
        box = page.locator(sel).bounding_box()
        assert box["y"] + box["height"] <= 844, f"{sel} ends at {box['y'] + box['height']:.0f}px, below the fold"
    page.close()


def test_text_view_switch_hides_and_shows_rejected_drafts(browser, url):
    page = open_page(browser, url)
    assert page.locator("#text-panel del.tok-rej").first.is_visible()
    page.locator("#text-view").get_by_label("the text").check()
    page.wait_for_selector("body.speclens-text-view", timeout=30_000)
    assert page.locator("#text-panel del.tok-rej").first.is_hidden()
    assert "drafts rejected here" in page.locator("#text-panel .tok-bonus[title*='rejected here']").first.get_attribute("title")
    page.locator("#text-view").get_by_label("with drafts").check()
    page.wait_for_selector("#text-panel del.tok-rej", state="visible", timeout=30_000)
    page.close()


def test_first_paint_shows_the_example_and_no_stale_speed(browser, url):
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(url)
    page.wait_for_selector("#text-panel .tok-acc", timeout=60_000)
    nav = page.evaluate("performance.now() / 1000")  # from navigation start to the example's text
    page.wait_for_selector("#coverage-plot .js-plotly-plot", timeout=60_000)
    plot = page.evaluate("performance.now() / 1000")
    print(f"first paint: example text {nav:.2f}s, coverage plot {plot:.2f}s after navigation start")
    (ART / "first-paint.json").write_text(json.dumps({"text_s": round(nav, 3), "plot_s": round(plot, 3)}))
    assert "0.3 tokens/s" not in page.inner_text("body") and card(page, "tokens/s") != "0.3"
    assert card(page, "speedup vs AR").endswith("×") and page.locator("#summary .badge-ok").count() == 1
    page.close()


def test_frspec_with_a_small_vocabulary_shows_vocabulary_misses(browser, url):
    page = open_page(browser, url)
    set_max_tokens(page, "32")
    fr = page.get_by_label("number input for FR-Spec size K")
    fr.fill("256")
    fr.press("Enter")
    page.locator("#shape-radio").get_by_label("the tree set below").check()  # auto may pick no model draft
    page.locator("#run-controls").get_by_label("frspec").check()
    page.locator("#run-btn").click()
    page.wait_for_function("() => !/shipped example/.test(document.querySelector('#source-note').innerText)",
                           timeout=60_000)
    page.wait_for_selector("#source-note :text('your run')", timeout=300_000)
    marks = page.locator("#text-panel .tok-bonus.tok-vmiss")
    assert marks.count() >= 1, "no vocabulary-miss mark on an FR-Spec run with K = 256"
    assert "outside I_t: no draft could propose it" in marks.first.get_attribute("title")
    misses, corrections = (int(x) for x in card(page, "vocab misses").split("/"))
    assert 1 <= misses <= corrections
    page.close()


def test_compare_tab_ar_vs_nanospec_is_lossless(browser, url):
    page = open_page(browser, url)
    set_max_tokens(page, str(RUN_TOKENS))
    page.get_by_role("tab", name="Compare").click()
    page.locator("#compare-methods").get_by_label("frspec").uncheck()
    page.locator("#compare-btn").click()
    page.wait_for_selector("#compare-table .badge-ok", timeout=300_000)
    assert page.locator("#compare-table tr").count() == 3  # header + ar + nanospec
    nanospec = page.locator("#compare-table tr").nth(2).locator("td")
    assert nanospec.nth(4).inner_text().endswith("×"), "no predicted speedup beside the measured one"
    assert page.locator("#compare-texts .compare-col-title").count() == 2
    assert page.locator("#compare-plot .js-plotly-plot .scatterlayer .trace").count() == 2
    page.screenshot(path=str(ART / "compare-desktop.png"), full_page=True)
    page.close()


def test_empty_prompt_shows_a_message_not_a_traceback(browser, url):
    page = open_page(browser, url)
    page.locator("#prompt-box textarea").fill("   ")
    page.locator("#run-btn").click()
    page.wait_for_selector("#source-note .error-box", timeout=60_000)
    assert "prompt is empty" in page.locator("#source-note").inner_text()
    assert "Traceback" not in page.content()
    page.close()


STOP_PROMPT = "Write a very long story about a dragon who learns to cook."  # runs to the budget, no early end


def test_stop_cancels_and_the_next_run_works(browser, url):
    page = open_page(browser, url)
    page.locator("#prompt-box textarea").fill(STOP_PROMPT)
    # plain decoding, one token a step whatever the text: the run is still going when Stop lands (seconds, not a frame)
    page.locator("#method-radio").get_by_label("ar", exact=True).check()
    box = set_max_tokens(page, "512")
    page.locator("#run-btn").click()
    page.wait_for_selector("#source-note :text('Generating')", timeout=120_000)
    page.locator("#stop-btn").click()
    page.wait_for_selector("#summary :text('stopped')", timeout=120_000)  # ends at the next step, trace kept
    assert page.locator("#text-panel .tok").count() > 0
    box.fill(str(RUN_TOKENS))
    box.press("Enter")
    page.wait_for_selector("#source-note :text('your run')", timeout=120_000)
    page.locator("#run-btn").click()  # the pipeline was released: a new run completes
    page.wait_for_function("() => !/your run/.test(document.querySelector('#source-note').innerText)",
                           timeout=60_000)
    page.wait_for_function("() => /your run|⚠/.test(document.querySelector('#source-note').innerText)",
                           timeout=300_000)
    note = page.locator("#source-note").inner_text()
    assert "your run" in note, note
    page.close()


QWEN = ("qwen2.5-coder-1.5b-instruct", "qwen2.5-coder-0.5b-instruct")


def qwen_cached() -> bool:
    from core.models import converted_dir
    return all((converted_dir(m) / "config.json").is_file() for m in QWEN)


@pytest.fixture(scope="module")
def app_process():
    """The app in a process of its own (python app.py on a free loopback port), ended with the tier: the pair's
    ~11 GB load peak then leaves the test process, and the memory goes back when the test ends."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = dict(os.environ, SPECLENS_CALIBRATE="0")
    proc = subprocess.Popen([sys.executable, "app.py", "--port", str(port), "--host", "127.0.0.1"], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_server(f"http://127.0.0.1:{port}/", proc)
        yield f"http://127.0.0.1:{port}/"
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def wait_for_server(url: str, proc, seconds: float = 180):
    import urllib.request
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            urllib.request.urlopen(url, timeout=5).close()
            return
        except OSError:
            time.sleep(0.5)
    raise RuntimeError(f"the app process did not serve {url} (exit status {proc.poll()})")


@pytest.mark.slow
@pytest.mark.skipif(not qwen_cached(), reason="the Qwen pair is not converted in the cache (first use: ~6 min, 1.6 GB)")
@pytest.mark.skipif(os.environ.get("SPECLENS_PAIR_TESTS") != "1",
                    reason="the Qwen pair tier is opt-in (its load peaks at ~11 GB, in an app process of its own): "
                           "SPECLENS_PAIR_TESTS=1 runs it")
def test_the_qwen_pair_shows_its_example_then_runs_losslessly(browser, app_process):
    page = open_page(browser, app_process)
    page.locator("#model-dd input").click()
    page.get_by_role("option", name="Qwen2.5-Coder-1.5B", exact=False).click()
    page.wait_for_selector(f"#source-note :text('{QWEN[0]}')", timeout=60_000)  # the pair's shipped example
    assert page.locator("#summary .badge-ok").count() == 1
    set_max_tokens(page, str(RUN_TOKENS))
    page.locator("#run-btn").click()
    page.wait_for_selector("#source-note :text('your run')", timeout=600_000)  # loads the pair on first use
    assert QWEN[0] in page.locator("#source-note").inner_text()
    assert page.locator("#summary .badge-ok").count() == 1, "no lossless verdict"
    page.close()
