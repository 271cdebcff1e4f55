"""Training: schedule, checkpoints, and exact resumption after a hard kill."""
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch
from safetensors.torch import load_file

from interp import checkpoint
from interp.errors import UserError
from interp.recipe import TrainSettings, fitted_curriculum, stated
from interp.train import Trainer, checkpoint_steps, denormals_are_flushed, lr_at

TASK = dict(name="bijection", V=6, L=5)
MODEL = dict(d_model=16, n_layers=2, n_heads=2)


def test_checkpoint_schedule_is_dense_early():
    assert checkpoint_steps(2500) == [0, 100, 200, 300, 400, 500, 600, 700, 800, 900, 1000, 2000, 2500]
    assert checkpoint_steps(50) == [0, 50]


def test_learning_rate_warms_up_then_decays_to_zero():
    s = TrainSettings(steps=100, lr=1.0, warmup=10)
    assert lr_at(0, s) == 0.1 and lr_at(9, s) == 1.0 and lr_at(10, s) == 1.0
    assert lr_at(55, s) == pytest.approx(0.5)
    assert lr_at(100, s) == 0.0


def test_learning_rate_holds_at_its_peak_then_anneals_over_the_last_fraction():
    s = TrainSettings(steps=110, lr=1.0, warmup=10, decay=0.2)  # 100 steps after the warm-up: hold 80, anneal 20
    assert lr_at(9, s) == 1.0 and all(lr_at(step, s) == 1.0 for step in range(10, 91))
    assert lr_at(100, s) == pytest.approx(0.5) and lr_at(110, s) == 0.0
    assert all(lr_at(a, s) > lr_at(a + 1, s) for a in range(90, 110))  # strictly down once the anneal starts
    # decay 1 is the plain schedule, step for step
    plain, whole = TrainSettings(steps=110, lr=1.0, warmup=10), TrainSettings(steps=110, lr=1.0, warmup=10, decay=1)
    assert [lr_at(step, plain) for step in range(111)] == [lr_at(step, whole) for step in range(111)]


@pytest.mark.parametrize("decay", [0, -0.5, 1.5, True, "half"])
def test_a_decay_outside_the_run_is_refused(decay):
    with pytest.raises(UserError, match="decay must be a fraction"):
        TrainSettings(decay=decay).validate()


def test_a_cpu_run_flushes_denormals_while_it_trains_and_puts_them_back(tmp_path):
    # flushing speeds up a diverging CPU run 3x, but the setting is the whole process's: code after a
    # run (hypothesis refuses to draw floats without subnormals) must find IEEE floats again
    seen = []
    settings = TrainSettings(steps=4, batch_size=4, lr=1e-3, warmup=0, eval_every=2, eval_size=8)
    Trainer.start(tmp_path / "run", stated(TASK, "transformer", MODEL, settings), device="cpu", progress=False,
                  on_eval=lambda step, metrics: seen.append(denormals_are_flushed())).run()
    assert seen and all(seen)
    assert not denormals_are_flushed() and 1e-308 * 1e-10 != 0.0


@pytest.mark.slow  # trains hundreds of steps or starts processes: minutes on a busy 2-core machine
def test_training_learns_the_task(tmp_path):
    settings = TrainSettings(steps=300, batch_size=64, lr=3e-3, warmup=30, eval_every=300, eval_size=500)
    final = Trainer.start(tmp_path / "run", stated(TASK, "transformer", MODEL, settings), progress=False).run()
    # An untrained model is ~0.5 bits off on V=6; a few hundred soft-target steps get far closer.
    assert final["entropy_mae_bits"] < 0.1


