"""HTML reports share one plotly.js (one per output root, not one per model), show their definitions' markup
as code, keep the toolbar off the titles, and still draw offline in a real browser."""
import re
import shutil
from dataclasses import replace

import plotly.graph_objects as go

import pytest
import torch

import analyses
import models
import tasks
from analyses import style
from interp import results
from interp.export import markup_html, page_html, plotly_bundle, write_result


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


def test_the_models_of_one_output_root_share_one_bundle_at_its_top(result, tmp_path):
    """``interp run`` writes figures/MODEL/NAME.html: plotly.js goes once into figures/, not into every model's
    folder (4.8 MB each), and each page loads it from there by a relative link."""
    name, script = plotly_bundle()
    for model in ("model-a", "model-b"):
        folder = results.output_folder(tmp_path, model, f"/runs/{model}")
        written = results.write(result, folder, ("html", "json"), {"run": model}, source=f"/runs/{model}")
        assert not (folder / name).exists()
        page = (folder / "calibration.html").read_text()
        assert re.findall(r"<script src='([^']+)'", page) == [f"../{name}"]
    assert (tmp_path / name).read_bytes() == script
    assert tmp_path / name not in written  # the second model's write found the copy there and kept it
    assert sorted(p.name for p in tmp_path.rglob(name)) == [name]


def test_definitions_and_descriptions_show_their_markup_as_code():
    """Every analysis's definition (the page's first paragraph) and descriptions: reST ``x`` and Markdown `x`
    become <code>, never raw backticks on the page."""
    import analyses

    assert markup_html("as in ``calibration`` with `n` <= 3") == \
        "as in <code>calibration</code> with <code>n</code> &lt;= 3"
    texts = [t for a in analyses.REGISTRY.values() for t in (a.definition, a.language_definition) if t]
    assert any("``" in t for t in texts)  # the check has something to check
    for text in texts:
        page = page_html("t", text, {}, {}, descriptions={"key": text})
        assert "`" not in re.sub(r"<pre>.*?</pre>", "", page), text[:80]


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

    long_title = go.Figure(go.Scatter(x=[0, 1], y=[0, 1]), layout=dict(
        title="a title long enough to run across the whole width of the figure, under where plotly puts its toolbar "
              "of buttons by default", xaxis_title="x", yaxis_title="y"))
    result = replace(result, figures=dict(result.figures, long=style.apply(long_title)))
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
        # the toolbar (shown while the pointer is over a figure) sits in its own strip, clear of every title
        from selenium.webdriver.common.action_chains import ActionChains

        for name in result.figures:
            plot = driver.find_element("id", f"fig-{name}")
            ActionChains(driver).move_to_element(plot).perform()
            boxes = driver.execute_script(
                "const d = document.getElementById(arguments[0]);"
                "const r = e => { const b = e.getBoundingClientRect(); return [b.left, b.top, b.right, b.bottom]; };"
                "return [r(d.querySelector('.modebar-container .modebar')), r(d.querySelector('.gtitle'))];",
                f"fig-{name}")
            (left, top, right, bottom), (t_left, t_top, t_right, t_bottom) = boxes
            assert right > left and bottom > top, f"{name}: no toolbar drawn"
            assert bottom <= t_top or right <= t_left or left >= t_right, f"{name}: the toolbar covers the title"
    finally:
        driver.quit()


def test_a_wide_figure_is_drawn_at_a_readable_width_as_a_png():
    """A PNG is shown in a column of ~760 px (the guide, a README): a 1,248 px patching map drawn at full width
    had 7 px labels there. A wider figure's PNG is drawn PNG_WIDTH wide (at scale 2), its title wrapped anew;
    the figure itself and its PDF keep their width."""
    import struct

    from interp.export import PNG_WIDTH, figure_image

    wide = style.apply(go.Figure(go.Heatmap(z=[list(range(48))] * 6), layout=dict(
        title="a patching map over every position of a long sequence, with a title that fills its wide page "
              "from one side to the other", xaxis_title="position", yaxis_title="site", width=1248, height=500)))
    png = figure_image(wide, "png")
    width, height = struct.unpack(">II", png[16:24])
    assert width == 2 * PNG_WIDTH and wide.layout.width == 1248
    small = style.apply(go.Figure(go.Bar(x=["a"], y=[1]), layout=dict(title="small", width=600)))
    assert struct.unpack(">II", figure_image(small, "png")[16:24])[0] == 1200  # a narrow one as it is
