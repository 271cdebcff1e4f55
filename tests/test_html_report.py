"""HTML reports share one plotly.js written beside them, and still draw offline in a real browser."""
import re
import shutil

import pytest
import torch

import analyses
import models
import tasks
from interp.export import plotly_bundle, write_result


@pytest.fixture(scope="module")
def result():
    torch.manual_seed(0)
    task = tasks.make("bijection", V=6, L=5)
    model = models.build("transformer", task, dict(d_model=16, n_layers=2, n_heads=2), seed=0).eval()
    return analyses.run("calibration", model, n=32)


def test_reports_of_a_folder_share_one_bundle_and_are_small(result, tmp_path):
    name, script = plotly_bundle()
    first = write_result(result, tmp_path, ("html", "json"))
    assert [p.name for p in first] == [name, "calibration.html", "calibration.json"]  # the bundle before the page
    assert (tmp_path / name).read_bytes() == script and len(script) > 4_000_000
    page = (tmp_path / "calibration.html").read_text()
    assert len(page.encode()) < 200_000 and script.decode()[:2000] not in page  # no plotly.js inline
    assert re.findall(r"<script src='([^']+)'", page) == [name]  # loaded from beside the page, no network
    mtime = (tmp_path / name).stat().st_mtime_ns
    again = write_result(result, tmp_path, ("html",))
    assert [p.name for p in again] == ["calibration.html"] and (tmp_path / name).stat().st_mtime_ns == mtime
    (tmp_path / name).write_bytes(script[:1000])  # a cut-off copy is replaced
    assert name in [p.name for p in write_result(result, tmp_path, ("html",))]
    assert (tmp_path / name).read_bytes() == script


def test_a_folder_without_a_page_gets_no_bundle(result, tmp_path):
    assert [p.name for p in write_result(result, tmp_path, ("json",))] == ["calibration.json"]


@pytest.mark.slow
def test_a_report_draws_every_figure_offline_in_chromium(result, tmp_path):
    """The page opened from disk in headless Chromium with the network off: plotly.js comes from the
    bundle beside it and every figure is drawn."""
    chromedriver, chromium = shutil.which("chromedriver"), shutil.which("chromium")
    if not (chromedriver and chromium):
        pytest.fail("this test needs Debian's chromium and chromium-driver (apt-get install chromium-driver)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.support.ui import WebDriverWait

    write_result(result, tmp_path / "moved" / "run", ("html",))
    folder = tmp_path / "elsewhere"
    shutil.move(tmp_path / "moved" / "run", folder)  # the folder moved as a whole still works
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-background-networking", "--proxy-server=127.0.0.1:9", "--window-size=1200,900"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(chromedriver), options=options)
    try:
        driver.get((folder / "calibration.html").as_uri())
        drawn = "return document.querySelectorAll('.js-plotly-plot .main-svg').length"
        WebDriverWait(driver, 30).until(lambda d: d.execute_script("return typeof Plotly") == "object"
                                        and d.execute_script(drawn) >= len(result.figures))
        plots = driver.execute_script("return Array.from(document.querySelectorAll('.js-plotly-plot'), "
                                      "d => [d.id, d.data.length])")
        assert [p[0] for p in plots] == [f"fig-{name}" for name in result.figures] and all(n for _, n in plots)
    finally:
        driver.quit()
