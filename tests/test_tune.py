"""interp tune: an Optuna search of real (tiny) training runs, that resumes after a kill and shares its
study between worker processes."""
import json
import os
import signal
import time

import pytest

from interp import results

from interp.tune import parse_space
from interp.errors import UserError
from tests.cli import fork_cli, run_cli, wait_for

TINY = ["--task", "bijection", "-T", "V=3", "-T", "L=2", "--arch", "transformer", "-M", "d_model=8", "-M", "n_heads=2",
        "--batch-size", "4", "--eval-size", "8"]


def study(out):
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.load_study(study_name="bijection-transformer-cpu", storage=f"sqlite:///{out / 'study.db'}")


def test_a_tiny_search_trains_every_trial_with_one_budget_and_resumes(tmp_path, capsys):
    out = tmp_path / "tune"
    result = run_cli(capsys, "tune", *TINY, "--steps", "6", "--out", out, "--pruner", "none",
                     "--space", "lr=1e-3,1e-2", "warmup=0,2")
    assert result.code == 0, result.err
    assert "budget per trial: 6 steps x 4 sequences; 4 of 4 trials done" in result.out
    summary = results.read(out / "tune.json", "tune")["metrics"]
    assert summary["complete"] and summary["best"] is not None and summary["direction"] == "minimize"
    rows = summary["trials"]
    assert sorted(r["name"] for r in rows) == ["lr=1e-2_warmup=0", "lr=1e-2_warmup=2", "lr=1e-3_warmup=0",
                                                "lr=1e-3_warmup=2"]
    for row in rows:  # every trial is an interp train run with the search's budget and its own settings
        run = json.loads((out / "trials" / row["name"] / "run.json").read_text())
        assert run["status"] == "finished" and run["train"]["steps"] == 6 and run["train"]["batch_size"] == 4
        assert run["train"]["lr"] == float(row["params"]["lr"]) and run["train"]["warmup"] == int(row["params"]["warmup"])
        assert run["model"]["d_model"] == 8 and row["score"] == run["final"]["entropy_mae_bits"]
        assert row["state"] == "complete" and row["steps_trained"] == 6
    assert len((out / "trials.csv").read_text().splitlines()) == 5
    # the same command again trains nothing
    mtime = (out / "trials" / "lr=1e-3_warmup=0" / "run.json").stat().st_mtime
    again = run_cli(capsys, "tune", *TINY, "--steps", "6", "--out", out, "--pruner", "none",
                    "--space", "lr=1e-3,1e-2", "warmup=0,2")
    assert again.code == 0 and (out / "trials" / "lr=1e-3_warmup=0" / "run.json").stat().st_mtime == mtime
    assert len(study(out).trials) == 4
    # another budget in the same folder is refused, in one line
    other = run_cli(capsys, "tune", *TINY, "--steps", "7", "--out", out, "--pruner", "none",
                    "--space", "lr=1e-3,1e-2", "warmup=0,2")
    assert other.code == 1 and "made for another search" in other.err and "Traceback" not in other.err
    # a space with another key is refused; one more value on a key it has widens the search: only it runs
    keyed = run_cli(capsys, "tune", *TINY, "--steps", "6", "--out", out, "--pruner", "none",
                    "--space", "lr=1e-3,1e-2", "warmup=0,2", "weight_decay=0")
    assert keyed.code == 1 and "(space was {" in keyed.err
    wider = run_cli(capsys, "tune", *TINY, "--steps", "6", "--out", out, "--pruner", "none",
                    "--space", "lr=1e-3,1e-2,3e-2", "warmup=0,2")
    assert wider.code == 0, wider.err
    assert (out / "trials" / "lr=1e-3_warmup=0" / "run.json").stat().st_mtime == mtime
    summary = results.read(out / "tune.json", "tune")["metrics"]
    assert summary["space"]["lr"] == ["1e-3", "1e-2", "3e-2"] and len(study(out).trials) == 6
    assert {r["name"] for r in summary["trials"] if r["state"] == "complete"} >= {"lr=3e-2_warmup=0", "lr=3e-2_warmup=2"}