@pytest.mark.slow  # trains hundreds of steps or starts processes: minutes on a busy 2-core machine
def test_resume_after_sigkill_is_bit_exact(tmp_path):
    settings = dict(steps=400, batch_size=32, warmup=20, resume_every=50, eval_every=100, eval_size=200)
    reference = Trainer.start(tmp_path / "straight", stated(TASK, "transformer", MODEL, TrainSettings(**settings)),
                              device="cpu", progress=False)  # bit for bit: a CPU claim
    reference.run()

    run_dir = tmp_path / "killed"
    command = [sys.executable, "-m", "interp", "train", "--out", str(run_dir), "--device", "cpu", "--steps", "400",
               "--batch-size", "32", "--warmup", "20", "-T", "V=6", "-T", "L=5", "-M", "d_model=16",
               "-M", "n_layers=2", "-M", "n_heads=2"]
    # The CLI keeps the preset's eval and resume cadence; neither touches the weights or the batches.
    env = dict(os.environ, OMP_NUM_THREADS=str(torch.get_num_threads()))
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while not (run_dir / "checkpoints" / checkpoint.checkpoint_name(200)).exists() and time.time() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert (run_dir / "resume.safetensors").exists(), "killed before any resume state was written"
    for _, path in checkpoint.list_checkpoints(run_dir):
        checkpoint.load(path)  # every checkpoint on disk is complete
    resumed = Trainer.resume(run_dir, device="cpu", progress=False)
    # The kill may land between checkpoint 200 and the resume state written after it: then the
    # run resumes from the previous state, at step 100, and must still end bit for bit the same.
    assert resumed.step in (100, 200)
    resumed.run()
    straight = load_file(tmp_path / "straight" / "checkpoints" / checkpoint.checkpoint_name(400))
    after = load_file(run_dir / "checkpoints" / checkpoint.checkpoint_name(400))
    assert straight.keys() == after.keys()
    for key in straight:
        assert torch.equal(straight[key], after[key]), key


def test_a_non_finite_loss_stops_training_and_keeps_the_last_good_checkpoint(tmp_path):
    settings = TrainSettings(steps=300, batch_size=16, lr=1e-3, warmup=5, eval_every=100, eval_size=50)
    trainer = Trainer.start(tmp_path / "run", stated(TASK, "transformer", MODEL, settings), progress=False)
    original = trainer.task.sample

    def poisoned(batch_size, generator=None):
        batch = original(batch_size, generator=generator)
        if trainer.step == 150:
            batch.posterior[:] = float("nan")
        return batch

    trainer.task.sample = poisoned
    with pytest.raises(UserError, match="loss became nan at step 150"):
        trainer.run()
    saved = [step for step, _ in checkpoint.list_checkpoints(tmp_path / "run")]
    assert saved == [0, 100]
    for _, path in checkpoint.list_checkpoints(tmp_path / "run"):
        model = checkpoint.load(path)
        assert all(torch.isfinite(p).all() for p in model.parameters())


def test_a_corrupt_run_record_cannot_be_resumed(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "run.json").write_text(json.dumps({"task": {}, "arch": "transformer", "model": {},
                                                           "train": {"stepz": 3}}))
    with pytest.raises(UserError, match="not a valid run record"):
        Trainer.resume(tmp_path / "run", progress=False)


def test_a_curriculum_trains_on_its_stages_then_on_the_task(tmp_path):
    stage = dict(L=3)
    settings = TrainSettings(steps=20, batch_size=8, warmup=2, eval_every=20, eval_size=50, curriculum=[[10, stage]])
    trainer = Trainer.start(tmp_path / "run", stated(TASK, "transformer", MODEL, settings), progress=False)
    assert trainer.task_at(0).config() == trainer.task.config() | stage
    assert trainer.task_at(9).L == 3 and trainer.task_at(10) is trainer.task
    trainer.run()
    recorded = json.loads((tmp_path / "run" / "run.json").read_text())
    assert recorded["train"]["curriculum"] == [[10, stage]] and recorded["task"]["L"] == 5


