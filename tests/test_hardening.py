"""The reliability contract under concurrency and generated inputs (issue 17).

- Two trainers released at the same instant on one run folder: exactly one trains, the other gets
  one line naming the holder's pid, and the folder holds one run (repeated, for fresh runs and for
  ``--resume``).
- Property tests (hypothesis): generated ``interp train`` arguments and generated checkpoint metadata
  documents; whenever the exit status is not 0 there is one line on stderr, no traceback (an
  exception escaping the CLI fails the test) and no file in the workspace changed.
- A real resume state resumes; Ctrl-C gives the resume hint; the explorer warns when bound beyond
  loopback and refuses malformed requests with a message.
"""
from __future__ import annotations

import json
import os
import shutil
import time

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.cli import fork_cli, run_cli, wait_for
from tests import tiny
from tests.workspace import snapshot

TINY = tiny.cli_args(n_layers=1)


def release_at(moment: float):
    """A ``prepare`` for fork_cli: wait until ``moment`` (time.time()), so two children start together."""
    def wait():
        time.sleep(max(0.0, moment - time.time()))
    return wait


def race(tmp_path, *args_per_child) -> list[tuple[int, int, str]]:
    """(pid, exit status, output) of each child, all released at the same instant."""
    moment = time.time() + 0.5
    children = [(fork_cli(tmp_path / f"child{i}.log", *args, prepare=release_at(moment)), tmp_path / f"child{i}.log")
                for i, args in enumerate(args_per_child)]
    return [(pid, os.WEXITSTATUS(wait_for(pid, 300)), log.read_text()) for pid, log in children]


