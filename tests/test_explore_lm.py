"""The explorer on a language model (`interp explore --model`): its views on a tiny grouped-query Llama with a
word-level tokenizer, checked against the model's own hooks and logits, and its one-line refusals."""
import json
import re
import time
from contextlib import contextmanager

import pytest
import torch

from interp.explore.page import rules
from interp.explore.lm_app import VIEWS, build_app
from interp.explore.lm_attention import attention_view, grid_view
from interp.explore.lm_lens import lens_view
from interp.explore.lm_prompt import answer_summary, sample
from interp.explore.lm_state import LanguageExplorer, token_text
from interp.errors import UserError
from interp.requests import Refused, check_request
from models.language_model import LanguageModel, from_hugging_face
from tests.cli import run_cli
from tests.tiny_language_models import tiny, word_tokenizer


@contextmanager
def in_chromium(wsgi):
    """``wsgi`` served on a free local port in a thread, and a headless Chromium to drive it: (browser, url).
    Both end with the block, however it ends."""
    import threading

    from werkzeug.serving import make_server

    from tests.test_explore import chromium_driver, free_port

    server = make_server("127.0.0.1", free_port(), wsgi, threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    browser = chromium_driver()
    try:
        yield browser, f"http://127.0.0.1:{server.server_port}"
    finally:
        browser.quit()
        server.shutdown()

TEXT = "cat -> blue river -> green bread ->"


@pytest.fixture(scope="module")
def explorer():
    tokenizer = word_tokenizer()
    return LanguageExplorer(LanguageModel(from_hugging_face(tiny("llama-gqa", vocab_size=len(tokenizer))), "tiny",
                                          tokenizer), initial=TEXT)


def test_attention_is_the_models_pattern_with_the_tokens_text_on_its_axes(explorer):
    ids = explorer.encode(TEXT)
    fig = attention_view(explorer, ids, 1, 3)
    _, cache = explorer.lm.model.run_with_cache(torch.tensor([ids]))
    future = torch.ones(len(ids), len(ids), dtype=torch.bool).triu(1)  # masked: blank (NaN), not a weight of 0
    shown = torch.tensor(fig.data[0].z).double()
    assert shown[future].isnan().all()
    assert torch.allclose(shown[~future], cache["blocks.1.attn.hook_pattern"][0, 3].double()[~future], atol=1e-6)
    assert list(fig.data[0].x) == ["cat ·0", "-> ·1", "blue ·2", "river ·3", "-> ·4", "green ·5", "bread ·6", "-> ·7"]
    assert "key/value head 1" in fig.layout.title.text  # 4 query heads share 2 key/value heads
    grid = grid_view(explorer, ids, 0)
    assert len(grid.data) == explorer.lm.model.cfg.n_heads
    assert torch.allclose(torch.tensor(grid.data[2].z).double()[~future],
                          cache["blocks.0.attn.hook_pattern"][0, 2].double()[~future], atol=1e-6)


def test_the_last_layers_lens_is_the_models_own_next_token_distribution(explorer):
    ids = explorer.encode(TEXT)
    fig = lens_view(explorer, ids)
    with torch.no_grad():
        probs = torch.softmax(explorer.lm.model(torch.tensor([ids]))[0, -1].double(), -1)
    top = probs.topk(8)
    assert torch.allclose(torch.tensor(fig.data[0].z[-1]).double(), top.values, atol=1e-6)
    assert list(fig.data[0].text[-1]) == [token_text(explorer.lm.tokenizer.decode([t])) for t in top.indices]


def test_a_drawn_prompt_shows_the_bayes_predictive_beside_the_model(explorer):
    sampled = sample(explorer, "coin", 3)
    assert sampled["text"].startswith("Coin flips")
    ids = explorer.encode(sampled["text"])
    summary = answer_summary(explorer, ids, sampled)
    assert "Bayes predictive heads" in summary and "model (renormalised over the answers) heads" in summary


def test_bad_inputs_are_one_line(explorer, capsys):
    with pytest.raises(UserError, match="empty"):
        explorer.encode("")
    with pytest.raises(UserError, match="at most"):
        explorer.encode("cat " * 300)
    with pytest.raises(UserError, match="out of range"):
        attention_view(explorer, explorer.encode(TEXT), 2, 0)
    with pytest.raises(UserError, match="seed"):
        sample(explorer, "coin", -1)
    for args, message in ((["explore"], "one of them"), (["explore", "--ckpt", "x", "--model", "y"], "one of them")):
        shown = run_cli(capsys, *args)
        assert shown.code == 1 and message in shown.err and "Traceback" not in shown.err


def test_a_forged_request_is_refused_before_a_view_runs(explorer):
    app = build_app(explorer)
    output = next(k for k in app.callback_map if "attention.figure" in k)
    good = [dict(id="prompt", property="data", value=dict(text=TEXT, task=None, seed=None)),
            dict(id="layer", property="value", value=1), dict(id="head", property="value", value=0),
            dict(id="scale", property="value", value="linear")]
    outputs = [dict(id=i, property=p) for i, p in (("attention", "figure"), ("grid", "figure"))]
    body = dict(output=output, outputs=outputs, inputs=good, state=[], changedPropIds=[])
    check_request(body, app.callback_map, rules(explorer, VIEWS))
    for i, bad in ((1, 7), (2, 1.0), (0, dict(text=TEXT, task="coin", seed=None)), (0, dict(text=3, task=None, seed=None)),
                   (3, "logarithmic")):
        forged = [dict(item) for item in good]
        forged[i]["value"] = bad
        with pytest.raises(Refused):
            check_request(dict(body, inputs=forged), app.callback_map, rules(explorer, VIEWS))


def test_every_control_the_page_reads_has_one_rule_from_the_table_of_views(explorer):
    from tests.explorer_requests import controls_read

    assert controls_read(build_app(explorer)) == set(rules(explorer, VIEWS))


PATCH = {"seed.value": 3, "patch-kind.value": "two-label", "patch-index.value": 1, "patch-run.n_clicks": 1,
         "tick.n_intervals": 1, "patch-cancel.n_clicks": 0, "patch-shown.data": None}


def patched_map(client, app, values=PATCH, timeout=300):
    """Press patch, then follow the page's ticks until the map arrives (the press answers at once on a language
    model, the job runs in the background); the press's answer and the map's."""
    import time

    from tests.explorer_requests import answer

    pressed = answer(client, app, "patch-map", values)
    deadline = time.monotonic() + timeout
    while True:  # the tick's progress line, until it says the job ended (patch-shown); that draws the map
        progress = answer(client, app, "patch-progress", values)
        if progress.get("patch-shown"):
            ended = dict(values, **{"patch-shown.data": progress["patch-shown"]["data"]})
            return pressed, progress, answer(client, app, "patch-map<-patch-shown", ended)
        assert time.monotonic() < deadline, progress
        time.sleep(0.2)


def test_the_patching_panel_patches_drawn_prompts_and_a_click_draws_that_intervention(explorer):
    """The wind-tunnel explorer's patching panel on a language model, through the app's request route: drawn
    two-label prompts, one shown observation flipped, the heat map of every site and position, a clicked cell."""
    from tests.explorer_requests import answer

    app = build_app(explorer)
    client = app.server.test_client()
    _, progress, shown = patched_map(client, app)
    assert "done in" in progress["patch-progress"]["children"]
    heat = shown["patch-map"]["figure"]["data"][0]
    assert heat["y"][0] == "resid before L0" and "L0H0" not in heat["y"] and heat["x"][-1] == "all positions"
    # a layer's heads picked: the map drawn again with them in their place, from the same job
    with_heads = answer(client, app, "patch-map<-patch-heads", dict(PATCH, **{"patch-heads.value": 0}))
    assert with_heads["patch-map"]["figure"]["data"][0]["y"][:6] == [
        "resid before L0", "L0H0", "L0H1", "L0H2", "L0H3", "L0 attention"]
    assert "shown observation 1 flipped" in json.dumps(shown["patch-pair"]["children"])
    # several prompts: the model's two answers on the Bayes scale with activation-patching's intervals over them
    assert re.search(r"\(95% intervals over \d+ pairs\)", shown["patch-map"]["figure"]["layout"]["title"]["text"])
    assert answer(client, app, "patch-progress", dict(PATCH, **{"patch-shown.data": progress["patch-shown"]["data"]})) == {}
    other_pair = dict(PATCH, **{"seed.value": 4, "patch-shown.data": progress["patch-shown"]["data"]})
    assert answer(client, app, "patch-map<-patch-shown", other_pair) == {}  # a tab showing another pair: not its map
    click = dict(points=[dict(x=heat["x"][-1], y="resid before L0")])  # the whole residual: the clean answer back
    cell = answer(client, app, "patch-cell", dict(PATCH, **{"patch-map.clickData": click}))["patch-cell"]["figure"]
    assert [t["name"] for t in cell["data"]][:2] == ["Bayes, clean input", "Bayes, corrupted input"]
    clean, patched = cell["data"][2]["y"], cell["data"][4]["y"]
    assert patched == pytest.approx(clean, abs=1e-5) and "model scale 1.000" in cell["layout"]["title"]["text"]


def test_the_estimated_map_measures_its_cells_as_the_exhaustive_map_does(explorer):
    """A language model's map (every cell estimated, the strongest measured) against activation patching's exhaustive
    map on the same pair: each measured cell's answer and scores are the exhaustive ones (stacked with other sites'
    cells, heads of several layers in one pass), the others are attribution patching's estimates, and the cells
    measured are those of the largest estimates."""
    from analyses import interventions as P
    from analyses.activation_patching import measure, measure_cells
    from analyses.attribution_patching import estimates
    from interp.explore.pairs import LANGUAGE_ALPHA, LANGUAGE_PROMPTS
    from interp.explore.lm_patching import EXACT_CELLS, default_sites, estimated_map, whole

    pair = P.language_pair(explorer.lm, "two-label", "mixed", LANGUAGE_PROMPTS, LANGUAGE_ALPHA, 3, 1)
    scorer = P.Scorer(pair)
    chosen, where = P.sites(pair.model), pair.positions("auto")
    exhaustive = {}
    grid, _ = measure(pair, scorer, chosen, where, exhaustive)
    columns, rows = [*where, None], {s.label: i for i, s in enumerate(chosen)}
    shown = [(s.label, p) for s in default_sites(chosen) for p in columns]
    assert len(shown) > EXACT_CELLS  # some cells are left estimated
    new = estimated_map(pair, scorer, chosen, where)
    first_order = estimates(pair, chosen, where, scorer)
    clean_run = {(s.label, None) for s in whole(chosen)}  # the residual stream at every position: the clean run
    assert len(clean_run) == 3 and clean_run <= new.measured <= set(shown)
    assert len(new.measured - clean_run) == EXACT_CELLS
    for site in chosen:
        for j, p in enumerate(columns):
            i = rows[site.label]
            if (site.label, p) in new.measured:
                assert torch.allclose(new.answers[site.label, p], exhaustive[site.label, p], atol=1e-6, rtol=0)
                for scale in grid:
                    assert new.grid[scale][i][j] == pytest.approx(grid[scale][i][j], abs=1e-6)
            else:
                assert (site.label, p) not in new.answers
                assert [new.grid[scale][i][j] for scale in grid] == [first_order[scale][i][j] for scale in grid]
    size = lambda cell: abs(first_order["model"][rows[cell[0]]][columns.index(cell[1])])  # noqa: E731
    assert min(map(size, new.measured - clean_run)) >= max(size(c) for c in shown if c not in new.measured)
    every = estimated_map(pair, scorer, chosen, where, exact=10 ** 6)  # every default cell measured: the exhaustive map
    assert every.measured == set(shown)
    assert all(every.grid[s][rows[label]][columns.index(p)] == pytest.approx(grid[s][rows[label]][columns.index(p)],
                                                                                abs=1e-6) for label, p in shown for s in grid)
    heads = [(s, p) for s in chosen if s.kind == "head" for p in (where[0], where[-1], None)]
    for (site, p), a in zip(heads, measure_cells(pair, heads, new.clean, new.corrupted)):
        assert torch.allclose(a, exhaustive[site.label, p], atol=1e-6, rtol=0)


def test_the_language_models_map_is_what_its_panel_says(explorer):
    """The panel's words about the map (its rows, its columns, how many cells are measured) are the map drawn."""
    from analyses import interventions as P
    from interp.explore.pairs import LANGUAGE_ALPHA, LANGUAGE_PROMPTS, LanguagePairs
    from interp.explore.lm_patching import EXACT_CELLS, whole
    from interp.explore.patching import panel

    def find(component, id_):
        if getattr(component, "id", None) == id_:
            return component
        children = getattr(component, "children", None)
        for child in children if isinstance(children, list) else [children]:
            found = find(child, id_) if child is not None and not isinstance(child, str) else None
            if found is not None:
                return found
    said = find(panel(LanguagePairs(explorer)), "patch-covers").children
    app = build_app(explorer)
    _, _, shown = patched_map(app.server.test_client(), app, dict(PATCH, **{"seed.value": 6}))
    heat, ringed = shown["patch-map"]["figure"]["data"]
    pair = P.language_pair(explorer.lm, "two-label", "mixed", LANGUAGE_PROMPTS, LANGUAGE_ALPHA, 6, 1)
    n_rows = int(re.search(r"The map's (\d+) rows", said).group(1))
    assert heat["y"] == ["resid before L0", "L0 attention", "L0 MLP", "resid before L1", "L1 attention", "L1 MLP",
                         "resid after L1"] and n_rows == len(heat["y"])
    assert ("the residual stream before each of the 2 layers and after the last, each layer's attention output, its "
            "MLP output (a layer's 4 heads: pick the layer in \"heads of layer\")") in said
    assert "every position from two before the flipped observation to the answer" in said
    lo, length = max(0, pair.changed[0] - 2), pair.clean.shape[1]
    assert length - lo <= 48 and heat["x"] == [pair.labels[p] for p in range(lo, length)] + ["all positions"]
    assert (f"the {EXACT_CELLS} cells of the largest estimated effect are measured exactly (ringed, as is the "
            f"residual stream at all positions at once, which is the clean run itself)") in said
    n_whole = len(whole(P.sites(explorer.lm.model)))
    assert len(ringed["x"]) == EXACT_CELLS + n_whole and f"ringed: exact, the {EXACT_CELLS} cells measured" in \
        shown["patch-map"]["figure"]["layout"]["title"]["text"]
    assert {(x, y) for x, y in zip(ringed["x"], ringed["y"]) if x == "all positions"} >= {
        ("all positions", label) for label in ("resid before L0", "resid before L1", "resid after L1")}
    hover = [t for line in heat["text"] for t in line]
    assert sum("measured exactly" in t for t in hover) == EXACT_CELLS
    assert sum("exact: the clean run itself" in t for t in hover) == n_whole
    assert sum("first-order estimate" in t for t in hover) == len(hover) - EXACT_CELLS - n_whole


def test_patching_runs_in_the_background_with_progress_and_a_cancel_and_the_other_views_answer(explorer, monkeypatch):
    """A press answers at once; while the job runs, the other views (a second tab's) are served between its steps,
    the page's tick shows how many cells are measured and about how long is left, and a cancel stops it."""
    import threading
    import time

    from analyses import activation_patching
    from tests.explorer_requests import answer

    slow, release = activation_patching.measure_cells, threading.Event()

    def measure_cells(*args, **kwargs):  # each step waits: the job is still running while the test looks
        release.wait(0.3)
        return slow(*args, **kwargs)

    monkeypatch.setattr(activation_patching, "measure_cells", measure_cells)  # the map's steps
    app = build_app(explorer)
    client, other_tab = app.server.test_client(), app.server.test_client()
    values = dict(PATCH, **{"seed.value": 5})
    started = time.monotonic()
    pressed = answer(client, app, "patch-map", values)
    assert "runs in the background" in pressed["patch-map"]["figure"]["layout"]["annotations"][0]["text"]
    job = app.patching_jobs.latest()
    assert job.state == "running"
    views = {"prompt.data": dict(text="river -> green", task=None, seed=None), "layer.value": 1, "head.value": 2,
             "scale.value": "linear"}
    drawn = answer(other_tab, app, "attention", views)  # served while the job runs, between two of its steps
    assert drawn["attention"]["figure"]["data"] and job.state == "running", job.line()
    deadline = time.monotonic() + 120
    while job.done < 2:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    line = answer(client, app, "patch-progress", values)["patch-progress"]["children"]
    assert "patch-shown" not in answer(client, app, "patch-progress", values)  # no map on the way yet
    assert re.search(rf"activation patching on \d+ input pair\(s\): \d+ of {job.total} cells measured exactly "
                     rf"\(\d+%\), \d+ s so far, "
                     rf"about \d+ s left", line), line
    assert answer(client, app, "patch-progress<-patch-cancel", dict(values, **{"patch-cancel.n_clicks": 1}))
    job.wait(60)
    assert job.state == "cancelled" and job.done < job.total
    ended = answer(client, app, "patch-progress", values)
    assert "cancelled after" in ended["patch-progress"]["children"] and ended["patch-cancel"]["style"] == {"display": "none"}
    assert time.monotonic() - started < 120



def test_a_first_gguf_conversion_is_shown_in_the_page_at_once_and_the_page_becomes_the_explorer(tmp_path, monkeypatch):
    """``interp explore --model x.gguf`` answers the browser while the GGUF converts (minutes on a real one): a page
    showing each step of the conversion (models/gguf_model.py reports them), then the explorer itself."""
    import threading

    from werkzeug.test import Client

    from interp.explore.lm_opening import Opening
    from models import gguf_model
    from models.language_model import open_language_model

    tokenizer, go_on = word_tokenizer(), threading.Event()

    def read_gguf(path):  # the dequantising step, held until the test has looked at the page
        assert go_on.wait(120)
        return tiny("llama-gqa", len(tokenizer)), tokenizer

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(gguf_model, "read_gguf", read_gguf)
    monkeypatch.setattr(gguf_model, "check_gguf", lambda path: None)
    (tmp_path / "tiny.gguf").write_bytes(b"GGUF not a real one: its reading is replaced")
    opening = Opening(str(tmp_path / "tiny.gguf"), open_language_model)
    thread = opening.start()
    client = Client(opening)
    page = client.get("/")
    assert page.status_code == 200 and "opening" in page.text and Opening.PATH in page.text
    deadline = time.monotonic() + 60
    while "dequantising" not in opening.what:
        assert time.monotonic() < deadline, opening.status()
        time.sleep(0.05)
    status = client.get(Opening.PATH).json
    assert status["state"] == "opening" and status["total"] == 4 and status["done"] == 0
    assert status["what"].startswith("converting tiny.gguf (once; cached in ") and "dequantising the GGUF" in status["what"]
    assert client.get("/_dash-layout").status_code == 503  # no explorer yet: the page says why
    go_on.set()
    thread.join(300)
    assert opening.status()["state"] == "ready", opening.status()
    assert client.get(Opening.PATH).json["state"] == "ready"  # the page's poll: it reloads into the explorer
    assert "_dash-config" in client.get("/").text


def test_a_model_that_cannot_be_opened_is_said_in_the_page(tmp_path):
    from werkzeug.test import Client

    from interp.explore.lm_opening import Opening

    opening = Opening(str(tmp_path / "missing.gguf"))
    opening.start().join(120)
    status = Client(opening).get(Opening.PATH).json
    assert status["state"] == "failed" and status["error"] == f"no GGUF file {tmp_path / 'missing.gguf'}"


def test_the_lens_writes_its_tokens_readably_and_the_grid_frames_the_head_shown(explorer):
    ids = explorer.encode(TEXT)
    lens = lens_view(explorer, ids)
    assert lens.data[0].textfont.size >= 12 and lens.layout.height >= 160 + 26 * explorer.lm.model.cfg.n_layers
    grid = grid_view(explorer, ids, 0, head=3)
    assert [s.xref for s in grid.layout.shapes] == ["x4 domain"] and "shown above" in grid.layout.annotations[3].text
    assert attention_view(explorer, ids, 0, 0).layout.xaxis.tickangle == 0  # 8 words in 360 pixels: level


@pytest.mark.slow
def test_patching_in_the_background_in_chromium(explorer, monkeypatch):
    """In the browser: "patch" shows the job's progress with a cancel, another layer's attention is drawn while the
    job runs (the views are not held up until it ends), and the map arrives by itself when the job is done."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from analyses import activation_patching
    from tests.test_explore import computed, figure

    slow = activation_patching.measure_cells

    def measure_cells(*args, **kwargs):  # a step takes a while, as on a real language model
        time.sleep(0.4)
        return slow(*args, **kwargs)

    monkeypatch.setattr(activation_patching, "measure_cells", measure_cells)  # the map's steps
    app = build_app(explorer)
    with in_chromium(app.server) as (browser, url):
        wait = WebDriverWait(browser, 120, poll_frequency=0.2)
        browser.get(url + "/")
        wait.until(lambda d: computed(d, "attention"), message="attention drawn")
        browser.find_element(By.ID, "patch-run").click()
        wait.until(lambda d: " cells measured exactly (" in d.find_element(By.ID, "patch-progress").text,
                   message="progress shown")
        assert browser.find_element(By.ID, "patch-cancel").is_displayed()
        job = app.patching_jobs.latest()
        browser.find_element(By.CSS_SELECTOR, "#layer input[value='1']").click()
        wait.until(lambda d: "layer 1" in (figure(d, "attention")["title"] or ""), message="another layer while patching")
        assert job.state == "running", job.line()  # drawn before the job ended, not after it
        wait.until(lambda d: figure(d, "patch-map") is not None and figure(d, "patch-map")["data"]
                   and figure(d, "patch-map")["data"][0].get("y", [None])[0] == "resid before L0", message="map arrived")
        assert "done in" in browser.find_element(By.ID, "patch-progress").text
        assert not browser.find_element(By.ID, "patch-cancel").is_displayed()


def test_times_are_written_as_a_person_reads_them():
    from interp.explore.jobs import duration

    assert [duration(s) for s in (0.4, 59.4, 60, 427, 3599, 18417)] == [
        "0 s", "59 s", "1 min 00 s", "7 min 07 s", "59 min 59 s", "5 h 07 min"]


@pytest.mark.slow
def test_a_press_while_a_cancel_is_pending_starts_the_job_again_in_chromium(explorer, monkeypatch):
    """Until its first site is done the line says an estimate follows it (not "0 of N (0%)" alone); "patch" pressed
    while a cancel is pending starts the job again once the cancelled one stops (it did nothing, the map saying it
    ran), and the map's "runs in the background" is whole, not cut at both ends."""
    import threading

    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from analyses import activation_patching
    from tests.test_explore import boxes, computed, figure

    slow, calls, hold = activation_patching.measure_cells, [], threading.Event()

    def measure_cells(*args, **kwargs):  # the first step takes a while; the second one until the test lets it end
        calls.append(1)
        time.sleep(3) if len(calls) == 1 else hold.wait(60)
        return slow(*args, **kwargs)

    monkeypatch.setattr(activation_patching, "measure_cells", measure_cells)  # the map's steps
    app = build_app(explorer)
    with in_chromium(app.server) as (browser, url):
        try:
            browser.set_window_size(1280, 800)
            wait = WebDriverWait(browser, 120, poll_frequency=0.1)
            browser.get(url + "/")
            wait.until(lambda d: computed(d, "attention"), message="attention drawn")
            browser.find_element(By.ID, "patch-run").click()
            progress = lambda d: d.find_element(By.ID, "patch-progress").text  # noqa: E731
            wait.until(lambda d: "the first of them is running (an estimate of the time left follows it)" in progress(d),
                       message="the line before the first site is done")
            wait.until(lambda d: "runs in the background" in ((figure(d, "patch-map") or {}).get("notes") or ""))
            frame = boxes(browser, "#patch-map .main-svg")[0]
            note = boxes(browser, "#patch-map .annotation")[0]
            assert frame["left"] <= note["left"] and note["right"] <= frame["right"]  # the sentence whole
            wait.until(lambda d: "s left" in progress(d), message="an estimate once a site is done")
            first = app.patching_jobs.latest()
            browser.find_element(By.ID, "patch-cancel").click()
            wait.until(lambda d: "cancelling at the next step" in progress(d))
            browser.find_element(By.ID, "patch-run").click()  # while the cancel is pending
            wait.until(lambda d: app.patching_jobs.latest() is not first, message="a new job")
            assert app.patching_jobs.latest().after is first and first.state == "running"
            wait.until(lambda d: "starts once the cancelled one stops" in progress(d), message="the new job waits")
            hold.set()  # the cancelled job's site ends: it stops, and the new job runs
            wait.until(lambda d: (figure(d, "patch-map") or {}).get("data"), message="the map of the job started again")
            assert first.state == "cancelled" and app.patching_jobs.latest().state == "done"
            wait.until(lambda d: "done in" in progress(d))
        finally:
            hold.set()  # a job still waiting on it ends


@pytest.mark.slow
def test_the_opening_page_counts_the_conversion_s_steps_once_in_chromium(tmp_path, monkeypatch):
    """The opening page in the browser: no "step 1 of 1" before the conversion's "step 1 of 4", a moving bar while no
    step is done (the dequantising step is a minute), no error for the browser's favicon request."""
    import threading
    import urllib.request

    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from interp.explore.lm_opening import Opening
    from models import gguf_model

    tokenizer, go_on = word_tokenizer(), threading.Event()

    def read_gguf(path):
        assert go_on.wait(120)
        return tiny("llama-gqa", len(tokenizer)), tokenizer

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(gguf_model, "read_gguf", read_gguf)
    monkeypatch.setattr(gguf_model, "check_gguf", lambda path: None)
    (tmp_path / "tiny.gguf").write_bytes(b"GGUF not a real one: its reading is replaced")
    opening = Opening(str(tmp_path / "tiny.gguf"))
    with in_chromium(opening) as (browser, url):
        try:
            browser.get(url + "/")
            shown = []
            opening.start()
            wait = WebDriverWait(browser, 120, poll_frequency=0.05)

            def seen(d):
                shown.append(d.find_element(By.ID, "time").text)
                return "dequantising" in d.find_element(By.ID, "what").text
            wait.until(seen, message="the dequantising step shown")
            time.sleep(1)
            assert "step 1 of 4" in browser.find_element(By.ID, "time").text
            assert not any(" of 1;" in line for line in shown), shown  # no count that starts again
            assert browser.execute_script("return document.getElementById('bar').hasAttribute('value')") is False  # moving
            with urllib.request.urlopen(url + "/favicon.ico") as answer:
                assert answer.status == 204
            go_on.set()
            wait.until(lambda d: d.find_elements(By.ID, "attention"), message="the page becomes the explorer")
        finally:
            go_on.set()  # the conversion thread is never left waiting