def test_a_mixture_stage_takes_its_settings_in_turn_and_counts_its_tokens(tmp_path):
    from analyses.budget import training_tokens

    mixture = [dict(L=3), dict(L=4), {}]
    settings = TrainSettings(steps=14, batch_size=4, warmup=2, eval_every=14, eval_size=20, curriculum=[[10, mixture]])
    trainer = Trainer.start(tmp_path / "run", stated(TASK, "transformer", MODEL, settings), progress=False)
    assert [trainer.task_at(step).L for step in range(12)] == [3, 4, 5, 3, 4, 5, 3, 4, 5, 3, 5, 5]
    trainer.run()
    record = json.loads((tmp_path / "run" / "run.json").read_text())
    assert record["train"]["curriculum"] == [[10, mixture]]
    length = {L: 2 * L - 1 for L in (3, 4, 5)}  # bijection: L keys and L - 1 values
    assert trainer.task.seq_len == length[5]
    # steps 0-9: 4 of L=3, 3 of L=4, 3 of L=5; then 4 steps of the task itself
    expected = (4 * length[3] + 3 * length[4] + 3 * length[5] + 4 * length[5]) * 4
    assert training_tokens(record, 14) == expected
    assert training_tokens(record, 2) == (length[3] + length[4]) * 4


def test_mamba_trains_as_mamba_ssm_when_asked_a_log_undecayed_and_rmsnorm_eps(tmp_path):
    settings = TrainSettings(steps=1, batch_size=4, eval_size=20)
    model = dict(d_model=16, n_layers=2)
    plain = Trainer.start(tmp_path / "a", stated(TASK, "mamba", model, settings), progress=False)
    as_ssm = Trainer.start(tmp_path / "b",
                           stated(TASK, "mamba", model | dict(ssm_weight_decay=False, norm_eps=1e-5), settings),
                           progress=False)
    undecayed = lambda trainer: {id(p) for p in trainer.opt.param_groups[1]["params"]}
    names = lambda trainer: {n for n, p in trainer.model.named_parameters() if id(p) in undecayed(trainer)}
    assert {n for n in names(plain) if "A_log" in n} == set()
    assert {n for n in names(as_ssm) if "A_log" in n} == {"blocks.0.mixer.A_log", "blocks.1.mixer.A_log"}
    assert names(as_ssm) - names(plain) == {"blocks.0.mixer.A_log", "blocks.1.mixer.A_log"}
    assert as_ssm.model.ln_final.eps == 1e-5 and plain.model.ln_final.eps is None
    for trainer in (plain, as_ssm):
        trainer.close()


def test_a_stage_longer_than_a_learned_position_table_is_refused_with_the_fix(tmp_path):
    settings = TrainSettings(steps=20, batch_size=8, curriculum=[[10, dict(L=7, replacement=True)]])
    with pytest.raises(UserError, match=r"longer than the model's context \(9\); train with -M n_ctx=13"):
        Trainer.start(tmp_path / "run", stated(TASK, "transformer", MODEL, settings), progress=False)


@pytest.mark.parametrize("curriculum, message", [
    ([[10, []]], "pairs"), ([[10, [dict(L=3), "L=4"]]], "pairs"), ([[10, [dict(L=3), dict(V=7)]]], "vocabulary"),
    ([[0, {}]], "increasing steps"), ([[30, {}]], "increasing steps"), ([[10, {}], [5, {}]], "increasing steps"),
    ([[10, "L=3"]], "pairs"), ([10], "pairs"), ([[10, dict(L=99)]], "curriculum stage"),
    ([[10, dict(V=7)]], "vocabulary")])
def test_a_bad_curriculum_is_refused_before_anything_is_written(tmp_path, curriculum, message):
    settings = TrainSettings(steps=20, batch_size=8, curriculum=curriculum)
    with pytest.raises(UserError, match=message):
        Trainer.start(tmp_path / "run", stated(TASK, "transformer", MODEL, settings), progress=False)
    assert not (tmp_path / "run").exists() or not any((tmp_path / "run").iterdir())