@pytest.mark.slow
def test_the_median_pruner_stops_a_trial_that_is_behind(tmp_path, capsys):
    out = tmp_path / "tune"
    result = run_cli(capsys, "tune", *TINY, "--steps", "200", "--out", out, "--prune-after", "0",
                     "--space", "lr=1e-2,3e-2,1e-6")
    assert result.code == 0, result.err
    rows = {r["name"]: r for r in results.read(out / "tune.json", "tune")["metrics"]["trials"]}
    assert rows["lr=1e-6"]["state"] == "pruned" and rows["lr=1e-6"]["steps_trained"] == 100
    assert rows["lr=1e-2"]["state"] == rows["lr=3e-2"]["state"] == "complete"
    kept = json.loads((out / "trials" / "lr=1e-6" / "run.json").read_text())  # its run folder stays, resumable
    assert kept["status"] == "running" and (out / "trials" / "lr=1e-6" / "resume.safetensors").exists()
    assert results.read(out / "tune.json", "tune")["metrics"]["best"]["name"] in ("lr=1e-2", "lr=3e-2")


@pytest.mark.slow
def test_a_killed_worker_resumes_its_trial_from_the_run_folder(tmp_path):
    out = tmp_path / "tune"
    args = ["tune", *TINY, "--steps", "400", "--out", out, "--space", "lr=1e-3"]
    pid = fork_cli(tmp_path / "first.log", *args)
    resume_state = out / "trials" / "lr=1e-3" / "resume.safetensors"
    deadline = time.time() + 120
    while not resume_state.exists() and time.time() < deadline:  # written at step 100
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    wait_for(pid)
    # as if written before the schedule's decay was a setting: the trial is still this search's, at its default
    record = out / "trials" / "lr=1e-3" / "run.json"
    written = json.loads(record.read_text())
    del written["train"]["decay"]
    record.write_text(json.dumps(written))
    assert wait_for(fork_cli(tmp_path / "second.log", *args)) == 0, (tmp_path / "second.log").read_text()
    run = json.loads((out / "trials" / "lr=1e-3" / "run.json").read_text())
    assert run["status"] == "finished" and run.get("resumes")  # continued, not started over
    trials = study(out).trials
    assert [t.state.name for t in trials] == ["COMPLETE"]  # the same trial, continued by the next worker
    assert trials[0].user_attrs["note"] == "its worker was killed; resumed"
    assert trials[0].user_attrs["params"] == {"lr": "1e-3"}
    assert max(trials[0].intermediate_values) == 400


@pytest.mark.slow
def test_a_search_copied_from_a_machine_that_is_gone_continues_its_running_trial_with_moved(tmp_path, capsys):
    out = tmp_path / "tune"
    args = ["tune", *TINY, "--steps", "400", "--out", out, "--space", "lr=1e-3"]
    pid = fork_cli(tmp_path / "first.log", *args)
    resume_state = out / "trials" / "lr=1e-3" / "resume.safetensors"
    deadline = time.time() + 120
    while not resume_state.exists() and time.time() < deadline:
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    wait_for(pid)
    running = study(out).trials[0]
    study(out)._storage.set_trial_user_attr(running._trial_id, "host", "a-lent-gpu-that-is-gone")  # as if copied here
    run_cli(capsys, *args)  # without --moved another machine's trial is not this worker's to take
    assert [t.state.name for t in study(out).trials] == ["RUNNING"]
    run_cli(capsys, *args, "--moved")
    trial = study(out).trials[0]
    assert trial.state.name == "COMPLETE" and trial.user_attrs["note"] == "its worker was killed; resumed"
    assert trial.user_attrs["host"] != "a-lent-gpu-that-is-gone" and max(trial.intermediate_values) == 400
    run = json.loads((out / "trials" / "lr=1e-3" / "run.json").read_text())
    assert run["status"] == "finished" and run.get("resumes")  # continued from its run folder, not started over


@pytest.mark.slow
def test_killed_trials_resume_one_per_worker(tmp_path):
    # two workers killed mid-trial, two started again: each continues one of the two trials (the first to
    # start must not claim both, leaving the other worker with nothing to do)
    out = tmp_path / "tune"
    args = ["tune", *TINY, "--steps", "400", "--out", out, "--space", "lr=1e-3,2e-3"]
    pids = [fork_cli(tmp_path / f"first-{i}.log", *args) for i in range(2)]
    states = [out / "trials" / name / "resume.safetensors" for name in ("lr=1e-3", "lr=2e-3")]
    deadline = time.time() + 180
    while not all(state.exists() for state in states) and time.time() < deadline:
        time.sleep(0.05)
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
        wait_for(pid)
    again = [fork_cli(tmp_path / f"again-{i}.log", *args, "--max-trials", "1") for i in range(2)]
    assert [wait_for(pid) for pid in again] == [0, 0]
    trials = study(out).trials
    assert sorted(t.state.name for t in trials if t.user_attrs.get("params")) == ["COMPLETE", "COMPLETE"]
    assert all(t.user_attrs["note"] == "its worker was killed; resumed" for t in trials if t.state.name == "COMPLETE")


