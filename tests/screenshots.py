"""Run as `PYTHONPATH=. python tests/screenshots.py`. Retakes docs/screenshots/{desktop,phone}.png: the app on the
default model and prompt after one Run (the default settings), in headless Chromium (see tests/test_browser.py), and
pay-panel.png, the "Will it pay here?" panel of the desktop run (this machine's calibration, where one is cached)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from conftest import served_app  # noqa: E402
from test_browser import ARGS, CHROMIUM  # noqa: E402

OUT = Path(__file__).resolve().parent.parent / "docs" / "screenshots"
VIEWS = {"desktop": (1280, 1000), "phone": (390, 844)}


def run_and_shoot(browser, url: str, name: str) -> str:
    width, height = VIEWS[name]
    page = browser.new_page(viewport={"width": width, "height": height})
    page.goto(url)
    page.wait_for_selector("#text-panel .tok-acc", timeout=60_000)
    page.locator("#run-btn").click()
    page.wait_for_selector("#source-note :text('your run')", timeout=300_000)
    page.wait_for_selector("#coverage-plot .js-plotly-plot", timeout=60_000)
    page.wait_for_function("() => document.querySelector('#summary [data-card=\"speedup vs AR\"] .card-v')"
                           ".innerText.includes('×')", timeout=300_000)
    if name == "desktop":
        page.locator("#pay-panel").screenshot(path=str(OUT / "pay-panel.png"))
    page.evaluate("window.scrollTo(0, 0)")
    path = OUT / f"{name}.png"
    page.screenshot(path=str(path))
    note = page.locator("#summary").inner_text().replace("\n", " ")[:160]
    page.close()
    return f"{path}: {note}"


def main() -> None:
    from playwright.sync_api import sync_playwright

    from ui.models import DEFAULT_KEY, load_pipeline
    load_pipeline(DEFAULT_KEY)
    with served_app() as url, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        for name in VIEWS:
            print(run_and_shoot(browser, url, name))
        browser.close()


if __name__ == "__main__":
    main()
