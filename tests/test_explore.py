"""The explorer (`interp explore`): its views, its errors, and an end-to-end run in headless Chromium."""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import plotly.graph_objects as go
import pytest
import torch

import tasks
from interp import checkpoint
from interp.explore import Explorer, build_app, parse_tokens
from interp.explore.ablation import ablation_map_view
from interp.explore.attention import attention_view, heads_view, hypothesis_marks, patterns
from interp.explore.computed import held_out_calibration, held_out_sums
from interp.explore.geometry import geometry_view
from interp.explore.lens import lens_view
from interp.explore.numbers import equivalent_code, numbers as numbers_of
from interp.explore.posterior import posterior_views
from interp.catalog import locate, shipped

from tests.cli import run_cli
from tests.tiny import slow_suite

REPO = Path(__file__).resolve().parent.parent
SHIPPED = locate("bijection-transformer-cpu")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- typed sequences: the task reads the exact posterior back from the tokens ----------------------
@pytest.mark.parametrize("name, settings", [
    ("bijection", dict(V=8, L=7)), ("bijection", dict(V=6, L=9, replacement=True)),
    ("bijection", dict(V=6, L=5, paired=True)), ("hmm", dict(S=3, O=4, K=6)),
    ("recall", dict(N=4, n_keys=8, n_values=6, queries=5, p_unbound=0.3))])
def test_batch_from_tokens_matches_sampling(name, settings):
    task = tasks.make(name, **settings)
    batch = task.sample(100, generator=torch.Generator().manual_seed(3))
    typed = task.batch_from_tokens(batch.tokens)
    assert torch.equal(typed.query_mask, batch.query_mask)
    assert torch.allclose(typed.posterior, batch.posterior)
    assert torch.allclose(typed.bayes_entropy, batch.bayes_entropy)


def test_typed_prefix_and_inconsistent_bijection():
    task = tasks.make("bijection", V=4, L=4)
    k, v = (lambda i: i), (lambda i: 4 + i)
    # k0=v1, k1=v2, then k0 again: a delta on v1; then a new key: uniform over the 2 unrevealed values
    typed = task.batch_from_tokens(torch.tensor([k(0), v(1), k(1), v(2), k(0), v(1), k(3)]))
    assert typed.posterior[0, 4].tolist() == [0, 1, 0, 0]
    assert typed.posterior[0, 6].tolist() == [0.5, 0, 0, 0.5]
    with pytest.raises(tasks.ConfigError, match="not consistent"):
        task.batch_from_tokens(torch.tensor([k(0), v(1), k(1), v(1), k(2)]))
    with pytest.raises(tasks.ConfigError, match="even positions"):
        task.batch_from_tokens(torch.tensor([v(0), k(1)]))


def test_parse_tokens_names_and_ids():
    task = tasks.make("bijection", V=4, L=4)
    assert parse_tokens(task, "k0 v1, 2  5") == [0, 5, 2, 5]
    with pytest.raises(Exception, match="unknown token 'x9'"):
        parse_tokens(task, "k0 x9")


# --- views, on a run folder with several checkpoints ----------------------------------------------
@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """Two checkpoints of one small model: its init, and a copy with its first block's attention
    output weights scaled, so the views must differ between steps."""
    import models

    task = tasks.make("bijection", V=6, L=5)
    model = models.build("transformer", task, config=dict(d_model=32, n_layers=2, n_heads=2), seed=0).eval()
    folder = tmp_path_factory.mktemp("run")
    checkpoint.save(folder / "checkpoints" / checkpoint.checkpoint_name(0), model, step=0, seed=0)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(3.0)
    checkpoint.save(folder / "checkpoints" / checkpoint.checkpoint_name(100), model, step=100, seed=0)
    return folder


def test_views_follow_step_sequence_and_ablation(run_dir):
    explorer = Explorer(run_dir, n_calibration=20, n_geometry=20)
    assert explorer.steps == [0, 100]
    tokens = explorer.sample(0)

    def posterior(index, choices=(), seed=0):
        return posterior_views(explorer, index, tokens, seed, list(choices))["posterior"].data[1].z

    assert posterior(0) != posterior(1)  # the step slider replays another checkpoint
    assert posterior(1) != posterior(1, ["H0.1"]) != posterior(1, ["B0"])
    # mean ablation: the head's output replaced by its mean over the held-out batch, neither intact nor zero
    assert posterior(1, ["M0.1"]) not in (posterior(1), posterior(1, ["H0.1"]))
    from interp.explore import chosen_ablations
    assert chosen_ablations(["H0.1"], ["B0"], "mean") == ["M0.1", "B0"]
    assert chosen_ablations(["H0.1"], [], "zero") == ["H0.1"]
    assert posterior(1, seed=None) == posterior(1)  # typed tokens get the same exact posterior back
    views = posterior_views(explorer, 1, tokens, 0, [])
    bayes = views["posterior"].data[0].z
    assert all(abs(sum(row) - 1) < 1e-5 for row in bayes)
    # the logit lens: one row per layer, its last row the KL of the model's own output
    lens = lens_view(explorer, 1, tokens, 0, []).data[0].z
    assert len(lens) == explorer.model(1).cfg.n_layers and len(lens[-1]) == len(bayes)
    model = torch.tensor(views["posterior"].data[1].z)
    kl = (torch.tensor(bayes) * (torch.tensor(bayes).clamp_min(1e-30).log2() - model.clamp_min(1e-30).log2())).where(
        torch.tensor(bayes) > 0, torch.tensor(0.0)).sum(-1)
    assert torch.allclose(torch.tensor(lens[-1]), kl, atol=1e-4)

    attention = attention_view(explorer, 1, tokens, 0, [], layer=1, head=1)
    assert "layer 1, head 1" in attention.layout.title.text
    eliminated = hypothesis_marks(explorer, explorer.batch(tokens, 0), "eliminated")
    # bijection: at the t-th key the t-1 values revealed so far are eliminated, and nothing else
    assert len(eliminated) == sum(range(5)) and all(tokens[k] >= 6 and k < q for q, k in eliminated)
    assert hypothesis_marks(explorer, explorer.batch(tokens, 0), "feasible") == []
    for stream in ("residual", "attention_out"):
        assert "PCA" in geometry_view(explorer, 0, ["B1"], stream).layout.title.text
    build_app(explorer)  # the layout and callbacks build for a multi-checkpoint run


def test_every_control_the_page_reads_has_one_rule_from_the_table_of_views(run_dir):
    """The page, its routes and their request rules come from one table: every value a request sends is checked by
    the rule of the one view that owns its control (a control without a rule would reach a view unchecked)."""
    from interp.explore.app import VIEWS
    from interp.explore.page import rules
    from tests.explorer_requests import controls_read

    explorer = Explorer(run_dir, n_calibration=20, n_geometry=20)
    assert controls_read(build_app(explorer)) == set(rules(explorer, VIEWS))


def test_a_part_with_no_place_on_the_page_or_a_control_with_two_rules_is_refused():
    from dash import html

    from interp.explore.page import View, layout, rules

    def skeleton(state, at):
        return html.Div(at("main"))

    views = (View("a", {"main": lambda state, at: html.Div(id="a")}, rules=lambda state: {("x", "value"): None}),
             View("b", {"main": lambda state, at: [html.Div(id="b"), *at("inner")],
                        "inner": lambda state, at: html.Div(id="c")}))
    assert [c.id for c in layout(None, views, skeleton).children] == ["a", "b", "c"]  # the table's order, nested
    with pytest.raises(ValueError, match="the page has no place side"):
        layout(None, views + (View("d", {"side": lambda state, at: html.Div()}),), skeleton)
    with pytest.raises(ValueError, match=r"view 'e' gives a rule for \[\('x', 'value'\)\]"):
        rules(None, views + (View("e", rules=lambda state: {("x", "value"): None}),))