def one_refused(results) -> int:
    """The index of the winner; the loser printed one line naming the winner's pid."""
    codes = sorted(code for _, code, _ in results)
    assert codes == [0, 1], results
    winner = next(i for i, (_, code, _) in enumerate(results) if code == 0)
    loser_log = results[1 - winner][2]
    lines = [line for line in loser_log.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in loser_log, loser_log
    assert f"is in use by another training process (pid {results[winner][0]})" in lines[0], lines[0]
    return winner


@pytest.mark.parametrize("attempt", range(3))
def test_two_trainers_released_together_on_one_folder(tmp_path, monkeypatch, attempt):
    monkeypatch.chdir(tmp_path)
    common = ["train", "--out", "race", *TINY, "--steps", "300", "--batch-size", "8", "--checkpoint-every", "50"]
    results = race(tmp_path, [*common, "--seed", "1"], [*common, "--seed", "2"])
    winner = one_refused(results)
    seed = winner + 1
    record = json.loads((tmp_path / "race" / "run.json").read_text())
    assert record["status"] == "finished" and record["train"]["seed"] == seed
    from interp import checkpoint
    metas = [checkpoint.read(path, tensors=False)[0] for _, path in checkpoint.list_checkpoints(tmp_path / "race")]
    assert metas and {m["seed"] for m in metas} == {seed}, "checkpoints of two runs are interleaved"
    steps = [json.loads(line)["step"] for line in (tmp_path / "race" / "metrics.jsonl").read_text().splitlines()]
    assert steps == sorted(set(steps)), "metrics.jsonl holds two runs' lines"
    assert not (tmp_path / "race" / ".lock").exists()


@pytest.mark.parametrize("attempt", range(2))
def test_two_resumes_released_together(tmp_path, monkeypatch, attempt):
    from interp.recipe import stated
    from interp.train import Trainer, TrainSettings

    monkeypatch.chdir(tmp_path)
    # a run interrupted before its first resume state: --resume trains it from the start
    Trainer.start(tmp_path / "paused",
                  stated(dict(name="bijection", V=6, L=5), "transformer", dict(d_model=16, n_layers=1, n_heads=2),
                         TrainSettings(steps=300, batch_size=8)), progress=False).close()
    results = race(tmp_path, ["train", "--resume", "--out", "paused"], ["train", "--resume", "--out", "paused"])
    one_refused(results)
    assert json.loads((tmp_path / "paused" / "run.json").read_text())["status"] == "finished"


def test_a_real_resume_state_resumes(workspace_template, tmp_path, monkeypatch, capsys):
    shutil.copytree(workspace_template / "paused", tmp_path / "paused")
    monkeypatch.chdir(tmp_path)
    result = run_cli(capsys, "train", "--resume", "--out", "paused")
    assert result.code == 0, result.err
    assert json.loads((tmp_path / "paused" / "run.json").read_text())["status"] == "finished"
    assert (tmp_path / "paused" / "checkpoints" / "step-00000020.safetensors").exists()


def test_a_failed_allocation_is_one_line():
    from interp.cli import out_of_memory

    with pytest.raises(RuntimeError) as caught:
        torch.empty(2 ** 46)  # 2^48 bytes: malloc refuses it even where memory is overcommitted
    assert out_of_memory(caught.value) == ("out of memory (262,144 GiB in one tensor): the model or batch is too big "
                                           "for this machine; use smaller -M sizes, --batch-size or --n")
    assert out_of_memory(ValueError("can't allocate memory")) is None


def test_ctrl_c_gives_the_resume_hint(tmp_path, monkeypatch, capsys):
    from interp import train

    def interrupted(self):
        self.close()
        raise KeyboardInterrupt
    monkeypatch.setattr(train.Trainer, "run", interrupted)
    monkeypatch.chdir(tmp_path)
    result = run_cli(capsys, "train", "--out", "run", *TINY)
    assert result.code == 130
    assert result.err.strip().splitlines()[-1] == "interp: interrupted (a training run continues with --resume)"
    assert "aborted" not in result.err and "Traceback" not in result.err


@pytest.mark.parametrize("host, warned", [("0.0.0.0", True), ("127.0.0.1", False), ("::1", False)])
def test_the_explorer_warns_beyond_loopback(host, warned, tmp_path, monkeypatch, capsys):
    import interp.explore

    monkeypatch.setattr(interp.explore, "serve", lambda *args, **kwargs: None)
    result = run_cli(capsys, "explore", "--ckpt", "whatever", "--host", host, "--port", "48290")
    assert result.code == 0
    assert ("interp: warning: listening on" in result.err) == warned


def test_the_explorer_refuses_malformed_requests(workspace_template, tmp_path):
    from interp.errors import UserError
    from interp.explore import Explorer, parse_tokens
    from interp.explore.attention import attention_view
    from interp.explore.hooks import ablated

    explorer = Explorer(workspace_template / "half-evil")  # its step-10 checkpoint is a pickle
    for text in ("٣", "²", "k1 ¹"):  # Unicode digits that str.isdigit() accepts and int() does not (or should not)
        with pytest.raises(UserError):
            parse_tokens(explorer.task, text)
    corrupt = next(i for i, (step, _) in enumerate(explorer.checkpoints) if step == 10)
    for index in (corrupt, 99, -1, "1", None, 1.5):
        with pytest.raises(UserError):
            explorer.model(index)
    last = len(explorer.checkpoints) - 1
    for choice in ("H9.0", "H0.7", "B٣", "X", 3):
        with pytest.raises(UserError):
            with ablated(explorer, last, [choice]):
                pass
    with pytest.raises(UserError):
        attention_view(explorer, last, explorer.sample(0), 0, [], 5, 0)


# -- property tests ------------------------------------------------------------------------------
ODD = st.sampled_from(["-1", "0", "1", "2", "3", "2.5", "1e308", "-1e-308", "nan", "inf", "9" * 30, "", "abc", "٣",
                       "true", "null", "[1]", "{}", '"x"'])
FLAGS = st.sampled_from(["--steps", "--batch-size", "--lr", "--seed", "--warmup", "--checkpoint-every", "--device"])
SETTING = st.tuples(st.sampled_from(["-T", "-M"]),
                    st.sampled_from(["V", "L", "replacement", "d_model", "n_layers", "n_heads", "colour"]), ODD)
CONTRACT = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def check_contract(result, root, before) -> None:
    if result.code != 0:
        lines = result.err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("interp: error: "), result.err
        assert snapshot(root) == before, "a refused input changed, created or deleted a file"


@CONTRACT
@given(flags=st.lists(st.tuples(FLAGS, ODD), max_size=3), options=st.lists(SETTING, max_size=3))
def test_generated_train_arguments_keep_the_contract(flags, options, tmp_path_factory, capsys):
    root = tmp_path_factory.mktemp("train")
    (root / "notes.txt").write_text("a file\n")
    args = ["train", "--out", str(root / "new-run"), *TINY, "--steps", "2", "--batch-size", "4", "--device", "cpu"]
    for flag, value in flags:
        args += [flag, value]
    for kind, key, value in options:
        args += [kind, f"{key}={value}"]
    before = snapshot(root)
    result = run_cli(capsys, *args)
    check_contract(result, root, before)


def mutations():
    """A change to checkpoint metadata: a key set to an odd JSON value, removed, or nested deeply."""
    values = st.one_of(st.none(), st.booleans(), st.integers(-2 ** 70, 2 ** 70), st.floats(), st.text(max_size=5),
                       st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))
    path = st.sampled_from([("task",), ("arch",), ("model",), ("step",), ("seed",), ("task", "name"), ("task", "V"),
                            ("task", "L"), ("model", "d_model"), ("model", "n_layers"), ("model", "n_heads")])
    return st.tuples(path, st.one_of(values, st.just("<delete>"), st.just("<deep>")))