def test_a_preset_curriculum_is_kept_where_it_fits_and_scaled_where_it_does_not():
    stages = [[2000, dict(n=10)], [4000, dict(n=20)]]
    assert fitted_curriculum(stages, 14000, 20000) == stages and fitted_curriculum(stages, 14000, 4000) == stages
    assert fitted_curriculum(stages, 14000, 1400) == [[200, dict(n=10)], [400, dict(n=20)]]
    assert fitted_curriculum(stages, 14000, 3) == [[1, dict(n=10)]]  # too short for both: the first stage only
    assert fitted_curriculum([], 14000, 3) == []


@pytest.mark.slow
def test_a_compiled_run_learns_replays_itself_and_says_so_in_its_card(tmp_path):
    """torch.compile changes the speed of a step, not what it computes (to float rounding): a compiled
    run learns like an eager one, two compiled runs with one seed end bit for bit equal, and run.json
    and the model card's command record it."""
    from interp.pretrained import ship

    settings = dict(steps=60, batch_size=32, warmup=6, eval_every=60, eval_size=200)
    eager = Trainer.start(tmp_path / "eager", stated(TASK, "transformer", MODEL, TrainSettings(**settings)),
                          progress=False).run()
    runs = [Trainer.start(tmp_path / name, stated(TASK, "transformer", MODEL, TrainSettings(**settings, compile=True)),
                          progress=False) for name in ("compiled", "again")]
    finals = [trainer.run() for trainer in runs]
    assert finals[0]["entropy_mae_bits"] == pytest.approx(eager["entropy_mae_bits"], abs=2e-3)
    ends = [load_file(tmp_path / name / "checkpoints" / checkpoint.checkpoint_name(60)) for name in ("compiled", "again")]
    assert all(torch.equal(ends[0][key], ends[1][key]) for key in ends[0])
    assert json.loads((tmp_path / "compiled" / "run.json").read_text())["train"]["compile"] is True
    card = (ship(tmp_path / "compiled", "tiny", dest_root=tmp_path / "shipped") / "README.md").read_text()
    assert "--compile" in card and "torch.compile" in card


@pytest.mark.slow
def test_a_compile_that_cannot_build_its_kernels_is_one_line_saying_how_to_go_on(tmp_path, monkeypatch):
    import torch._inductor.config as inductor

    monkeypatch.setattr(inductor, "force_disable_caches", True)  # a cached kernel would need no compiler
    monkeypatch.setattr(inductor.cpp, "cxx", ("/nonexistent/c++",))
    torch._dynamo.reset()
    settings = TrainSettings(steps=5, batch_size=8, warmup=1, eval_every=5, eval_size=20, compile=True)
    with pytest.raises(UserError, match="torch.compile could not build the training step .*--no-compile"):
        Trainer.start(tmp_path / "run", stated(TASK, "transformer", MODEL, settings), progress=False).run()
    torch._dynamo.reset()


@pytest.mark.parametrize("name", ["compile", "bf16"])
def test_compile_and_bf16_must_be_booleans(tmp_path, name):
    with pytest.raises(UserError, match=f"{name} must be true or false"):
        Trainer.start(tmp_path / "run", stated(TASK, "transformer", MODEL, TrainSettings(steps=5, **{name: "yes"})),
                      progress=False)


@pytest.mark.slow  # trains two runs: over a minute on a busy machine
def test_bf16_on_the_cpu_trains_in_float32_weights_and_is_recorded(tmp_path):
    """--bf16 runs the forward pass under CPU autocast: the weights and the evaluation stay float32,
    the run still learns, and run.json and the model card's command say it ran that way."""
    from interp.pretrained import ship

    settings = dict(steps=150, batch_size=32, lr=3e-3, warmup=15, eval_every=150, eval_size=200)
    eager = Trainer.start(tmp_path / "eager", stated(TASK, "transformer", MODEL, TrainSettings(**settings)),
                          progress=False).run()
    trainer = Trainer.start(tmp_path / "run", stated(TASK, "transformer", MODEL, TrainSettings(**settings, bf16=True)),
                            progress=False)
    final = trainer.run()
    assert abs(final["entropy_mae_bits"] - eager["entropy_mae_bits"]) < 0.03, (final, eager)
    assert all(p.dtype == torch.float32 for p in trainer.model.parameters())
    assert json.loads((tmp_path / "run" / "run.json").read_text())["train"]["bf16"] is True
    card = (ship(tmp_path / "run", "tiny", dest_root=tmp_path / "shipped") / "README.md").read_text()
    assert "--bf16" in card and "bf16 autocast on the CPU" in card


