"""The Maps tab in headless Chromium: upload a map file, get the named findings and the coverage plot.
Screenshot: docs/screenshots/maps.png. Needs /usr/bin/chromium and the playwright pip package (as test_browser.py)."""
import importlib.util
import os
from pathlib import Path

import pytest

from conftest import served_app

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--headless", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT / "tests" / "fixtures" / "maps"
SHOT = ROOT / "docs" / "screenshots" / "maps.png"

pytestmark = [
    pytest.mark.browser,
    pytest.mark.model,
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"{CHROMIUM} missing: apt-get install -y chromium"),
    pytest.mark.skipif(importlib.util.find_spec("playwright") is None, reason="pip package playwright missing"),
]


@pytest.fixture(scope="module")
def page():
    from playwright.sync_api import sync_playwright
    with served_app() as url, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(url)
        page.get_by_role("tab", name="Maps").click()
        page.wait_for_selector("#maps-upload", timeout=60_000)
        yield page
        browser.close()


def upload(page, name):
    page.locator("#maps-upload input[type=file]").set_input_files(str(FIX / name))


def test_an_uploaded_map_shows_its_findings_and_a_coverage_plot(page):
    upload(page, "d2t_all_zeros.safetensors")  # serves ids 0..255: coverage well below FR-Spec's 256 ids
    page.wait_for_selector('#maps-report [data-code="d2t_all_zeros"]', timeout=120_000)
    page.wait_for_selector("#maps-plot .js-plotly-plot .barlayer .trace", timeout=60_000)
    assert page.locator("#maps-plot .js-plotly-plot .barlayer .trace").count() == 3
    assert page.locator('#maps-report [data-status="error"]').count() == 1
    SHOT.parent.mkdir(exist_ok=True)
    page.screenshot(path=str(SHOT), full_page=True)


def test_an_uploaded_pickle_with_code_is_refused_on_the_page(page):
    page.locator("#maps-upload").get_by_label("Clear").click()
    upload(page, "unsafe_pickle.pt")
    page.wait_for_selector('#maps-report [data-code="unsafe_pickle"]', timeout=60_000)
    assert "posix.system" in page.locator("#maps-report").inner_text()