def test_two_workers_share_one_study(tmp_path):
    out = tmp_path / "tune"
    args = ["tune", *TINY, "--steps", "20", "--out", out, "--space", "lr=1e-3,2e-3,5e-3,1e-2", "--max-trials", "2"]
    first = fork_cli(tmp_path / "a.log", *args)
    second = fork_cli(tmp_path / "b.log", *args)
    assert wait_for(first) == 0, (tmp_path / "a.log").read_text()
    assert wait_for(second) == 0, (tmp_path / "b.log").read_text()
    done = [t for t in study(out).trials if t.state.name == "COMPLETE"]
    assert sorted(t.user_attrs["params"]["lr"] for t in done) == ["1e-2", "1e-3", "2e-3", "5e-3"]  # each trial once
    assert {t.user_attrs["pid"] for t in done} == {first, second}  # two processes, two trials each
    summary = results.read(out / "tune.json", "tune")["metrics"]
    assert summary["complete"] and len(summary["trials"]) == 4


@pytest.mark.parametrize("space, message", [
    (["lr=1e-3", "steps=10,20"], "the budget and the evaluation are the same for every trial"),
    (["colour=red"], "not a training setting nor a transformer model setting"),
    (["curriculum=on"], "has no curriculum to turn on"),
    (["lr"], "--space takes KEY=V1,V2"),
    (["lr=1e-3,1e-3"], "lists a value twice"),
    (["lr=-1"], "lr must be a finite positive number"),
])
def test_a_bad_space_is_one_line(tmp_path, capsys, space, message):
    result = run_cli(capsys, "tune", *TINY, "--steps", "2", "--out", tmp_path / "t", "--space", *space)
    assert result.code == 1 and message in result.err and "Traceback" not in result.err
    assert not (tmp_path / "t" / "trials").exists()


def test_curriculum_gives_the_stages_of_curriculum_on_for_a_task_whose_preset_has_none(tmp_path, capsys):
    out = tmp_path / "t"
    done = run_cli(capsys, "tune", *TINY, "--steps", "6", "--out", out, "--pruner", "none", "--space", "curriculum=on,off",
                   "--curriculum", '[[3, {"L": 1}]]')
    assert done.code == 0, done.err
    on = json.loads((out / "trials" / "curriculum=on" / "run.json").read_text())["train"]["curriculum"]
    off = json.loads((out / "trials" / "curriculum=off" / "run.json").read_text())["train"]["curriculum"]
    assert on == [[3, {"L": 1}]] and off == []
    assert results.read(out / "tune.json", "tune")["metrics"]["curriculum_on"] == [[3, {"L": 1}]]
    # stages with no curriculum=on in the space, and stages past the budget, are one line each
    alone = run_cli(capsys, "tune", *TINY, "--steps", "6", "--out", tmp_path / "u", "--space", "lr=1e-3",
                    "--curriculum", '[[3, {"L": 1}]]')
    assert alone.code == 1 and "add curriculum=on" in alone.err and "Traceback" not in alone.err
    late = run_cli(capsys, "tune", *TINY, "--steps", "6", "--out", tmp_path / "v", "--space", "curriculum=on",
                   "--curriculum", '[[9, {"L": 1}]]')
    assert late.code == 1 and "curriculum stages must end" in late.err and "Traceback" not in late.err
    assert not (tmp_path / "u" / "trials").exists() and not (tmp_path / "v" / "trials").exists()