def test_no_bf16_and_no_compile_override_a_preset_that_turns_them_on(tmp_path, capsys):
    """The HMM transformer's preset compiles and runs bf16; on a CPU without bf16 units (or without a
    compiler) a user turns them off from the command line, and the card's command says so."""
    from interp.pretrained import train_command
    from tests.cli import run_cli

    run = tmp_path / "run"
    done = run_cli(capsys, "train", "--task", "hmm", "--out", run, "--steps", "3", "--no-bf16", "--no-compile",
                   "-M", "d_model=16", "-M", "n_heads=2", "-M", "n_layers=1")
    assert done.code == 0, done.err
    record = json.loads((run / "run.json").read_text())
    assert record["train"]["bf16"] is False and record["train"]["compile"] is False
    assert train_command(record, "cpu").endswith("--steps 3 --no-compile --no-bf16")
    again = run_cli(capsys, "train", "--task", "hmm", "--out", run, "--resume", "--no-bf16")
    assert again.code != 0 and "drop --bf16/--no-bf16" in again.err


def test_the_run_folder_undoes_a_failed_fresh_run_and_leaves_what_is_not_its_own(tmp_path):
    from interp.files import RunFolder

    folder = RunFolder(tmp_path / "run")
    folder.checkpoints.mkdir(parents=True)
    for path in (folder.record, folder.metrics, folder.checkpoint(0), tmp_path / "run" / "notes.txt"):
        path.write_text("x")
    folder.undo_fresh()
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["notes.txt"]  # the user's file stays
    assert [p.name for p in folder.own_files()] == ["run.json", "metrics.jsonl", "resume.safetensors"]


def test_finish_starts_resumes_takes_up_or_refuses_the_run_in_its_folder(tmp_path):
    """How a search's trials, a sweep's points and a reproduction's cells are trained: a run is started where there
    is none, one stopped is resumed (the evaluations it logged replayed first), one finished is taken as it is, and
    one of another recipe is refused in the caller's words."""
    from interp.train import finish

    settings = TrainSettings(steps=4, batch_size=4, warmup=1, eval_every=2, eval_size=8, checkpoint_every=2)
    spec, run = stated(TASK, "transformer", MODEL, settings), tmp_path / "run"

    def interrupt(step, metrics):
        raise KeyboardInterrupt  # after step 2's evaluation and saves, as a pruned trial or a kill leaves it

    with pytest.raises(KeyboardInterrupt):
        finish(run, spec, str, progress=False, on_eval=interrupt)
    assert json.loads((run / "run.json").read_text())["status"] == "running"
    replayed, seen = [], []
    record = finish(run, spec, str, progress=False, replay=lambda step, metrics: replayed.append(step),
                    on_eval=lambda step, metrics: seen.append(step))
    assert record["status"] == "finished" and replayed == [2] and seen == [4]
    log = (run / "metrics.jsonl").read_text()
    assert finish(run, spec, str, progress=False, on_eval=interrupt) == record  # taken as it is: nothing trains
    assert (run / "metrics.jsonl").read_text() == log
    other = stated(TASK, "transformer", MODEL, dataclasses.replace(settings, lr=1e-2, checkpoint_every=0))
    with pytest.raises(UserError, match=r"^refused: train\.lr 0\.003 there, 0\.01 now$"):
        finish(run, other, lambda found: "refused: " + "; ".join(f"{s} {a} there, {b} now" for s, a, b in found),
               ignore=("checkpoint_every",), progress=False)