def test_model_without_attention_says_so(run_dir, monkeypatch):
    explorer = Explorer(run_dir, n_calibration=20, n_geometry=20)
    monkeypatch.setattr(explorer.model(1), "has_attention", lambda: False)
    fig = attention_view(explorer, 1, explorer.sample(0), 0, [], layer=0, head=0)
    assert "has no attention" in fig.layout.annotations[0].text
    assert explorer.layout_info(1)["n_heads"] == 0
    posterior_views(explorer, 1, explorer.sample(0), 0, ["B0"])  # everything else still works


# --- command-line errors ---------------------------------------------------------------------------
def test_port_in_use_is_one_line(capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = run_cli(capsys, "explore", "--ckpt", SHIPPED, "--port", port)
    assert out.code == 1
    assert out.err.strip() == f"interp: error: port {port} on 127.0.0.1 is already in use; pick another with --port"


def test_bad_checkpoint_is_one_line(capsys, tmp_path):
    bad = tmp_path / "model.safetensors"
    bad.write_bytes(b"not a checkpoint")
    for ckpt in (bad, tmp_path / "missing"):
        out = run_cli(capsys, "explore", "--ckpt", ckpt, "--port", free_port())
        assert out.code == 1 and out.err.count("\n") == 1 and out.err.startswith("interp: error: ")
        assert "Traceback" not in out.err


# --- end to end, in a real headless Chromium --------------------------------------------------------
CHROMEDRIVER = shutil.which("chromedriver")
CHROMIUM = shutil.which("chromium")
SCREEN = (1280, 800)  # a laptop's window: the README's picture, and the tests of what fits on a screen


@pytest.fixture
def server():
    port = free_port()
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.Popen([sys.executable, "-m", "interp", "explore", "--ckpt", str(SHIPPED), "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=REPO)
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + 90
    while True:
        try:
            urllib.request.urlopen(url, timeout=1).close()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail(f"explorer did not start: {proc.stdout.read().decode()[-2000:]}")
            time.sleep(0.3)
    yield url
    proc.terminate()
    proc.wait(10)


def chromium_driver():
    if not (CHROMEDRIVER and CHROMIUM):
        pytest.fail("the end-to-end test needs Debian's chromium and chromium-driver (apt-get install chromium-driver)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-background-networking", "--window-size=1500,1300"):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)  # no driver download


@pytest.fixture
def browser():
    driver = chromium_driver()
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def shared_browser():
    driver = chromium_driver()
    yield driver
    driver.quit()


def figure(driver, graph: str):
    """The plotly figure a Dash graph currently shows ({data, title, notes}: notes joins its annotations'
    texts, where a message figure such as the "computing…" placeholder says what it says), or None before it
    is drawn."""
    return driver.execute_script(
        "const el = document.querySelector(arguments[0] + ' .js-plotly-plot');"
        "return el && el.data && el.layout ? {data: el.data, title: (el.layout.title || {}).text,"
        " notes: (el.layout.annotations || []).map(a => a.text || '').join(' ')} : null;", f"#{graph}")


def computed(driver, graph: str) -> bool:
    """Whether a graph shows its own figure, not the placeholder it holds until its first one arrives."""
    shown = figure(driver, graph)
    return shown is not None and shown["notes"] != "computing…"


@pytest.mark.slow  # trains hundreds of steps or starts processes: minutes on a busy 2-core machine
def test_end_to_end_in_chromium(server, browser, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(browser, 60, poll_frequency=0.2)
    browser.get(server)
    for graph in ("posterior", "entropy", "gap", "calibration", "lens", "attention", "geometry"):
        wait.until(lambda d: figure(d, graph) is not None and figure(d, graph)["data"], message=f"{graph} drawn")
    assert "layer 0, head 0" in figure(browser, "attention")["title"]

    browser.find_element(By.CSS_SELECTOR, "#layer input[value='1']").click()
    browser.find_element(By.CSS_SELECTOR, "#head input[value='2']").click()
    wait.until(lambda d: "layer 1, head 2" in (figure(d, "attention")["title"] or ""), message="layer/head change")

    bayes, before = (trace["z"] for trace in figure(browser, "posterior")["data"])
    summary = browser.find_element(By.ID, "calibration-summary").text
    browser.find_element(By.CSS_SELECTOR, "#ablate-heads input[value='H0.2']").click()  # the frame head
    wait.until(lambda d: figure(d, "posterior")["data"][1]["z"] != before, message="posterior follows ablation")
    wait.until(lambda d: "intact model" in d.find_element(By.ID, "calibration-summary").text)
    assert browser.find_element(By.ID, "calibration-summary").text != summary
    assert "sequences" in summary and "queries" in summary and "(95% " in summary  # numbers with their intervals
    assert "MAE ablated / intact" in browser.find_element(By.ID, "calibration-summary").text
    assert figure(browser, "posterior")["data"][0]["z"] == bayes  # ablation changes the model, not Bayes

    # the screenshot is kept: in $EXPLORE_ARTIFACTS if set (CI sets it), else pytest's tmp folder; with
    # UPDATE_README_FIGURES=1 it also replaces the README's picture (a plain test run leaves the tree alone)
    shot = Path(os.environ.get("EXPLORE_ARTIFACTS", tmp_path)) / "explorer.png"
    shot.parent.mkdir(parents=True, exist_ok=True)
    browser.set_window_size(*SCREEN)  # as a laptop shows it
    wait.until(lambda d: d.execute_script("return !document.querySelector('[data-dash-is-loading]')"))
    time.sleep(1)  # the graphs redrawn at the new width
    browser.execute_script("window.scrollTo(0, 0)")  # the page from its top (the clicks above scrolled it)
    assert browser.save_screenshot(str(shot)) and shot.stat().st_size > 10_000
    if os.environ.get("UPDATE_README_FIGURES") == "1":
        shutil.copyfile(shot, REPO / "figures" / "readme" / "explorer.png")

    # a typed sequence: k0 bound to v3, then k0 again (a delta on v3) and a new key k1
    text = browser.find_element(By.ID, "tokens-text")
    text.send_keys(Keys.CONTROL, "a")
    text.send_keys("k0 v3 k0 v3 k1")
    browser.find_element(By.ID, "apply").click()
    wait.until(lambda d: len(figure(d, "posterior")["data"][0]["y"]) == 3, message="typed sequence shown")
    bayes = figure(browser, "posterior")["data"][0]["z"]
    assert bayes[1][3] == 1 and bayes[2][3] == 0 and abs(bayes[2][0] - 1 / 19) < 1e-6


def small_run(tmp_path, task):
    import models
    from interp import checkpoint

    model = models.build("transformer", task, {"d_model": 16, "n_layers": 2, "n_heads": 2}, seed=0).eval()
    checkpoint.save(tmp_path / "checkpoints" / checkpoint.checkpoint_name(0), model, step=0, seed=0)
    return Explorer(tmp_path, n_calibration=8, n_geometry=8)


def test_the_latent_truth_of_an_hmm_sequence_is_drawn(tmp_path):
    import tasks

    explorer = small_run(tmp_path, tasks.make("hmm", S=3, O=2, K=5))
    tokens = explorer.sample(0)
    fig = posterior_views(explorer, 0, tokens, 0, [])["latent"]
    heatmaps = [t for t in fig.data if t.type == "heatmap"]
    batch = explorer.batch(tokens, 0)
    assert torch.allclose(torch.tensor(heatmaps[0].z), batch.hypothesis["T"][0].float())  # the transition table
    assert torch.allclose(torch.tensor(heatmaps[1].z), batch.hypothesis["E"][0].float())  # the emission table
    true = next(t for t in fig.data if t.name == "true")
    assert list(true.y) == [f"s{s}" for s in batch.hypothesis["states"][0].tolist()]
    mapped = next(t for t in fig.data if t.name == "Bayes MAP")
    rows = batch.query_mask[0].nonzero().flatten()
    assert list(mapped.y) == [f"s{s}" for s in batch.posterior[0, rows].argmax(-1).tolist()]
    typed = posterior_views(explorer, 0, tokens, None, [])["latent"]  # typed: tables known, path not
    assert [t.type for t in typed.data] == ["heatmap", "heatmap"]


def test_a_continuous_task_shows_its_predictive_beside_bayes(tmp_path):
    import tasks

    explorer = small_run(tmp_path, tasks.make("regression", d=2, n=5))
    tokens = explorer.sample(0)
    fig = posterior_views(explorer, 0, tokens, 0, [])["latent"]
    bayes, model = fig.data
    batch = explorer.batch(tokens, 0)
    rows = batch.query_mask[0].nonzero().flatten()
    assert torch.allclose(torch.tensor(bayes.y), batch.posterior_mean[0, rows].float())
    assert torch.allclose(torch.tensor(bayes.error_y.array), batch.posterior_var[0, rows].float().sqrt())
    assert model.name.startswith("model")


def test_the_download_holds_this_view_s_numbers_and_its_python_reproduces_them(run_dir):
    import json

    explorer = Explorer(run_dir, n_calibration=20, n_geometry=20)
    tokens = explorer.sample(4)
    for seed, choices in ((4, ["M0.1", "B1"]), (None, [])):  # sampled and ablated; typed and intact
        numbers = numbers_of(explorer, 1, tokens, seed, choices)
        assert json.loads(json.dumps(numbers, allow_nan=False)) == numbers
        assert numbers["ablations"] == sorted(choices) and numbers["step"] == 100 and numbers["tokens"] == tokens
        views = posterior_views(explorer, 1, tokens, seed, choices)
        # compared as arrays: plotly 7 keeps a heatmap's z as nested tuples, plotly 6 as lists
        np.testing.assert_allclose(np.asarray(numbers["model_distribution"], dtype=float),
                                   np.asarray(views["posterior"].data[1].z, dtype=float), atol=1e-6)
        assert ("held_out_calibration_intact" in numbers) == bool(choices)
        namespace = {}
        exec(numbers["python"], namespace)  # the shown Python, run as it stands, gives the same curves
        assert namespace["numbers"]["per_position"]["model_entropy_bits"] == pytest.approx(
            numbers["per_position"]["model_entropy_bits"], abs=1e-6)
        assert f"--ckpt {numbers['checkpoint']}" in numbers["python"]


def test_the_calibration_summary_gives_each_number_its_interval_and_counts(run_dir):
    from analyses.calibration import ratio_interval

    explorer = Explorer(run_dir, n_calibration=20, n_geometry=20)
    tokens = explorer.sample(0)
    intact, ablated = (held_out_calibration(explorer, 1, c) for c in ([], ["H0.1"]))
    text = posterior_views(explorer, 1, tokens, 0, [])["summary"]
    low, high = intact["intervals"]["entropy_mae_bits"]  # calibration's own interval, as the page shows it
    assert "(20 sequences, 100 queries; 95% bootstrap intervals over the sequences)" in text
    assert f"entropy MAE {intact['entropy_mae_bits']:.4f} bits (95% {low:.4f}-{high:.4f})" in text
    assert "KL " in text and text.count("95% ") == 3
    ratio = ratio_interval(held_out_sums(explorer, 1, ["H0.1"]), held_out_sums(explorer, 1, []))
    text = posterior_views(explorer, 1, tokens, 0, ["H0.1"])["summary"]
    assert f"MAE ablated / intact {ablated['entropy_mae_bits'] / intact['entropy_mae_bits']:.3f}x " \
           f"(95% {ratio[0]:.3f}-{ratio[1]:.3f}) (paired" in text and "intact model: entropy MAE" in text
    assert ratio_interval(held_out_sums(explorer, 1, []), held_out_sums(explorer, 1, [])) == [1.0, 1.0]  # itself
    assert numbers_of(explorer, 1, tokens, 0, ["H0.1"])["held_out_mae_ratio_interval"] == ratio


def test_the_patching_map_of_the_one_sequence_shown_says_it_has_no_interval(run_dir):
    from interp.explore.pairs import WindTunnelPairs
    from interp.explore.patching import PatchingView, map_figure

    explorer = Explorer(run_dir, n_calibration=20, n_geometry=20)
    source = WindTunnelPairs(explorer)
    sequence = {"tokens": explorer.sample(0), "seed": 0}
    result = PatchingView(source).computed(source.kinds[0], None, ((), (), "zero"), 1, sequence)
    title = re.sub(r"</?sup>|<br>", " ", map_figure(*result[:5], source.subject).layout.title.text)  # as wrapped
    assert "one input pair, computed exactly: no sample, so no interval" in " ".join(title.split())
    assert "95%" not in title


def test_ablated_views_draw_the_intact_model_beside_them(run_dir):
    explorer = Explorer(run_dir, n_calibration=20, n_geometry=20)
    tokens = explorer.sample(0)
    intact = posterior_views(explorer, 1, tokens, 0, [])
    ablated = posterior_views(explorer, 1, tokens, 0, ["H0.1"])
    for view in ("entropy", "calibration"):
        assert [t.name for t in intact[view].data] == ["Bayes", "model"]
        names = [t.name for t in ablated[view].data]
        assert names == ["Bayes", "intact model", "model"] and "(ablated)" in ablated[view].layout.title.text
        assert ablated[view].data[1].y == intact[view].data[1].y  # the intact points are the intact model's


def test_the_hmm_geometry_can_be_coloured_by_the_true_state(tmp_path):
    explorer = small_run(tmp_path, tasks.make("hmm", S=3, O=2, K=5))
    fig = geometry_view(explorer, 0, [], "residual", "latent")
    assert "true states" in fig.layout.title.text.replace("<br>", " ")
    assert {t.name for t in fig.data} <= {"state 0", "state 1", "state 2"}
    assert "Bayes entropy" in geometry_view(explorer, 0, [], "residual", "entropy").layout.title.text.replace("<br>", " ")


def test_a_process_s_belief_by_layer_is_drawn_through_the_page_s_request(tmp_path):
    """The geometry's stream "belief" (offered for a task with a belief over hidden states) passes the request
    check and draws belief-state's simplex (the check once refused it with a 400)."""
    import models
    from tests.explorer_requests import answer

    task = tasks.make("rrxor", L=6)
    model = models.build("lstm", task, {"d_model": 16, "n_layers": 2}, seed=0).eval()
    checkpoint.save(tmp_path / "checkpoints" / checkpoint.checkpoint_name(0), model, step=0, seed=0)
    app = build_app(Explorer(tmp_path, n_calibration=8, n_geometry=16))
    shown = answer(app.server.test_client(), app, "geometry", {
        "step.value": 0, "ablate-heads.value": [], "ablate-blocks.value": [], "ablate-mode.value": "zero",
        "stream.value": "belief", "colour.value": "entropy"})
    notes = [a["text"] for a in shown["geometry"]["figure"]["layout"]["annotations"]]
    assert notes[0] == "Bayes belief" and notes[1].startswith("L0: R² ")


GRAPHS = ("posterior", "entropy", "gap", "calibration", "lens", "latent", "attention", "geometry")


@pytest.mark.slow
@pytest.mark.parametrize("name", slow_suite(shipped()))
def test_every_shipped_model_in_chromium(name, shared_browser):
    """Each architecture on each task, in the real browser: every view draws, a new sequence (typed where the
    task can read a posterior back from tokens, sampled by seed where it cannot) reaches every view, and
    no view shows an error."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait
    from werkzeug.serving import make_server
    import threading

    explorer = Explorer(shipped()[name])
    server = make_server("127.0.0.1", free_port(), build_app(explorer).server, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        browser, wait = shared_browser, WebDriverWait(shared_browser, 120, poll_frequency=0.25)
        browser.get(f"http://127.0.0.1:{server.server_port}/")
        for graph in GRAPHS:
            wait.until(lambda d: computed(d, graph), message=f"{name}: {graph} drawn")
        before = figure(browser, "entropy")["data"]
        if explorer.task.continuous:  # real-valued inputs cannot be typed: a new sequence by seed
            seed = browser.find_element(By.ID, "seed")
            seed.send_keys(Keys.CONTROL, "a")
            seed.send_keys("5")
            browser.find_element(By.ID, "sample").click()
            shown = explorer.batch(explorer.sample(5), 5)
        else:
            tokens = explorer.sample(5)
            text = browser.find_element(By.ID, "tokens-text")
            text.send_keys(Keys.CONTROL, "a")
            text.send_keys(" ".join(explorer.task.token_names(torch.tensor(tokens))))
            browser.find_element(By.ID, "apply").click()
            shown = explorer.batch(tokens, None)
        rows = shown.query_mask[0]
        bayes = shown.bayes_entropy[0][rows].tolist()
        wait.until(lambda d: figure(d, "entropy")["data"] != before, message=f"{name}: new sequence shown")
        np.testing.assert_allclose(np.asarray(figure(browser, "entropy")["data"][0]["y"], dtype=float),
                                   bayes, atol=1e-5)
        assert browser.find_element(By.ID, "message").text == ""
        wait.until(lambda d: d.execute_script("return !document.querySelector('[data-dash-is-loading]')"))
        for graph in GRAPHS:  # a slow view (Mamba's effective attention on 329 tokens) may still be computing
            wait.until(lambda d: computed(d, graph), message=f"{name}: {graph} computed for the new sequence")
        arch = explorer.layout_info(0)["arch"]
        said = dict(attention="has no attention", posterior="a continuous task", lens="a continuous task",
                    latent="a typed sequence keeps no latent truth")
        for graph in GRAPHS:  # every view draws data, except those that say why they cannot (and only why)
            texts = figure(browser, graph)["notes"]
            expected = (graph == "attention" and arch not in ("transformer", "mamba")) or (
                graph in ("posterior", "lens") and explorer.task.continuous) or (
                graph == "latent" and not explorer.task.continuous and not explorer.task.latent_tables(shown, 0))
            if expected:
                assert said[graph] in texts, (graph, texts)
            else:
                assert figure(browser, graph)["data"], (graph, texts)
        attention = figure(browser, "attention")["title"] or ""
        assert ("layer 0" in attention) == (arch in ("transformer", "mamba")), attention
    finally:
        server.shutdown()


# --- attention views, panels that apply, the Python/terminal panel, waits ----------------------------
def test_every_token_is_named_on_both_axes_and_the_log_scale_keeps_the_weights(run_dir):
    explorer = Explorer(run_dir, n_calibration=20, n_geometry=20)
    tokens = explorer.sample(0)
    labels = explorer.names(tokens)
    pattern = patterns(explorer, 1, tokens, 0, [])[1][1]
    linear = attention_view(explorer, 1, tokens, 0, [], layer=1, head=1)
    for axis in (linear.layout.xaxis, linear.layout.yaxis):  # every tick given, none left to plotly to skip
        assert axis.tickmode == "array" and list(axis.tickvals) == labels and list(axis.ticktext) == labels
    future = np.triu(np.ones(pattern.shape, dtype=bool), 1)  # a query's later keys: masked, drawn blank
    np.testing.assert_allclose(np.asarray(linear.data[0].z, dtype=float), np.where(future, np.nan, pattern.numpy()),
                               atol=1e-6)
    log = attention_view(explorer, 1, tokens, 0, [], layer=1, head=1, log=True)
    np.testing.assert_allclose(np.asarray(log.data[0].z, dtype=float),
                               np.where(future, np.nan, np.log10(np.maximum(pattern.double().numpy(), 1e-6))), atol=1e-6)
    np.testing.assert_allclose(np.asarray(log.data[0].customdata, dtype=float), pattern.numpy(), atol=1e-6)
    assert list(log.data[0].colorbar.ticktext)[-2:] == ["0.1", "1"] and "customdata" in log.data[0].hovertemplate


def test_the_grid_shows_every_head_of_the_layer_and_an_hmm_table_token_by_its_entry(run_dir, tmp_path):
    explorer = Explorer(run_dir, n_calibration=20, n_geometry=20)
    tokens = explorer.sample(0)
    grid = heads_view(explorer, 1, tokens, 0, ["H0.1"], layer=0)
    shown = patterns(explorer, 1, tokens, 0, ["H0.1"])[0]
    assert [a.text for a in grid.layout.annotations] == ["head 0", "head 1"]
    future = np.triu(np.ones(shown[0].shape, dtype=bool), 1)
    for h, trace in enumerate(grid.data):
        np.testing.assert_allclose(np.asarray(trace.z, dtype=float), np.where(future, np.nan, shown[h].numpy()),
                                   atol=1e-6)
    hmm = small_run(tmp_path, tasks.make("hmm", S=2, O=3, K=4))
    names = hmm.names(hmm.sample(0))
    assert names[:3] == ["0:TRANS", f"1:T[s0,s0] {names[1].split()[-1]}", f"2:T[s0,s1] {names[2].split()[-1]}"]
    assert names[5] == "5:EMIT" and names[6].startswith("6:E[s0,o0] ") and names[11].startswith("11:E[s1,o2] ")
    assert names[12:] == ["12:SEP"] + [f"{13 + i}:{n}" for i, n in enumerate(
        hmm.task.token_names(torch.tensor(hmm.sample(0)[13:])))]


def axes_and_colour_bars(fig):
    layout = fig.layout.to_plotly_json()
    yield from (layout[k] for k in layout if k.startswith(("xaxis", "yaxis")) and layout[k].get("visible") is not False)
    yield from (layout[k]["colorbar"] for k in layout if k.startswith("coloraxis") and "colorbar" in layout[k])
    yield from (t.colorbar.to_plotly_json() for t in fig.data if "colorbar" in t and t.type != "scatter")


def test_no_view_writes_an_si_prefix(run_dir):
    """plotly's default writes 1e-6 as "1µ": every axis and colour bar of every view writes plain numbers or
    powers of ten (ticks, and the hover plotly formats with them), and no hover asks for an SI format."""
    explorer = Explorer(run_dir, n_calibration=20, n_geometry=20)
    tokens = explorer.sample(0)
    views = dict(posterior_views(explorer, 1, tokens, 0, ["H0.1"]))
    views.update(lens=lens_view(explorer, 1, tokens, 0, ["H0.1"]),
                 attention=attention_view(explorer, 1, tokens, 0, [], 0, 0, log=True),
                 heads=heads_view(explorer, 1, tokens, 0, [], 0, log=True),
                 geometry=geometry_view(explorer, 1, [], "residual"), ablation=ablation_map_view(explorer, 1, "zero"))
    for name, fig in views.items():
        if not isinstance(fig, go.Figure):
            continue
        for part in axes_and_colour_bars(fig):
            assert part.get("exponentformat") == "power", (name, part)
        for trace in fig.data:
            assert not re.search(r"%\{[^}]*:[^}]*s\}", trace.hovertemplate or ""), (name, trace.hovertemplate)
            assert not (trace.type == "bar" and fig.layout.yaxis.type == "log"), name


def tiny_arch_run(tmp_path, arch, task=None):
    import models

    task = task or tasks.make("bijection", V=4, L=4)
    config = {"mlp": {"d_model": 16, "n_layers": 2}, "lstm": {"d_model": 16, "n_layers": 2},
              "mamba": {"d_model": 16, "n_layers": 2}}[arch]
    model = models.build(arch, task, config, seed=0).eval()
    checkpoint.save(tmp_path / "checkpoints" / checkpoint.checkpoint_name(0), model, step=0, seed=0)
    return Explorer(tmp_path, n_calibration=8, n_geometry=8)


def component(layout, id_):
    """The component of ``layout`` with id ``id_``, and the chain of its parents."""
    stack = [(layout, [])]
    while stack:
        node, parents = stack.pop()
        if getattr(node, "id", None) == id_:
            return node, parents
        children = getattr(node, "children", None)
        for child in children if isinstance(children, (list, tuple)) else [children]:
            if child is not None and not isinstance(child, (str, int, float)):
                stack.append((child, parents + [node]))
    raise KeyError(id_)


@pytest.mark.parametrize("arch", ["lstm", "mlp", "mamba"])
def test_panels_and_options_that_do_not_apply_are_hidden(arch, tmp_path):
    explorer = tiny_arch_run(tmp_path, arch)
    app = build_app(explorer)
    _, parents = component(app.layout, "attention")
    hidden = any((getattr(p, "style", None) or {}).get("display") == "none" for p in parents)
    assert hidden == (arch != "mamba")  # a selective scan's effective attention is shown; no attention, no panel
    streams, _ = component(app.layout, "stream")
    assert [o["value"] for o in streams.options] == ["residual"]  # no "attention output" without attention
    code = equivalent_code(explorer, 0, explorer.sample(0), 0, ["B1"])
    assert "head-ablation" not in code and "interp run layer-ablation" in code and "--ablate B1" in code


def test_the_python_and_the_terminal_command_give_the_numbers_the_page_shows(run_dir, capsys):
    import shlex

    explorer = Explorer(run_dir)  # the command's explorer has the page's own held-out batch
    tokens = explorer.sample(4)
    for seed, choices in ((4, ["M0.1", "B1"]), (None, ["H1.0"])):
        numbers = numbers_of(explorer, 1, tokens, seed, choices)
        command = next(line for line in numbers["python"].splitlines() if "interp explore" in line)
        args = shlex.split(command.lstrip("# "))
        assert args[:2] == ["interp", "explore"] and "--ablate" in args
        shown = run_cli(capsys, *args[1:])
        assert shown.code == 0, shown.err
        assert json.loads(shown.out) == json.loads(json.dumps(numbers))  # the same view, ablations included
        namespace = {}
        exec(numbers["python"], namespace)
        assert namespace["held_out"]["entropy_mae_bits"] == pytest.approx(
            numbers["held_out_calibration"]["entropy_mae_bits"], abs=1e-7)
        rows = numbers["query_positions"]
        np.testing.assert_allclose(namespace["probs"][rows].numpy(), np.asarray(numbers["model_distribution"]),
                                   atol=1e-6)
    refused = run_cli(capsys, "explore", "--ckpt", run_dir, "--numbers", "--seed", 1, "--ablate", "H7.0")
    assert refused.code == 1 and refused.err.startswith("interp: error: unknown ablation 'H7.0'")


def test_a_wait_over_a_second_is_said_in_the_page_and_on_the_terminal(capfd):
    from interp.waits import Waits

    waits = Waits(after_s=0.2)
    with waits.on("quick"):
        assert waits.shown() == ""
    with waits.on("held-out calibration on 100 sequences"):
        time.sleep(0.35)
        assert waits.shown().startswith("held-out calibration on 100 sequences… ")
    assert waits.shown() == ""
    err = capfd.readouterr().err
    assert "quick" not in err
    assert "interp: held-out calibration on 100 sequences...\n" in err
    assert re.search(r"interp: held-out calibration on 100 sequences: done in 0\.\d s", err)


def test_a_click_on_the_head_ablation_map_ablates_that_head_in_every_view(run_dir):
    explorer = Explorer(run_dir, n_calibration=20, n_geometry=20)
    app = build_app(explorer)
    client = app.server.test_client()

    def post(output, outputs, inputs, state=()):
        body = dict(output=output, outputs=outputs, inputs=inputs, state=list(state),
                    changedPropIds=[f"{inputs[0]['id']}.{inputs[0]['property']}"])
        answer = client.post("/_dash-update-component", json=body)
        assert answer.status_code == 200, answer.data
        return json.loads(answer.data)["response"]

    shown = post("ablation-map.figure", dict(id="ablation-map", property="figure"),
                 [dict(id="ablation-map-run", property="n_clicks", value=1),
                  dict(id="ablate-mode", property="value", value="mean")], [dict(id="step", property="value", value=1)])
    heat = shown["ablation-map"]["figure"]["data"][0]
    assert heat["x"] == ["H0", "H1"] and heat["y"] == ["L0", "L1"]
    assert "mean" in shown["ablation-map"]["figure"]["layout"]["title"]["text"]
    picked = post("..ablate-heads.value...ablate-blocks.value..",
                  [dict(id="ablate-heads", property="value"), dict(id="ablate-blocks", property="value")],
                  [dict(id="ablation-map", property="clickData", value=dict(points=[dict(x="H1", y="L0")]))])
    assert picked["ablate-heads"]["value"] == ["H0.1"] and picked["ablate-blocks"]["value"] == []
    bad = dict(output="..ablate-heads.value...ablate-blocks.value..",
               outputs=[dict(id="ablate-heads", property="value"), dict(id="ablate-blocks", property="value")],
               inputs=[dict(id="ablation-map", property="clickData", value=dict(points="H1"))], state=[],
               changedPropIds=["ablation-map.clickData"])
    assert client.post("/_dash-update-component", json=bad).status_code == 400
    pick = dict(output="..layer.value...head.value..", outputs=[dict(id="layer", property="value"),
                                                               dict(id="head", property="value")],
                state=[], changedPropIds=["heads.clickData"])
    def pick_head(number):  # a click on the grid of heads
        click = dict(points=[dict(x="0:k0", y="0:k0", curveNumber=number)])
        return client.post("/_dash-update-component", json=dict(pick, inputs=[
            dict(id="heads", property="clickData", value=click)]))

    assert json.loads(pick_head(1).data)["response"]["head"]["value"] == 1
    assert pick_head(2).status_code == 400 and pick_head("1").status_code == 400  # the run's layers have 2 heads


@pytest.mark.slow
def test_ctrl_c_stops_the_server_at_once(tmp_path):
    """SIGINT (Ctrl-C) while a view is computing: the server is gone within 2 s, with one line saying so."""
    port = free_port()
    log = (tmp_path / "explore.log").open("w+")
    proc = subprocess.Popen([sys.executable, "-m", "interp", "explore", "--ckpt", str(locate("hmm-transformer-cpu")),
                             "--port", str(port)], stdout=log, stderr=subprocess.STDOUT,
                            env=dict(os.environ, OMP_NUM_THREADS="1"), cwd=REPO)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=1).close()
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, "the explorer did not start"
                time.sleep(0.3)
        # the held-out calibration of an ablated model (seconds of work) is running when Ctrl-C arrives
        body = json.dumps(dict(output="code.children", outputs=dict(id="code", property="children"), inputs=[
            dict(id="step", property="value", value=0), dict(id="sequence", property="data", value=dict(
                tokens=Explorer(locate("hmm-transformer-cpu")).sample(0), seed=0)),
            dict(id="ablate-heads", property="value", value=["H0.1"]),
            dict(id="ablate-blocks", property="value", value=[]), dict(id="ablate-mode", property="value",
                                                                       value="mean")], state=[], changedPropIds=[]))
        import threading
        threading.Thread(target=lambda: urllib.request.urlopen(urllib.request.Request(
            f"http://127.0.0.1:{port}/_dash-update-component", data=body.encode(),
            headers={"Content-Type": "application/json"}), timeout=60).read(), daemon=True).start()
        time.sleep(0.5)
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        proc.wait(10)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
    log.seek(0)
    said = log.read()
    assert took < 2, f"took {took:.1f} s to stop; {said[-500:]}"
    assert proc.returncode == 130 and "interp: explorer stopped" in said and "Traceback" not in said


def serve_in_thread(explorer):
    from werkzeug.serving import make_server
    import threading

    app = build_app(explorer)
    server = make_server("127.0.0.1", free_port(), app.server, threaded=True)
    server.dash_app = app  # (what it runs in the background: app.patching_jobs)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.mark.slow
def test_the_grid_of_heads_in_chromium(shared_browser):
    """Every head of a layer side by side; a click on one shows it named token by token; the log toggle."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    explorer = Explorer(locate("hmm-transformer-cpu"))
    server = serve_in_thread(explorer)
    try:
        browser, wait = shared_browser, WebDriverWait(shared_browser, 120, poll_frequency=0.25)
        browser.get(f"http://127.0.0.1:{server.server_port}/")
        for graph in ("attention", "heads"):
            wait.until(lambda d: computed(d, graph), message=f"{graph} drawn")
        heads = figure(browser, "heads")
        n_heads = explorer.layout_info(0)["n_heads"]
        assert len(heads["data"]) == n_heads and "every head of layer 0" in heads["title"]
        labels = explorer.names(explorer.sample(0))
        ticks = browser.execute_script("return [...document.querySelectorAll('#attention .yaxislayer-above .ytick text')]"
                                       ".map(t => t.textContent)")
        assert ticks == labels  # every token named on the drawn axis, none skipped, the HMM's entries by name
        assert any("T[s0,s1]" in t for t in ticks)
        sizes = browser.execute_script("return [...document.querySelectorAll('#attention .xtick text')]"
                                       ".map(t => parseFloat(getComputedStyle(t).fontSize))")
        assert sizes and min(sizes) >= 12  # readable, not 7 to 9 pixels
        assert "head 0 (shown above)" in " ".join(figure(browser, "heads")["notes"].split())  # the grid marks it
        # a click on head 5's map: the single view shows head 5
        cell = browser.find_elements(By.CSS_SELECTOR, "#heads .nsewdrag")[5]
        ActionChains(browser).move_to_element(cell).click().perform()
        wait.until(lambda d: "layer 0, head 5" in (figure(d, "attention")["title"] or ""), message="head picked")
        assert browser.find_element(By.CSS_SELECTOR, "#head input[value='5']").is_selected()
        wait.until(lambda d: "head 5 (shown above)" in figure(d, "heads")["notes"], message="the grid frames head 5")
        browser.find_element(By.CSS_SELECTOR, "#scale input[value='log']").click()
        wait.until(lambda d: "log" in str(d.execute_script(
            "return document.querySelector('#attention .js-plotly-plot').data[0].colorbar.title.text")))
        z = [v for row in figure(browser, "attention")["data"][0]["z"] for v in row if v is not None]  # None: masked
        assert min(z) >= -6 and max(z) <= 0  # log10 of weights
    finally:
        server.shutdown()


@pytest.mark.slow
def test_a_mamba_model_first_render_draws_every_view_once_its_kernels_are_built(shared_browser):
    """From the server's start (the kernels built) and the page opened at once to every view drawn, the server
    preparing the first views as ``interp explore`` does. The time is printed; the 5 s target is measured by
    benchmarks/explorer_first_render.py (a timed test fails on a busy machine), which sets
    EXPLORE_FIRST_RENDER_S to make this test hold it."""
    from selenium.webdriver.support.ui import WebDriverWait

    from interp.explore import prepare_in_background

    explorer = Explorer(locate("hmm-mamba-cpu"))
    explorer.model(0).warm_up()  # the kernels are built (or loaded) before the clock starts
    server = serve_in_thread(explorer)
    try:
        browser = shared_browser
        started = time.monotonic()
        prepare_in_background(explorer)
        browser.get(f"http://127.0.0.1:{server.server_port}/")
        wait = WebDriverWait(browser, 120, poll_frequency=0.05)
        for graph in GRAPHS + ("heads",):
            wait.until(lambda d: computed(d, graph), message=f"{graph} drawn")
        took = time.monotonic() - started
    finally:
        server.shutdown()
    print(f"hmm-mamba-cpu first render in Chromium: {took:.2f} s")
    if "EXPLORE_FIRST_RENDER_S" in os.environ:  # the benchmark's bound, on a machine it knows is quiet
        bound = float(os.environ["EXPLORE_FIRST_RENDER_S"])
        assert took < bound, f"first render took {took:.1f} s (bound {bound} s)"


def test_the_page_s_status_line_names_what_a_slow_view_waits_for(run_dir):
    from interp.waits import Waits

    explorer = Explorer(run_dir, n_calibration=20, n_geometry=20, waits=Waits(after_s=0.0, terminal=False))
    client = build_app(explorer).server.test_client()
    body = dict(output="..status.children...status.style..", outputs=[dict(id="status", property="children"),
                                                                     dict(id="status", property="style")],
                inputs=[dict(id="tick", property="n_intervals", value=3)], state=[], changedPropIds=["tick.n_intervals"])
    with explorer.waits.on("held-out calibration on 100 sequences"):
        shown = json.loads(client.post("/_dash-update-component", json=body).data)["response"]["status"]
    assert shown["children"].startswith("waiting: held-out calibration on 100 sequences… ")
    assert shown["style"]["position"] == "sticky"
    idle = json.loads(client.post("/_dash-update-component", json=body).data)["response"]["status"]
    assert idle["style"] == {"display": "none"}


def test_masked_cells_are_blank_labels_readable_and_the_grid_marks_the_head_shown(run_dir):
    """circuitsvis's way: a causal model's future keys are no weight at all (blank, never 0 or 1e-6 on the log
    scale, no hover); tick labels 12 px, level where a cell has room (slanted where not, never upright); the grid
    of heads frames the head the single view shows."""
    from interp.explore.attention_maps import pattern_figure, size_of

    explorer = Explorer(run_dir, n_calibration=20, n_geometry=20)
    tokens = explorer.sample(0)
    for log in (False, True):
        z = np.asarray(attention_view(explorer, 1, tokens, 0, [], layer=0, head=1, log=log).data[0].z, dtype=float)
        assert np.isnan(z[np.triu_indices(len(tokens), 1)]).all() and not np.isnan(z[np.tril_indices(len(tokens))]).any()
    fig = attention_view(explorer, 1, tokens, 0, [], layer=0, head=1)
    assert fig.data[0].hoverongaps is False
    assert fig.layout.xaxis.tickfont.size >= 12 and fig.layout.yaxis.tickfont.size >= 12
    assert fig.layout.xaxis.tickangle == 0  # 9 short labels ("3:v2") in a 360-pixel square: level
    words = [f"{w} ·{i}" for i, w in enumerate(["␣The", "␣capital", "␣of", "␣France", "␣is"] * 8)]
    assert pattern_figure(torch.rand(40, 40).tril(), words, "t").layout.xaxis.tickangle == -45  # no room: slanted
    assert size_of(words[:5]) == (442, 0)  # a short prompt: level, the area grown to 5 cells of 10 characters
    grid = heads_view(explorer, 1, tokens, 0, [], layer=0, head=1)
    frame = [s for s in grid.layout.shapes if s.type == "rect"]
    assert len(frame) == 1 and frame[0].xref == "x2 domain"  # head 1: the second map
    assert [a.text for a in grid.layout.annotations] == ["head 0", "<b>head 1 (shown above)</b>"]
    non_causal = torch.rand(5, 5)  # a model that attends ahead: nothing hidden
    assert not np.isnan(np.asarray(pattern_figure(non_causal, list("abcde"), "t").data[0].z, dtype=float)).any()


def test_a_geometry_whose_entropy_never_varies_is_coloured_by_position_and_says_why(tmp_path):
    """recall's Bayes entropy is 0 at every query (the bound value is always known): a colour bar of -0.4..0.4 tells
    the points apart by nothing, so the view colours them by position and its title says why."""
    explorer = small_run(tmp_path, tasks.make("recall", N=4, n_keys=8, n_values=6, queries=3))
    fig = geometry_view(explorer, 0, [], "residual", "entropy")
    title = fig.layout.title.text.replace("<br>", " ")
    assert "coloured by token position" in title and "the Bayes entropy is 0 bits at every point here" in title
    assert fig.layout.coloraxis.colorbar.title.text == "token position"


def test_ablated_posteriors_integer_ticks_the_hmm_path_and_the_head_ablation_map_say_what_they_show(run_dir, tmp_path):
    explorer = Explorer(run_dir, n_calibration=20, n_geometry=20)
    tokens = explorer.sample(0)
    ablated = posterior_views(explorer, 1, tokens, 0, ["H0.1", "B1"])
    assert [a.text for a in ablated["posterior"].layout.annotations] == [
        "exact Bayes posterior", "model, L0H1 ablated, block 1 skipped"]
    assert "model with L0H1 ablated, block 1 skipped" in lens_view(explorer, 1, tokens, 0, ["H0.1", "B1"]).layout.title.text
    intact = posterior_views(explorer, 1, tokens, 0, [])
    assert [a.text for a in intact["posterior"].layout.annotations][1] == "model"
    for view in ("entropy", "gap", "calibration"):  # query positions: whole numbers, a tick at each
        assert intact[view].layout.xaxis.dtick == 1 and intact[view].layout.xaxis.tickformat == "d", view
    hmm = small_run(tmp_path, tasks.make("hmm", S=3, O=2, K=5))
    latent = posterior_views(hmm, 0, hmm.sample(0), 0, [])["latent"]
    path_axis = latent.layout.xaxis3  # transition table, emission table, then the path below them
    assert path_axis.showticklabels is not False and path_axis.title.text == "query position"
    bar = latent.layout.coloraxis.colorbar
    tables_row = latent.layout.yaxis.domain  # beside the tables it belongs to, not on the path below them
    assert latent.layout.xaxis2.domain[1] <= bar.x < 1 and tables_row[0] <= bar.y <= tables_row[1]
    assert bar.y - bar.len / 2 >= latent.layout.yaxis3.domain[1]
    fig = ablation_map_view(explorer, 1, "zero")
    title = " ".join(fig.layout.title.text.replace("<br>", " ").split())
    assert "20 sequences, seed 1234" in title and "interp run head-ablation uses 1,000 sequences unless given --n 20" in title
    low, high = held_out_calibration(explorer, 1, [])["intervals"]["entropy_mae_bits"]
    assert f"the intact MAE's 95% interval {low:.4f}-{high:.4f} bits" in title
    from interp.explore.ablation import map_panel
    assert "on 20 held-out sequences" in str(map_panel(explorer, None).children[0].children)
    assert "interp run head-ablation --ckpt" in equivalent_code(explorer, 1, tokens, 0, []) and \
        "--n 20 --seed 1234" in equivalent_code(explorer, 1, tokens, 0, [])


# --- a new user's screen: 1280x800, every view legible --------------------------------------------------


def boxes(driver, selector: str) -> list[dict]:
    """The page rectangles (left, top, right, bottom, in page pixels) of the elements ``selector`` finds."""
    return driver.execute_script(
        "return [...document.querySelectorAll(arguments[0])].map(e => { const r = e.getBoundingClientRect();"
        " return {left: r.left + scrollX, top: r.top + scrollY, right: r.right + scrollX, bottom: r.bottom + scrollY};"
        "})", selector)


def overlap(a: dict, b: dict) -> bool:
    return a["left"] < b["right"] and b["left"] < a["right"] and a["top"] < b["bottom"] and b["top"] < a["bottom"]


def titles_fit(driver, graph: str) -> bool:
    """Whether every line of the graph's title lies inside the graph (not cut off at its right edge)."""
    frame = boxes(driver, f"#{graph} .main-svg")[0]
    return all(frame["left"] <= b["left"] and b["right"] <= frame["right"] + 1
               for b in boxes(driver, f"#{graph} .infolayer .gtitle"))


@pytest.fixture
def screen(shared_browser):
    """The shared browser at a laptop's 1280x800 (restored after)."""
    before = shared_browser.get_window_size()
    shared_browser.set_window_size(*SCREEN)
    yield shared_browser
    shared_browser.set_window_size(before["width"], before["height"])


@pytest.mark.slow
def test_a_recall_page_fits_the_screen_and_its_patch_map_arrives_when_its_job_is_done(screen, monkeypatch):
    """recall's 329 tokens: the attention map fits a bounded box on a 1280x800 screen (not 6,000 pixels of it), its
    labels against the map; the geometry's colour choice says what the figure is coloured by; a patch press draws
    its map when the job is done, once (the pair drawn as a few pieces of text, not a thousand elements the page
    takes seconds over, twice)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from interp.explore import patching as explore_patching

    drawn, pair_text = [], explore_patching.pair_text
    monkeypatch.setattr(explore_patching, "pair_text", lambda *a: drawn.append(1) or pair_text(*a))
    explorer = Explorer(locate("recall-transformer-plain-mix"))
    server = serve_in_thread(explorer)
    try:
        browser, wait = screen, WebDriverWait(screen, 180, poll_frequency=0.1)
        browser.get(f"http://127.0.0.1:{server.server_port}/")
        for graph in GRAPHS:
            wait.until(lambda d: computed(d, graph), message=f"{graph} drawn")
        n = len(explorer.sample(0))
        assert n > 300 and f"{n} tokens: drag a box to zoom in" in figure(browser, "attention")["title"]
        box = boxes(browser, "#attention-box")[0]
        plot = boxes(browser, "#attention .main-svg")[0]
        assert plot["bottom"] - plot["top"] <= box["bottom"] - box["top"] <= SCREEN[1]  # all of it on screen at once
        area = boxes(browser, "#attention .nsewdrag")[0]
        labels = boxes(browser, "#attention .yaxislayer-above .ytick text")
        assert max(b["right"] for b in labels) > area["left"] - 12  # the labels against the map: no blank band
        assert browser.execute_script("return document.body.scrollHeight") < 4 * 1100  # was 11 screens
        colour = browser.find_element(By.CSS_SELECTOR, "#colour input[value='entropy']")
        wait.until(lambda d: browser.find_element(By.CSS_SELECTOR, "#colour input[value='position']").is_selected(),
                   message="the colour choice says the figure is coloured by position")
        assert not colour.is_enabled() and "nothing to colour by" in browser.find_element(By.ID, "colour").text

        browser.find_element(By.ID, "patch-run").click()
        wait.until(lambda d: (figure(d, "patch-map") or {}).get("data"), message="patch map drawn")
        seen = time.monotonic()
        job = server.dash_app.patching_jobs.latest()
        # the map is there as soon as the job is done (it was 14-28 s on a busy machine: the page drew the pair's
        # thousand elements twice, sending no request meanwhile)
        assert job.state == "done" and seen - job.ended < 3, (seen - job.ended, job.line())
        wait.until(lambda d: "done in" in d.find_element(By.ID, "patch-progress").text, message="the line says done")
        time.sleep(1.5)  # three more ticks: the map is not drawn again
        assert len(drawn) == 1
        assert len(browser.find_elements(By.CSS_SELECTOR, "#patch-pair *")) < 40
    finally:
        server.shutdown()


def click_cell(driver, graph: str, column: int, columns: int, row: int, rows: int) -> None:
    """A click on cell (``row``, ``column``) of a heat map of ``rows`` x ``columns`` cells."""
    from selenium.webdriver.common.action_chains import ActionChains

    area = driver.find_element("css selector", f"#{graph} .nsewdrag")
    width, height = area.size["width"], area.size["height"]
    ActionChains(driver).move_to_element_with_offset(area, int((column + 0.5) / columns * width - width / 2),
                                                     int((row + 0.5) / rows * height - height / 2)).click().perform()


@pytest.mark.slow
def test_the_patch_map_and_a_patch_s_answers_have_room_on_the_screen(screen):
    """bijection's map of 39 positions: its slanted position labels do not run into each other; a clicked cell's
    answers: bars of some width in a plot of some height, the legend covering no bar and no tick, the titles whole."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    server = serve_in_thread(Explorer(SHIPPED))
    try:
        browser, wait = screen, WebDriverWait(screen, 120, poll_frequency=0.2)
        browser.get(f"http://127.0.0.1:{server.server_port}/")
        wait.until(lambda d: computed(d, "posterior"), message="posterior drawn")
        browser.find_element(By.ID, "patch-run").click()
        wait.until(lambda d: (figure(d, "patch-map") or {}).get("data"), message="patch map drawn")
        heat = figure(browser, "patch-map")["data"][0]
        assert len(boxes(browser, "#patch-map .xtick text")) == len(heat["x"]) >= 30  # every position named
        apart = browser.execute_script("const el = document.querySelector('#patch-map .js-plotly-plot');"
                                       "return el._fullLayout.xaxis._length / el.data[0].x.length")
        assert apart >= 14  # 11-pixel text slanted at 60°: apart (was 11 pixels)
        assert titles_fit(browser, "patch-map")
        browser.execute_script("document.getElementById('patch-map').scrollIntoView()")
        click_cell(browser, "patch-map", len(heat["x"]) - 1, len(heat["x"]), 0, len(heat["y"]))
        wait.until(lambda d: (figure(d, "patch-cell") or {}).get("data"), message="a patch's answers drawn")
        area = boxes(browser, "#patch-cell .nsewdrag")[0]
        assert area["bottom"] - area["top"] >= 200  # was 70 pixels
        legend = boxes(browser, "#patch-cell .legend")[0]
        for part in boxes(browser, "#patch-cell .point") + boxes(browser, "#patch-cell .ytick text") + [area]:
            assert not overlap(legend, part)
        assert min(b["right"] - b["left"] for b in boxes(browser, "#patch-cell .point")) >= 4  # not hairlines
        assert titles_fit(browser, "patch-cell")
    finally:
        server.shutdown()


@pytest.mark.slow
def test_the_hmm_latent_view_and_the_regression_views_are_legible(screen):
    """The HMM's path has a plot of its own below the tables, their colour bar on neither it nor its ticks; an
    unknown token's hint names tokens one can type; regression's posterior box is the size of its sentence, a
    map with nothing to draw says why, and titles (the ablated calibration's too) are whole, no toolbar over them."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    server = serve_in_thread(Explorer(locate("hmm-transformer-cpu")))
    try:
        browser, wait = screen, WebDriverWait(screen, 120, poll_frequency=0.2)
        browser.get(f"http://127.0.0.1:{server.server_port}/")
        wait.until(lambda d: computed(d, "latent"), message="latent truth drawn")
        path = boxes(browser, "#latent .nsewdrag[data-subplot='x3y3']")[0]
        assert path["bottom"] - path["top"] >= 150 and path["right"] - path["left"] >= 200  # was 70 pixels tall
        bar = boxes(browser, "#latent .colorbar")[0]
        assert not overlap(bar, path)
        ticks = sorted(boxes(browser, "#latent .yaxislayer-above .y3tick text"), key=lambda b: b["top"])
        assert all(a["bottom"] <= b["top"] for a, b in zip(ticks, ticks[1:]))  # the states' names apart
        text = browser.find_element(By.ID, "tokens-text")
        text.send_keys(Keys.CONTROL, "a")
        text.send_keys("zz")
        browser.find_element(By.ID, "apply").click()
        wait.until(lambda d: "unknown token" in d.find_element(By.ID, "message").text)
        assert "such as TRANS EMIT SEP or ids" in browser.find_element(By.ID, "message").text  # not 0.00 0.01 0.02
    finally:
        server.shutdown()
    server = serve_in_thread(Explorer(locate("regression-mlp-cpu")))
    try:
        browser.get(f"http://127.0.0.1:{server.server_port}/")
        for graph in ("posterior", "calibration", "latent"):
            wait.until(lambda d: computed(d, graph), message=f"{graph} drawn")
        posterior = boxes(browser, "#posterior .main-svg")[0]
        assert posterior["bottom"] - posterior["top"] <= 300  # one sentence, not an 800-pixel box
        assert titles_fit(browser, "latent")
        browser.find_element(By.CSS_SELECTOR, "#ablate-blocks input[value='B0']").click()
        wait.until(lambda d: "(ablated)" in (figure(d, "calibration")["title"] or ""), message="ablated calibration")
        wait.until(lambda d: d.execute_script("return !document.querySelector('[data-dash-is-loading]')"))
        assert titles_fit(browser, "calibration")
        assert all(not e.is_displayed() for e in browser.find_elements(By.CSS_SELECTOR, ".modebar-container"))
        browser.find_element(By.CSS_SELECTOR, "#ablate-blocks input[value='B0']").click()  # intact again
        browser.find_element(By.ID, "patch-run").click()
        wait.until(lambda d: "no map to draw" in ((figure(d, "patch-map") or {}).get("notes") or ""),
                   message="the patch map says why it is empty")
        assert "on the Bayes scale" not in (figure(browser, "patch-map")["title"] or "")
    finally:
        server.shutdown()