def test_named_curricula_are_searched_side_by_side_a_mixture_among_them(tmp_path, capsys):
    out = tmp_path / "t"
    named = '{"short": [[3, {"L": 1}]], "mix": [[4, [{"L": 1}, {}]]]}'
    done = run_cli(capsys, "tune", *TINY, "--steps", "6", "--out", out, "--pruner", "none", "--space",
                   "curriculum=short,mix,off", "--curriculum", named)
    assert done.code == 0, done.err
    ran = {name: json.loads((out / "trials" / f"curriculum={name}" / "run.json").read_text())["train"]["curriculum"]
           for name in ("short", "mix", "off")}
    assert ran == {"short": [[3, {"L": 1}]], "mix": [[4, [{"L": 1}, {}]]], "off": []}
    assert results.read(out / "tune.json", "tune")["metrics"]["curricula"] == json.loads(named)
    for space, curricula, message in (("curriculum=on", named, "curriculum takes mix, off, short"),
                                      ("lr=1e-3", named, "add curriculum=short,mix"),
                                      ("curriculum=off", '{"off": [[3, {"L": 1}]]}', "none called off")):
        refused = run_cli(capsys, "tune", *TINY, "--steps", "6", "--out", tmp_path / "u", "--space", space,
                          "--curriculum", curricula)
        assert refused.code == 1 and message in refused.err and "Traceback" not in refused.err


def test_the_pruner_waits_for_the_end_of_the_curriculum(tmp_path, capsys):
    # judged at the end of its last stage a curriculum trial has not trained on the task yet, so by
    # default the first judgement comes after it, and a --prune-after before it is warned about
    late = run_cli(capsys, "tune", *TINY, "--steps", "6", "--out", tmp_path / "t", "--space", "curriculum=on,off",
                   "--curriculum", '[[5, {"L": 1}]]')
    assert late.code == 0, late.err
    assert results.read(tmp_path / "t" / "tune.json", "tune")["metrics"]["prune_after"] == 6
    assert "warning" not in late.err
    early = run_cli(capsys, "tune", *TINY, "--steps", "6", "--out", tmp_path / "u", "--space", "curriculum=on,off",
                    "--curriculum", '[[5, {"L": 1}]]', "--prune-after", "5", "--max-trials", "1")
    assert early.code == 0, early.err
    assert "warning: --prune-after 5: the curriculum=on trials train on their curriculum to step 5" in early.err
    assert "--prune-after 6 or later" in early.err
    plain = run_cli(capsys, "tune", *TINY, "--steps", "6", "--out", tmp_path / "v", "--space", "lr=1e-3")
    assert results.read(tmp_path / "v" / "tune.json", "tune")["metrics"]["prune_after"] == 3


def test_the_space_keeps_the_declared_order():
    assert parse_space(("curriculum=on,off", "lr=3.2e-3,1e-3")) == {"curriculum": ["on", "off"], "lr": ["3.2e-3", "1e-3"]}
    with pytest.raises(UserError, match="names lr twice"):
        parse_space(("lr=1", "lr=2"))


def test_ctrl_c_says_how_the_search_continues(tmp_path, monkeypatch, capsys):
    from interp import tune

    def interrupted(self, max_trials=None, moved=False):
        raise KeyboardInterrupt
    monkeypatch.setattr(tune.Tune, "execute", interrupted)
    result = run_cli(capsys, "tune", *TINY, "--steps", "6", "--out", tmp_path / "tune", "--space", "lr=1e-3,1e-2")
    assert result.code == 130
    assert result.err.strip().splitlines()[-1] == (
        "interp: interrupted (the search continues where it stopped when the same command is run again)")


def test_a_task_that_tests_no_primitive_is_scored_by_its_entropy_error(tmp_path, capsys):
    # regression declares no inference primitive: its trials are scored, lower better, by the
    # held-out entropy MAE its run records at the end
    out = tmp_path / "t"
    done = run_cli(capsys, "tune", "--task", "regression", "-T", "d=2", "-T", "n=4", "--arch", "mlp", "-M", "d_model=8",
                   "--steps", "3", "--batch-size", "4", "--eval-size", "8", "--pruner", "none", "--out", out,
                   "--space", "lr=1e-3,1e-2")
    assert done.code == 0, done.err
    summary = results.read(out / "tune.json", "tune")["metrics"]
    assert summary["metric"] == "entropy_mae_bits" and summary["direction"] == "minimize"
    for row in summary["trials"]:
        run = json.loads((out / "trials" / row["name"] / "run.json").read_text())
        assert row["state"] == "complete" and row["score"] == run["final"]["entropy_mae_bits"]
    assert summary["best"]["score"] == min(r["score"] for r in summary["trials"])


