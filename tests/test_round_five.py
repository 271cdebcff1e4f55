"""Reliability round five (issue 68): every case a hostile or careless user found, with the exact line they see.

The catalogue rows of tests/test_bad_inputs.py hold the cases a one-line row can show; here are those that need
more: a link planted one level below the folder the user named, for every writer; the results generator given
damaged files; a search whose trial fails, and its corrected rerun; the explorer during a job; bf16 on a CPU that
cannot run it.
"""
from __future__ import annotations

import importlib.util
import json
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
    from interp.train import TrainSettings, Trainer

    folder = tmp_path_factory.mktemp("runs") / "tiny"
    Trainer(folder, dict(name="bijection", **tiny.TASK), "transformer", tiny.MODEL,
            TrainSettings(steps=4, batch_size=4, warmup=1, eval_every=4, eval_size=8), device="cpu",
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
def test_an_analysis_refuses_a_link_planted_at_its_run_folder(tiny_run, planted, capsys):
    planted("o/tiny")
    shown = run_cli(capsys, "run", "calibration", "--ckpt", tiny_run, "--format", "json,html", "--out", "o", "--n", "8")
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
    assert manifest.current()["fingerprint"] == manifest.fingerprint()  # listed, only not cached


def test_the_conversion_cache_refuses_a_link_below_the_cache_root(planted, monkeypatch):
    from models import gguf_model

    planted("cache/interp")
    monkeypatch.setenv("XDG_CACHE_HOME", "cache")
    with pytest.raises(gguf_model.ConfigError) as refused:
        gguf_model.writable_cache(gguf_model.cache_folder())
    assert str(refused.value) == ("the conversion cache cache/interp/gguf cannot be written (cache/interp is a "
                                  "symbolic link); set XDG_CACHE_HOME to a folder that can be, before converting")


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
