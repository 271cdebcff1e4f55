"""Reliability round five (issue 68): every case a hostile or careless user found, with the exact line they see.

The catalogue rows of tests/test_bad_inputs.py hold the cases a one-line row can show; here are those that need
more: a link planted one level below the folder the user named, for every writer; the results generator given
damaged files; a search whose trial fails, and its corrected rerun; the explorer during a job; bf16 on a CPU that
cannot run it.
"""
from __future__ import annotations

import importlib.util
import json
import re
import os
import threading
import time
from pathlib import Path

import pytest
import torch

from tests import tiny
from tests.cli import run_cli

ROOT = Path(__file__).resolve().parent.parent
LINK = ("the toolkit never writes through a link (it would change the file the link points to): remove it, or "
        "write elsewhere")
TINY_TRAIN = ["--steps", "4", "--batch-size", "4", "--eval-size", "8", "--warmup", "1", *tiny.cli_args()]
# a one-layer tiny search: each trial trains 4 steps
TUNE = ["tune", "--task", "bijection", "-T", "V=3", "-T", "L=2", "--arch", "transformer", "-M", "d_model=8", "-M",
        "n_heads=2", "--steps", "4", "--batch-size", "4", "--eval-size", "8"]


def files_in(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory) -> Path:
    """A two-layer tiny run (4 steps), trained once for the module."""
    from interp.recipe import stated
    from interp.train import TrainSettings, Trainer

    folder = tmp_path_factory.mktemp("runs") / "tiny"
    Trainer.start(folder,
                  stated(dict(name="bijection", **tiny.TASK), "transformer", tiny.MODEL,
                         TrainSettings(steps=4, batch_size=4, warmup=1, eval_every=4, eval_size=8)), device="cpu",
                  progress=False).run()
    return folder