def test_a_worker_started_before_the_search_was_widened_records_the_wider_search(tmp_path):
    from interp.tune import Tune

    options = dict(task_options={"V": 3, "L": 2}, model_options={"d_model": 8, "n_heads": 2}, batch_size=4,
                   eval_size=8, steps=6, pruner="none", progress=False)
    narrow = Tune("bijection", "transformer", ("lr=1e-3,1e-2",), tmp_path, **options)
    wide = Tune("bijection", "transformer", ("lr=1e-3,1e-2,3e-2",), tmp_path, **options)
    study = narrow.open_study()  # this worker started first ...
    wide.open_study()  # ... then another widened the grid
    summary = narrow.write(study)  # the narrow worker's record names the study's search, not its own command
    assert summary["space"]["lr"] == ["1e-3", "1e-2", "3e-2"] and summary["n_trials"] == 3
    assert results.read(tmp_path / "tune.json", "tune")["metrics"]["n_trials"] == 3


# -- round four: the search folder under bad input --------------------------------------------------------
def test_a_locked_sqlite_study_is_one_line_after_a_stated_wait(tmp_path, monkeypatch, capsys):
    import sqlite3

    from interp import tune

    monkeypatch.setattr(tune, "LOCK_WAIT_S", 1)
    (tmp_path / "s").mkdir()
    holder = sqlite3.connect(tmp_path / "s" / "study.db", isolation_level=None)  # another process's write lock
    holder.execute("CREATE TABLE x (a)")
    holder.execute("BEGIN EXCLUSIVE")
    started = time.time()
    result = run_cli(capsys, "tune", *TINY, "--steps", "4", "--out", tmp_path / "s", "--space", "lr=1e-3")
    holder.close()
    assert result.code == 1 and time.time() - started < 30
    assert result.err.splitlines() == [
        f"note: {tmp_path / 's' / 'study.db'} is locked by another process; waiting up to 1 s for it",
        f"interp: error: the study in {tmp_path / 's' / 'study.db'} is locked by another process (waited 1 s); wait "
        f"for it to finish, or stop it"]


def test_a_study_lock_held_by_another_worker_is_waited_for_then_named(tmp_path, monkeypatch, capsys):
    import fcntl

    from interp import tune

    monkeypatch.setattr(tune, "LOCK_WAIT_S", 0.5)
    (tmp_path / "s").mkdir()
    with open(tmp_path / "s" / ".study-lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        held.write("4242")
        held.flush()
        result = run_cli(capsys, "tune", *TINY, "--steps", "4", "--out", tmp_path / "s", "--space", "lr=1e-3")
    assert result.code == 1 and result.err.strip() == (
        f"interp: error: {tmp_path / 's' / '.study-lock'} has been held by another worker (pid 4242) for over 0.5 s; "
        f"wait for it, or stop it")
    assert not (tmp_path / "s" / "study.db").exists()


def test_a_trial_folder_linked_to_another_folder_is_never_trained_into(tmp_path, capsys):
    (tmp_path / "s" / "trials").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    os.symlink(tmp_path / "elsewhere", tmp_path / "s" / "trials" / "lr=1e-3")
    result = run_cli(capsys, "tune", *TINY, "--steps", "4", "--out", tmp_path / "s", "--space", "lr=1e-3")
    assert result.code == 1 and "trials/lr=1e-3 is a symbolic link, not a folder" in result.err
    assert list((tmp_path / "elsewhere").iterdir()) == [] and not (tmp_path / "s" / "study.db").exists()


def test_a_space_value_never_names_a_folder_outside_the_search(tmp_path):
    from interp.tune import Tune

    search = Tune.__new__(Tune)  # the folder of a trial depends on the search folder alone
    search.out = tmp_path / "s"
    folder = search.folder({"init": "../../../../x"})
    assert folder.parent == tmp_path / "s" / "trials" and folder.name == "init=..%2F..%2F..%2F..%2Fx"
    assert search.folder({"lr": "1e-3", "warmup": "0"}).name == "lr=1e-3_warmup=0"  # plain names as before


def test_a_grid_of_a_trillion_points_is_refused_at_once_with_its_cause(tmp_path, capsys):
    values = ",".join(str(i) for i in range(1, 1001))
    started = time.time()
    result = run_cli(capsys, "tune", *TINY, "--steps", "4", "--out", tmp_path / "s", "--space",
                     *(f"{key}={values}" for key in ("lr", "warmup", "weight_decay", "grad_clip")))
    assert result.code == 1 and time.time() - started < 10, result.err
    assert result.err.strip() == ("interp: error: --space declares 1,000,000,000,000 trials, more than --max-grid "
                                  "10,000 (each is a training run); narrow the space, or raise --max-grid")
    assert not (tmp_path / "s").exists()