@CONTRACT
@given(changes=st.lists(mutations(), min_size=1, max_size=3))
def test_generated_metadata_keeps_the_contract(changes, workspace_template, tmp_path_factory, capsys):
    from safetensors.torch import save as save_bytes

    from interp import checkpoint

    meta, tensors = checkpoint.read(workspace_template / "tiny" / "checkpoints" / "step-00000020.safetensors")
    for keys, value in changes:
        holder = meta
        for key in keys[:-1]:
            if not isinstance(holder.get(key), dict):
                holder[key] = {}
            holder = holder[key]
        if value == "<delete>":
            holder.pop(keys[-1], None)
        else:
            holder[keys[-1]] = value
    root = tmp_path_factory.mktemp("meta")
    try:
        raw = json.dumps(meta).replace('"<deep>"', "[" * 100_000 + "]" * 100_000)
    except ValueError:  # NaN is fine for json.dumps; only odd floats hypothesis finds could fail here
        return
    (root / "odd.safetensors").write_bytes(save_bytes(tensors, metadata={"interp": raw}))
    before = snapshot(root)
    cwd = os.getcwd()
    os.chdir(root)
    try:
        result = run_cli(capsys, "run", "calibration", "--ckpt", "odd.safetensors", "--format", "json", "--n", "20")
    finally:
        os.chdir(cwd)
    check_contract(result, root, before)


def test_two_runs_with_one_folder_name_never_share_an_output_folder(workspace_template, tmp_path, monkeypatch,
                                                                     capsys):
    for parent in ("a", "b"):
        shutil.copytree(workspace_template / "tiny", tmp_path / parent / "tiny")
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "figs"
    run = lambda parent: run_cli(capsys, "run", "calibration", "--ckpt", f"{parent}/tiny", "--format", "json",  # noqa: E731
                                 "--out", str(out), "--n", "20")
    first = run("a")
    assert first.code == 0 and (out / "tiny" / "calibration.json").exists()
    second = run("b")
    assert second.code == 0 and "holds the results of" in second.err
    others = [p for p in out.iterdir() if p.name.startswith("tiny-")]
    assert len(others) == 1 and (others[0] / "calibration.json").exists()
    source = lambda folder: json.loads((folder / "calibration.json").read_text())["checkpoint"]  # noqa: E731
    assert source(out / "tiny").startswith("a/") and source(others[0]).startswith("b/")
    again = run("a")  # the same run goes back to its own folder, silently
    assert again.code == 0 and "holds" not in again.err and sorted(p.name for p in out.iterdir()) == sorted(
        ["tiny", others[0].name])
    # a folder written before the marks existed is taken as it is
    (out / "tiny" / ".interp-source").unlink()
    assert run("b").code == 0 and source(out / "tiny").startswith("b/")