@pytest.fixture
def planted(tmp_path, monkeypatch):
    """In a fresh folder (the current one): ``outside/``, an empty folder, and ``plant(at)``, which puts a link to it
    at ``at`` (its parents made); after the case, ``outside/`` must still be empty."""
    monkeypatch.chdir(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()

    def plant(at: str) -> None:
        Path(at).parent.mkdir(parents=True, exist_ok=True)
        os.symlink(os.path.relpath(outside, Path(at).parent), at)
    yield plant
    assert files_in(outside) == [], "a write followed the planted link out of the folder the user named"


# -- link safety from the named root, one test per writer -----------------------------------------------------------
@pytest.mark.parametrize("analysis", [["calibration", "--n", "8"], ["jacobian-lens", "--n", "8", "--n-fit", "4"]],
                         ids=["calibration", "jacobian-lens"])
def test_an_analysis_refuses_a_link_planted_at_its_run_folder(tiny_run, planted, capsys, analysis):
    """Every analysis exports through one writer (interp.results.write), checked from the --out the user named."""
    planted("o/tiny")
    shown = run_cli(capsys, "run", *analysis[:1], "--ckpt", tiny_run, "--format", "json,html", "--out", "o", *analysis[1:])
    assert (shown.code, shown.err.strip()) == (1, f"interp: error: o/tiny is a symbolic link, not a folder; {LINK}")


def test_training_refuses_a_link_planted_at_its_checkpoints_folder(planted, capsys):
    planted("r/checkpoints")
    shown = run_cli(capsys, "train", "--out", "r", *TINY_TRAIN)
    assert (shown.code, shown.err.strip()) == (1, f"interp: error: r/checkpoints is a symbolic link, not a folder; {LINK}")
    assert files_in(Path("r")) == ["checkpoints"]  # nothing written beside the link either


def test_a_search_refuses_a_link_planted_at_its_trials_folder(planted, capsys):
    planted("search/trials")
    shown = run_cli(capsys, *TUNE, "--out", "search", "--space", "lr=1e-3")
    assert (shown.code, shown.err.strip()) == (1, f"interp: error: search/trials is a symbolic link, not a folder; {LINK}")


def test_a_sweep_refuses_a_link_planted_at_its_runs_folder(planted, capsys):
    planted("sw/runs")
    shown = run_cli(capsys, "sweep", "--task", "bijection", "--axis", "L=2,3", "--archs", "transformer", "-T", "V=4",
                    "-M", "d_model=8", "-M", "n_heads=2", "-M", "n_layers=1", "--steps", "2", "--batch-size", "4",
                    "--n", "8", "--out", "sw")
    assert (shown.code, shown.err.strip()) == (1, f"interp: error: sw/runs is a symbolic link, not a folder; {LINK}")


def test_a_reproduction_refuses_a_link_planted_at_a_run_folder(planted, capsys):
    planted("rr/bijection-mlp-cpu")
    shown = run_cli(capsys, "reproduce", "--only", "bijection", "--archs", "mlp", "--runs", "rr", "--out", "rep")
    assert (shown.code, shown.err.strip()) == (
        1, f"interp: error: rr/bijection-mlp-cpu is a symbolic link, not a folder; {LINK}")


def test_the_listing_cache_never_writes_through_a_link_below_the_cache_root(planted, monkeypatch):
    from interp import manifest

    planted("cache/interp")
    monkeypatch.setenv("XDG_CACHE_HOME", "cache")
    monkeypatch.setattr(manifest, "SHIPPED", Path("no-shipped-manifest.json"))  # so the user's cache is written
    # the listing as built (a stand-in: building the real one takes half a minute; the write is what is tested)
    monkeypatch.setattr(manifest, "build", lambda fp: {"fingerprint": fp, "list": "tasks (defaults): ..."})
    assert manifest.current()["fingerprint"] == manifest.fingerprint()  # listed, only not cached


def test_the_conversion_cache_refuses_a_link_below_the_cache_root(planted, monkeypatch):
    from models import gguf_model

    planted("cache/interp")
    monkeypatch.setenv("XDG_CACHE_HOME", "cache")
    with pytest.raises(gguf_model.ConfigError) as refused:
        gguf_model.writable_cache(gguf_model.cache_folder())
    assert str(refused.value) == ("the conversion cache cache/interp/gguf cannot be written (cache/interp is a "
                                  "symbolic link); set XDG_CACHE_HOME to a folder that can be, before converting")



def test_the_kernel_build_cache_never_builds_through_a_link_below_the_cache_root(planted, monkeypatch, capsys):
    import models.mamba

    planted("cache/interp")
    monkeypatch.setenv("XDG_CACHE_HOME", "cache")
    monkeypatch.delenv("INTERP_BUILD_DIR", raising=False)
    monkeypatch.setattr(models.mamba, "_KERNELS", {})  # this process's build is forgotten for the case
    assert models.mamba.cpu_kernels() is None  # eager torch
    assert capsys.readouterr().err.strip() == (
        "interp: warning: could not build the Mamba CPU kernels (cache/interp is a symbolic link, not a folder of the "
        "build cache); using eager torch instead (the same numbers, more slowly)")

# -- the results generator -----------------------------------------------------------------------------------------
def generator():
    spec = importlib.util.spec_from_file_location("gen_results_r5", ROOT / "docs" / "gen_results.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def pages(tmp_path, monkeypatch):
    """A generator over one page, ``docs/results/src/p.md.in`` in a repository of its own (``tmp_path``), and
    ``run(result, template, page=None, check=False)``: the exit status and stderr of its main()."""
    gen = generator()
    monkeypatch.setattr(gen, "ROOT", tmp_path)
    monkeypatch.setattr(gen, "RESULTS", tmp_path / "docs" / "results")
    monkeypatch.setattr(gen, "SOURCES", tmp_path / "docs" / "results" / "src")
    monkeypatch.setattr(gen, "CARDS", tmp_path / "cards")
    monkeypatch.setattr(gen, "PAGES", ["p"])
    (tmp_path / "docs" / "results" / "src").mkdir(parents=True)

    def run(result: str, template: str, page: str | None = None, check: bool = False):
        (tmp_path / "r.json").write_text(result)
        (tmp_path / "docs" / "results" / "src" / "p.md.in").write_text(template)
        (tmp_path / "docs" / "results" / "p.md").write_text(page if page is not None else "old\n")
        gen.load.cache_clear()
        return gen.main(["--check"] if check else [])
    return run


WHERE = "gen_results: error: docs/results/src/p.md.in: {{ r.json : %s }} in r.json: %s"


@pytest.mark.parametrize("result, template, message", [
    ('{"kl": NaN}', "{{ r.json : kl | .3f }} bits", WHERE % ("kl", "kl is nan, not a finite number")),
    ('{"kl": Infinity}', "{{ r.json : kl | sig3 }} bits", WHERE % ("kl", "kl is inf, not a finite number")),
    ('{"kl": -Infinity}', "{{ r.json : kl }} bits", WHERE % ("kl", "kl is -inf, not a finite number")),
    ('{"acc": NaN}', "{{ r.json : acc | pct.1 }} at step 700", WHERE % ("acc", "acc is nan, not a finite number")),
    ('{"kl": [0.18, NaN, 0.24]}', "{{ r.json : kl.min() | .2f }}–{{ r.json : kl.max() | .2f }}",
     WHERE % ("kl.min()", "an element of 'kl.min()' is nan, not a finite number")),
    ('{"steps": "two hundred"}', "{{ r.json : steps | int }} steps", WHERE % ("steps", 'steps is "two hundred", not a number')),
    ('{"kl": null}', "{{ r.json : kl | .3f }}", WHERE % ("kl", "kl is null, not a number")),
    ('{"kl": null}', "{{ r.json : kl }}", WHERE % ("kl", "kl is null, not a number")),
    ('{"kl": [1, 2]}', "{{ r.json : kl }}", WHERE % ("kl", "kl is [1, 2], not a number")),
    ('{"kl": 0.1', "{{ r.json : kl }}", "gen_results: error: r.json is not valid JSON (Expecting ',' delimiter at "
                                         "line 1 column 11); write the result again"),
    ('', "{{ r.json : kl }}", "gen_results: error: r.json is not valid JSON (Expecting value at line 1 column 1); "
                              "write the result again"),
    ('\x00garbage', "{{ r.json : kl }}", "gen_results: error: r.json is not valid JSON (Expecting value at line 1 "
                                         "column 1); write the result again"),
], ids=["nan", "inf", "-inf", "nan-percent", "nan-in-a-range", "a-word", "null-formatted", "null", "a-list",
        "truncated", "empty", "garbage"])
def test_the_generator_refuses_damage_in_one_line_naming_file_and_key(pages, capsys, result, template, message):
    assert pages(result, template) == 1
    err = capsys.readouterr().err
    assert err.strip() == message and "Traceback" not in err


def test_a_nan_in_a_range_is_refused_not_skipped(pages, capsys):
    """max()/min() skipped a NaN: "0.18–0.24" became "0.18–0.23"."""
    assert pages('{"kl": [0.18, 0.23, NaN]}', "{{ r.json : kl.max() | .2f }}") == 1
    assert capsys.readouterr().err.strip() == ("gen_results: error: docs/results/src/p.md.in: {{ r.json : kl.max() }} "
                                               "in r.json: an element of 'kl.max()' is nan, not a finite number")


def test_check_fails_on_a_page_that_shows_nan_inf_or_an_unformatted_number(pages, capsys):
    for shown in ("KL nan bits", "KL inf bits", "KL 0.1833333333333 bits"):
        assert pages('{"kl": 0.18}', "KL {{ r.json : kl | .2f }} bits", page=shown + "\n", check=True) == 1
        assert capsys.readouterr().err.strip().startswith(f"gen_results: error: docs/results/p.md shows ")
    assert pages('{"kl": 0.18}', "KL {{ r.json : kl | .2f }} bits", page="KL 0.18 bits", check=True) == 0


def test_a_good_page_is_written(pages, tmp_path):
    assert pages('{"kl": 0.18, "name": "soft"}', "KL {{ r.json : kl | .2f }}, {{ r.json : name }}") == 0
    assert (tmp_path / "docs" / "results" / "p.md").read_text() == "KL 0.18, soft"


# -- searches: the whole recipe checked before the first trial; a failed trial never strands the others -------------
@pytest.mark.parametrize("stage, why", [
    ('{"nosuch": 1}', "unknown setting(s) nosuch for task 'bijection'; valid settings: V, L, replacement, paired"),
    ('{"L": 200}', "bijection: L=200 > V=3 needs keys drawn with replacement (pass replacement=True) or L <= V"),
    ('{"V": 9}', None),
])
def test_a_searchs_curriculum_is_checked_before_its_first_trial(tmp_path, monkeypatch, capsys, stage, why):
    monkeypatch.chdir(tmp_path)
    shown = run_cli(capsys, *TUNE, "--out", "search", "--space", "curriculum=off,on", "--curriculum", f"[[2, {stage}]]")
    settings = json.loads(stage)
    why = why or ("changes the vocabulary or the answers of the task; a stage may change only what the model can be "
                  "run on unchanged (sizes, lengths)")
    sep = " " if why.startswith("changes") else ": "
    assert (shown.code, shown.err.strip()) == (1, f"interp: error: trial curriculum=on: curriculum stage {settings}{sep}{why}")
    assert not Path("search").exists()  # no trial trained, nothing written


def test_a_failed_trial_is_marked_failed_and_a_corrected_rerun_continues_the_search(tmp_path, monkeypatch, capsys):
    """The off trial trains, the on trial fails as it trains: the study marks it failed (not running), and the same
    search with a corrected --curriculum continues, its finished trial kept, not retrained."""
    from interp import train as train_module
    from interp.errors import UserError

    monkeypatch.chdir(tmp_path)
    real = train_module.Trainer._run

    def fails_with_a_curriculum(self):
        if self.settings.curriculum:
            raise UserError("the on trial fails as it trains")
        return real(self)
    monkeypatch.setattr(train_module.Trainer, "_run", fails_with_a_curriculum)
    search = [*TUNE, "--out", "search", "--space", "curriculum=off,on"]
    shown = run_cli(capsys, *search, "--curriculum", '[[2, {"L": 1}]]')
    assert (shown.code, shown.err.strip().splitlines()[-1]) == (1, "interp: error: the on trial fails as it trains")
    states = {row["name"]: (row["state"], row["note"]) for row in json.loads(Path("search/trials.json").read_text())}
    assert states == {"curriculum=off": ("complete", None),
                      "curriculum=on": ("fail", "failed: the on trial fails as it trains")}
    finished = Path("search/trials/curriculum=off/run.json").stat().st_mtime_ns
    monkeypatch.setattr(train_module.Trainer, "_run", real)
    shown = run_cli(capsys, *search, "--curriculum", '[[2, {"L": 2}]]')
    assert shown.code == 0, shown.err
    rows = json.loads(Path("search/tune.json").read_text())["metrics"]["trials"]
    assert sorted((r["name"], r["state"]) for r in rows) == [("curriculum=off", "complete"), ("curriculum=on", "complete")]
    assert Path("search/trials/curriculum=off/run.json").stat().st_mtime_ns == finished  # kept, not retrained


def test_a_rerun_that_changes_a_finished_trials_curriculum_says_which_setting_differs(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    search = [*TUNE, "--out", "search", "--space", "curriculum=on"]
    assert run_cli(capsys, *search, "--curriculum", '[[2, {"L": 1}]]').code == 0
    shown = run_cli(capsys, *search, "--curriculum", '[[2, {"L": 2}]]')
    assert (shown.code, shown.err.strip()) == (1, (
        "interp: error: study 'bijection-transformer-cpu' in sqlite:///" + str(tmp_path / "search" / "study.db")
        + " was made for another search (curriculum_on was [[2, {\"L\": 1}]], now [[2, {\"L\": 2}]]; a space may only "
        "add values to the keys it has); to keep its finished trials, rerun with its settings, or give another --out "
        "or --study for a new search"))


MOVED = "interp: error: --moved continues a search copied here, and a search's folder holds tune.json, trials, study.db; "


@pytest.mark.parametrize("folder, made, message", [
    ("nowhere", [], MOVED + "nowhere does not exist: check the path, or leave out --moved to start a new search"),
    ("empty", ["empty/"], MOVED + "empty holds none of them: check the path, or leave out --moved to start a new search"),
    ("run", ["run/run.json", "run/metrics.jsonl"], MOVED + "run holds run.json, a training run's: give the search's folder"),
], ids=["missing", "empty", "a-training-run"])
def test_moved_refuses_what_is_not_a_search(tmp_path, monkeypatch, capsys, folder, made, message):
    monkeypatch.chdir(tmp_path)
    for path in made:
        if path.endswith("/"):
            Path(path).mkdir()
        else:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            Path(path).write_text("{}\n")
    before = files_in(tmp_path)
    shown = run_cli(capsys, *TUNE, "--out", folder, "--space", "lr=1e-3", "--moved")
    assert (shown.code, shown.err.strip()) == (1, message)
    assert files_in(tmp_path) == before  # no study.db, trials/ nor tune.json written into it


# -- the Jacobian lens: one check of its fit for --ckpt and --model --------------------------------------------------
def test_the_jacobian_lens_on_one_layer_names_the_missing_layer(tmp_path, monkeypatch, capsys):
    from interp.recipe import stated
    from interp.train import TrainSettings, Trainer

    monkeypatch.chdir(tmp_path)
    Trainer.start("one",
                  stated(dict(name="bijection", **tiny.TASK), "transformer", tiny.MODEL | {"n_layers": 1},
                         TrainSettings(steps=2, batch_size=4, warmup=1, eval_every=2, eval_size=8)), device="cpu",
                  progress=False).run()
    shown = run_cli(capsys, "run", "jacobian-lens", "--ckpt", "one", "--n", "8", "--n-fit", "4")
    assert (shown.code, shown.err.strip()) == (1, (
        "interp: error: the Jacobian lens carries each layer below the last to the last, and this model has 1 layer: "
        "there is no layer to fit (it needs 2 or more layers)"))


@pytest.fixture(scope="module")
def language_model(tmp_path_factory) -> Path:
    from tests.tiny_language_models import saved

    return saved("gpt-neox", tmp_path_factory.mktemp("lm") / "tiny-lm")


def test_the_jacobian_lens_skips_short_prompts_on_a_language_model(language_model, tmp_path, capsys):
    """--skip-first 16, as the help suggests for text: prompts no longer than that are left out of the fit (a
    torch.arange traceback before), the longer ones fitted."""
    shown = run_cli(capsys, "run", "jacobian-lens", "--model", language_model, "--skip-first", "16", "--per-shot", "1",
                    "--format", "json", "--out", tmp_path)
    assert shown.code == 0, shown.err
    assert json.loads((tmp_path / "tiny-lm" / "jacobian-lens.json").read_text())["metrics"]["skip_first"] == 16


def test_the_jacobian_lens_checks_skip_first_on_a_language_model_as_on_a_run(language_model, tmp_path, capsys):
    shown = run_cli(capsys, "run", "jacobian-lens", "--model", language_model, "--skip-first", "1000", "--per-shot",
                    "1", "--format", "json", "--out", tmp_path)
    assert shown.code == 1 and "Traceback" not in shown.err
    assert re.fullmatch(r"interp: error: --skip-first 1000 leaves no position of the fitting prompts \(the longest has "
                        r"(\d+) tokens\) to fit on \(at most --skip-first (\d+) leaves one\)",
                        shown.err.strip().splitlines()[-1])  # (after the model's loading bar)
    assert not (tmp_path / "tiny-lm").exists()


# -- bf16 on a CPU without bf16 kernels --------------------------------------------------------------------------
NO_BF16 = "could not create a primitive descriptor for the LSTM forward propagation primitive"


@pytest.fixture
def cpu_without_bf16_lstm(monkeypatch):
    """oneDNN's LSTM on a CPU without avx512_bf16: the forward pass under bf16 autocast raises (as on an AMD EPYC)."""
    real = torch.nn.LSTM.forward

    def forward(self, *args, **kwargs):
        if torch.is_autocast_enabled("cpu"):
            raise RuntimeError(NO_BF16)
        return real(self, *args, **kwargs)
    monkeypatch.setattr(torch.nn.LSTM, "forward", forward)


def test_bf16_the_cpu_cannot_run_falls_back_to_float32_in_one_line(cpu_without_bf16_lstm, tmp_path, monkeypatch,
                                                                      capsys):
    monkeypatch.chdir(tmp_path)
    shown = run_cli(capsys, "train", "--task", "bijection", "--arch", "lstm", "--bf16", "--steps", "2",
                    "--eval-size", "16")
    assert shown.code == 0, shown.err
    warned = [line for line in shown.err.splitlines() if "bf16" in line]
    assert warned == [f"warning: this machine cannot train a lstm under bf16 autocast ({NO_BF16}); it trains in "
                      f"float32 instead (run.json records bf16 false)"]
    assert json.loads(Path("runs/bijection-lstm-cpu/run.json").read_text())["bf16"] is False


@pytest.mark.slow  # a minute: the step profile runs five variants of a recall step and an evaluation
def test_the_step_profile_has_no_bf16_ratio_where_the_cpu_cannot_run_bf16(cpu_without_bf16_lstm, monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import step_profile

    row = step_profile.profile("recall", "lstm", "cpu", 1, 4)
    assert row["bf16"] == "n/a" and row["step"] > 0


# -- the explorer --------------------------------------------------------------------------------------------------
TRAVERSAL = "/_dash-component-suites/..%2f..%2f..%2fetc%2fpasswd"


def test_the_wind_tunnel_explorer_answers_a_path_out_of_its_assets_with_404(tiny_run):
    from interp.explore import Explorer, build_app

    app = build_app(Explorer(tiny_run, n_calibration=8, n_geometry=8))
    for path in (TRAVERSAL, "/_dash-component-suites/nosuch/x.js"):
        answer = app.server.test_client().get(path)
        assert answer.status_code == 404
        assert answer.get_data(as_text=True).startswith("no such file: ")


def test_the_language_model_explorer_answers_a_path_out_of_its_assets_with_404():
    from interp.explore.lm_app import build_app
    from interp.explore.lm_state import LanguageExplorer
    from models.language_model import LanguageModel, from_hugging_face
    from tests.tiny_language_models import tiny as tiny_lm, word_tokenizer

    tokenizer = word_tokenizer()
    lm = LanguageModel(from_hugging_face(tiny_lm("llama-gqa", vocab_size=len(tokenizer))), "tiny", tokenizer)
    answer = build_app(LanguageExplorer(lm)).server.test_client().get(TRAVERSAL)
    assert answer.status_code == 404 and answer.get_data(as_text=True).startswith("no such file: ")


def test_a_patching_job_does_not_hold_the_explorers_lock(tiny_run, monkeypatch):
    """While a wind-tunnel patching job runs (slowed here to 0.2 s a site), another view takes the explorer's lock at
    once: the job patches its own copy of the model."""
    import interp.explore.patching as patching
    from interp.explore import Explorer
    from interp.explore.pairs import WindTunnelPairs

    explorer = Explorer(tiny_run, n_calibration=8, n_geometry=8)
    source = WindTunnelPairs(explorer)
    site = threading.Event()
    real = patching.SiteAnswers.update

    def slow(self, *args, **kwargs):
        site.set()
        time.sleep(0.2)
        return real(self, *args, **kwargs)
    monkeypatch.setattr(patching.SiteAnswers, "update", slow)
    job = patching.PatchingView(source).start(source.kinds[0], None, (["H0.1"], [], "zero"), 1,
                                              {"tokens": explorer.sample(0), "seed": 0})
    assert site.wait(60)
    waited = time.monotonic()
    assert explorer.lock.acquire(timeout=5)
    waited = time.monotonic() - waited
    explorer.lock.release()
    assert job.state == "running" and waited < 0.1
    job.wait(120)
    assert job.state == "done"
    assert not any(explorer.model(1).hook_dict[name]._forward_hooks for name in explorer.model(1).hook_dict)


def test_a_patch_on_a_one_token_sequence_is_one_sentence(tiny_run):
    from interp.explore import Explorer
    from interp.explore.pairs import WindTunnelPairs
    from interp.explore.patching import PatchingView
    from interp.errors import UserError

    explorer = Explorer(tiny_run, n_calibration=8, n_geometry=8)
    source = WindTunnelPairs(explorer)
    with pytest.raises(UserError) as refused:
        PatchingView(source).computed(source.kinds[0], None, ([], [], "zero"), 1, {"tokens": [4], "seed": None})
    assert str(refused.value) == ("the bijection corruption changes a whole sequence of 9 tokens, and this one has 1; "
                                  "patch a full sequence (sample one by seed, or type all of it)")


def test_the_folder_the_user_named_may_itself_be_a_link(tiny_run, tmp_path, monkeypatch, capsys):
    """Only the levels below the named folder are checked: a --out that is itself a link (a scratch disk) is the
    user's choice, and every writer writes through it."""
    monkeypatch.chdir(tmp_path)
    for name in ("figures", "search", "run"):
        (tmp_path / "disk" / name).mkdir(parents=True)
        os.symlink(f"disk/{name}", name)
    assert run_cli(capsys, "run", "calibration", "--ckpt", tiny_run, "--format", "json", "--out", "figures",
                   "--n", "8").code == 0
    assert run_cli(capsys, *TUNE, "--out", "search", "--space", "lr=1e-3").code == 0
    assert run_cli(capsys, "train", "--out", "run", *TINY_TRAIN).code == 0
    assert {"figures/tiny/calibration.json", "search/tune.json", "run/run.json"} <= set(files_in(tmp_path / "disk"))



def test_a_refused_page_leaves_every_page_as_it_was(tmp_path, monkeypatch, capsys):
    """Every page is rendered before the first is written: a good page before a damaged one is not rewritten."""
    gen = generator()
    monkeypatch.setattr(gen, "ROOT", tmp_path)
    monkeypatch.setattr(gen, "RESULTS", tmp_path / "docs" / "results")
    monkeypatch.setattr(gen, "SOURCES", tmp_path / "docs" / "results" / "src")
    monkeypatch.setattr(gen, "CARDS", tmp_path / "cards")
    monkeypatch.setattr(gen, "PAGES", ["a", "b"])
    (tmp_path / "docs" / "results" / "src").mkdir(parents=True)
    (tmp_path / "r.json").write_text('{"good": 0.5, "bad": NaN}')
    for name, key in (("a", "good"), ("b", "bad")):
        (tmp_path / "docs" / "results" / "src" / f"{name}.md.in").write_text("{{ r.json : %s | .2f }}" % key)
        (tmp_path / "docs" / "results" / f"{name}.md").write_text("old\n")
    assert gen.main([]) == 1
    assert "Traceback" not in capsys.readouterr().err
    assert [(tmp_path / "docs" / "results" / f"{n}.md").read_text() for n in "ab"] == ["old\n", "old\n"]


def test_a_jobs_unexpected_error_is_one_sentence_in_the_panel():
    from interp.explore.jobs import Jobs

    def work(job):
        raise IndexError("index 1 is out of bounds for dimension 1 with size 1\nmore detail")
    job = Jobs().start("key", "activation patching", work)
    job.wait(10)
    assert job.line() == ("activation patching: stopped on an internal error (IndexError: index 1 is out of bounds for "
                          "dimension 1 with size 1)")


def test_a_study_stranded_by_an_earlier_version_continues_with_the_corrected_curriculum(tmp_path, monkeypatch,
                                                                                         capsys):
    """Before round five a refused trial stayed running, its worker gone: the corrected rerun takes it up again. Its
    run folder, written with the old stages, is named with the setting that differs; moved away, the trial trains."""
    import optuna

    from interp import train as train_module

    monkeypatch.chdir(tmp_path)
    real = train_module.Trainer._run

    def killed_with_a_curriculum(self):
        if self.settings.curriculum:
            raise KeyboardInterrupt  # as the old refusal left it: running
        return real(self)
    monkeypatch.setattr(train_module.Trainer, "_run", killed_with_a_curriculum)
    search = [*TUNE, "--out", "search", "--space", "curriculum=off,on"]
    assert run_cli(capsys, *search, "--curriculum", '[[2, {"L": 1}]]').code != 0
    study = optuna.load_study(study_name="bijection-transformer-cpu", storage=f"sqlite:///{tmp_path}/search/study.db")
    running = [t for t in study.get_trials() if t.state.name == "RUNNING"]
    assert len(running) == 1
    study._storage.set_trial_user_attr(running[0]._trial_id, "pid", 2 ** 22 + 7)  # its worker has ended
    monkeypatch.setattr(train_module.Trainer, "_run", real)
    shown = run_cli(capsys, *search, "--curriculum", '[[2, {"L": 2}]]')
    assert (shown.code, shown.err.strip().splitlines()[-1]) == (1, (
        "interp: error: search/trials/curriculum=on holds a run of another recipe than this search's trial "
        "curriculum=on (train.curriculum [[2, {\"L\": 1}]] there, [[2, {\"L\": 2}]] now); move it away to train the "
        "trial with this recipe (the other trials are kept), or use another --out"))
    os.rename("search/trials/curriculum=on", "old-on")
    assert run_cli(capsys, *search, "--curriculum", '[[2, {"L": 2}]]').code == 0
    rows = json.loads(Path("search/tune.json").read_text())["metrics"]["trials"]
    assert sorted((r["name"], r["state"]) for r in rows) == [("curriculum=off", "complete"), ("curriculum=on", "complete")]
