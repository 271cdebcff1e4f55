"""Training on from a checkpoint (`--init`) and random position offsets (`-M position_offsets=true`)."""
from __future__ import annotations

import json

import pytest
import torch

import models
import tasks
from analyses.budget import budget_text, training_budget
from interp import checkpoint
from interp.errors import UserError
from interp.files import RunFolder
from interp.results import checkpoint_digest
from interp.recipe import stated
from interp.train import Trainer, TrainSettings

TASK = dict(name="hmm", S=2, O=2, K=4)
SMALL = dict(d_model=16, n_layers=1, n_heads=2)
SETTINGS = dict(steps=3, batch_size=8, lr=1e-3, warmup=1, eval_every=1000, eval_size=8)


def offsets_model(**config):
    task = tasks.from_config(TASK)
    return models.build("transformer", task, config=dict(SMALL, n_ctx=task.seq_len + 6, position_offsets=True,
                                                         **config))


def test_offsets_move_the_stream_to_a_random_start_while_training_keep_the_header_and_read_row_0_in_evaluation():
    model = offsets_model()
    task = tasks.from_config(TASK)
    tokens = task.sample(64, generator=torch.Generator().manual_seed(0)).tokens
    table = model.pos_embed.W_pos
    length, header = tokens.shape[1], task.stream_start
    assert header == 11  # the HMM's tables: TRANS, 4 entries, EMIT, 4 entries, SEP
    model.train()
    torch.manual_seed(0)
    read = model.pos_embed(tokens)
    starts = []
    for row in read:  # the header's own rows, then the stream's consecutive rows from a start in 0..6
        assert torch.equal(row[:header], table[:header])
        match = [o for o in range(7) if torch.equal(row[header:], table[header + o:length + o])]
        assert len(match) == 1
        starts.append(match[0])
    assert set(starts) == set(range(7))  # 64 draws of 7 starts: every one occurs
    # a task without a header moves every position
    bijection = tasks.make("bijection", V=4, L=3)
    plain = models.build("transformer", bijection, config=dict(SMALL, n_ctx=bijection.seq_len + 3,
                                                                position_offsets=True)).train()
    keys = bijection.sample(64, generator=torch.Generator().manual_seed(0)).tokens
    starts = {next(o for o in range(4) if torch.equal(row, plain.pos_embed.W_pos[o:o + keys.shape[1]]))
              for row in plain.pos_embed(keys)}
    assert starts == set(range(4))
    model.eval()
    assert torch.equal(model.pos_embed(tokens), table[:length].expand(64, -1, -1))
    # the training gradient reaches every row the offsets read, past the training length too
    model.train()
    model(tokens).sum().backward()
    assert (table.grad.abs().sum(-1) > 0).all()


def test_offsets_are_refused_with_rotary_positions_or_a_table_no_longer_than_the_sequences():
    with pytest.raises(tasks.ConfigError, match="rotary positions are relative already"):
        offsets_model(positional="rotary")
    task = tasks.from_config(TASK)
    with pytest.raises(tasks.ConfigError, match=rf"-M n_ctx={2 * task.seq_len}"):
        models.build("transformer", task, config=dict(SMALL, position_offsets=True))


def test_a_run_with_offsets_replays_itself_bit_for_bit(tmp_path):
    config = offsets_model().config.to_dict()
    weights = []
    for name in ("a", "b"):
        trainer = Trainer.start(tmp_path / name, stated(TASK, "transformer", config, TrainSettings(**SETTINGS)),
                                progress=False)
        trainer.run()
        weights.append(trainer.model.state_dict())
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])


def test_init_starts_from_the_checkpoint_and_records_it(tmp_path):
    first = Trainer.start(tmp_path / "first",
                          stated(TASK, "transformer", dict(SMALL, n_ctx=20), TrainSettings(**SETTINGS)), progress=False)
    first.run()
    start = checkpoint.resolve(tmp_path / "first")
    # the fine-tune changes a model option that leaves the weights' shapes alone
    tuned = Trainer.start(tmp_path / "tuned",
                          stated(TASK, "transformer", dict(SMALL, n_ctx=20, position_offsets=True),
                                 TrainSettings(**SETTINGS, init=str(tmp_path / "first"))), progress=False)
    _, init_weights = checkpoint.read(start)
    assert all(torch.equal(tuned.model.state_dict()[k], init_weights[k]) for k in init_weights)
    tuned.run()
    _, at_start = checkpoint.read(tmp_path / "tuned" / "checkpoints" / checkpoint.checkpoint_name(0))
    assert all(torch.equal(at_start[k], init_weights[k]) for k in init_weights)
    record = json.loads((tmp_path / "tuned" / "run.json").read_text())
    assert record["init"]["sha256"] == checkpoint_digest(start) and record["init"]["step"] == 3
    assert record["train"]["init"] == str(tmp_path / "first")


@pytest.mark.parametrize("arch, task, match", [
    ("mlp", TASK, "is a transformer checkpoint; this run trains a mlp"),
    ("transformer", dict(name="bijection", V=4, L=3), "was trained on hmm; this run trains bijection"),
    ("transformer", dict(TASK, O=3), "weights do not match"),
])
def test_init_of_another_architecture_task_or_shape_is_refused_in_one_line(tmp_path, arch, task, match):
    Trainer.start(tmp_path / "first",
                  stated(TASK, "transformer", dict(SMALL, n_ctx=20), TrainSettings(**dict(SETTINGS, steps=1))),
                  progress=False).run()
    config = dict(SMALL, n_ctx=20) if arch == "transformer" else None
    with pytest.raises(UserError, match=match):
        Trainer.start(tmp_path / "second",
                      stated(task, arch, config, TrainSettings(**SETTINGS, init=str(tmp_path / "first"))),
                      progress=False)
    assert not (tmp_path / "second" / "run.json").exists()


def test_a_fine_tuned_models_budget_counts_what_its_start_had_seen_and_the_matrix_prints_it(tmp_path):
    import analyses

    Trainer.start(tmp_path / "first", stated(TASK, "transformer", dict(SMALL, n_ctx=20), TrainSettings(**SETTINGS)),
                  progress=False).run()
    Trainer.start(tmp_path / "tuned",
                  stated(TASK, "transformer", dict(SMALL, n_ctx=20),
                         TrainSettings(**dict(SETTINGS, steps=2, init=str(tmp_path / "first")))), progress=False).run()
    length = tasks.from_config(TASK).seq_len
    assert checkpoint.budget(RunFolder(tmp_path / "first"), 3) == dict(
        steps=3, batch_size=8, init_sequences=0, sequences=24, init_tokens=0, tokens=24 * length)
    tuned = checkpoint.load(tmp_path / "tuned")
    budget = tuned.provenance.budget  # the loader read it off the run's record; an analysis reads no file
    assert budget == dict(steps=2, batch_size=8, init_sequences=24, sequences=40, init_tokens=24 * length,
                          tokens=40 * length)
    # a record written before runs kept their start's tokens: read off the start's own record
    record = json.loads((tmp_path / "tuned" / "run.json").read_text())
    del record["init"]["tokens"]
    (tmp_path / "tuned" / "run.json").write_text(json.dumps(record))
    assert checkpoint.budget(RunFolder(tuned.run_dir), tuned.step) == budget
    assert checkpoint.load(tmp_path / "tuned").provenance.budget == budget
    assert training_budget(record, 2, start=None)["init_tokens"] == 0  # the start unknown: counted as none
    assert training_budget(None, 2) is None and checkpoint.budget(None, 2) is None  # a lone checkpoint file
    assert budget_text(budget) == "2 x 8 after 24 sequences"
    assert budget_text(dict(budget, steps=6000, batch_size=64, init_sequences=1_600_000)) == \
        "6,000 x 64 after 1.6M sequences"
    result = analyses.run("compare", [tuned], n=16)
    cell = result.metrics["primitives"]["transformer"]["transport"]
    assert cell["budget"] == budget and cell["run"].startswith("tuned")
    heat = result.figures["primitives"].data[0]
    row, col = list(heat.y).index("transformer"), list(heat.x).index("transport")
    assert "2 x 8 after" in heat.text[row][col] and "params" in heat.text[row][col]


def test_training_tokens_count_each_curriculum_stage_at_its_own_length():
    from analyses.budget import training_tokens

    record = dict(task=dict(TASK), train=dict(batch_size=8, curriculum=[[2, {"K": 1}], [5, {"K": 2}]]))
    lengths = [tasks.from_config(dict(TASK, K=k)).seq_len for k in (1, 2, 4)]
    assert lengths == [12, 13, 15]  # 11 header tokens, then K observations
    assert training_tokens(record, 1) == 8 * 12
    assert training_tokens(record, 4) == 8 * (2 * 12 + 2 * 13)
    assert training_tokens(record, 7) == 8 * (2 * 12 + 3 * 13 + 2 * 15)
    assert training_tokens(dict(record, train=dict(batch_size=8)), 7) == 8 * 7 * 15


def test_a_model_cards_command_trains_the_same_run_again_with_init_curriculum_and_a_switch(tmp_path, capsys):
    import shlex

    from interp.pretrained import train_command
    from tests.cli import run_cli

    tiny = ["--no-bf16", "--no-compile", "-M", "d_model=16", "-M", "n_heads=2", "-M", "n_layers=1", "-M", "n_ctx=80",
            "-T", "K=5"]
    assert run_cli(capsys, "train", "--task", "hmm", "--out", tmp_path / "start", "--steps", "2", *tiny).code == 0
    done = run_cli(capsys, "train", "--task", "hmm", "--out", tmp_path / "first", "--steps", "3", *tiny,
                   "-M", "position_offsets=true", "--curriculum", '[[2, {"K": 3}]]', "--init", tmp_path / "start")
    assert done.code == 0, done.err
    record = json.loads((tmp_path / "first" / "run.json").read_text())
    command = train_command(record, "cpu")
    assert "-M position_offsets=true" in command and "--curriculum '[[2,{\"K\":3}]]'" in command
    again = run_cli(capsys, *shlex.split(command)[1:], "--out", tmp_path / "again")
    assert again.code == 0, again.err
    other = json.loads((tmp_path / "again" / "run.json").read_text())
    assert (other["task"], other["model"], other["train"]) == (record["task"], record["model"], record["train"])
    assert other["init"]["sha256"] == record["init"]["sha256"]
    from interp.pretrained import model_card

    card = model_card("tuned", record, "cpu", [])
    start = tmp_path / "start" / "checkpoints" / "step-00000002.safetensors"
    assert f"It started from the weights of `{start}` (step 2, after 128 training sequences" in card


def test_a_run_started_from_a_checkpoint_resumes_from_its_own_state_without_reading_the_start_again(tmp_path):
    import shutil

    Trainer.start(tmp_path / "first", stated(TASK, "transformer", dict(SMALL, n_ctx=20), TrainSettings(**SETTINGS)),
                  progress=False).run()
    settings = TrainSettings(**dict(SETTINGS, steps=4, eval_every=2, resume_every=2, init=str(tmp_path / "first")))

    def stop(step, metrics):
        raise KeyboardInterrupt  # as a killed worker would leave it: a resume state at step 2

    with pytest.raises(KeyboardInterrupt):
        Trainer.start(tmp_path / "tuned", stated(TASK, "transformer", dict(SMALL, n_ctx=20), settings), progress=False,
                      on_eval=stop).run()
    shutil.rmtree(tmp_path / "first")  # the start is gone; the run's own state is all it needs
    resumed = Trainer.resume(tmp_path / "tuned", progress=False)
    assert resumed.step == 2
    resumed.run()
    record = json.loads((tmp_path / "tuned" / "run.json").read_text())
    assert record["status"] == "finished" and record["init"]["step"] == 3


def test_a_model_cards_command_names_a_curriculum_and_a_schedule_the_preset_would_not_fit(tmp_path, capsys):
    """Full tables only (N_min=null), where the preset's own short-table stages cannot apply: the card's command
    names the task's curriculum (dense-mix), the held-then-annealed rate and the evaluations, and trains the same
    run again."""
    import shlex

    from interp.pretrained import model_card, train_command
    from tests.cli import run_cli

    tiny = ["--no-bf16", "--no-compile", "-M", "d_model=16", "-M", "n_heads=2", "-M", "n_layers=1", "-M", "shift=null",
            "-M", "n_ctx=120", "-T", "N=16", "-T", "n_keys=32", "-T", "n_values=32", "-T", "fillers=8", "-T", "gap=4",
            "-T", "N_min=null"]
    done = run_cli(capsys, "train", "--task", "recall", "--arch", "transformer", "--out", tmp_path / "first",
                   "--steps", "4", "--decay", "0.5", "--eval-every", "2", "--eval-size", "8", "--curriculum",
                   "dense-mix", *tiny)
    assert done.code == 0, done.err
    record = json.loads((tmp_path / "first" / "run.json").read_text())
    command = train_command(record, "cpu")
    assert "--curriculum dense-mix" in command and "--decay 0.5" in command and "--eval-size 8" in command
    again = run_cli(capsys, *shlex.split(command)[1:], "--out", tmp_path / "again")
    assert again.code == 0, again.err
    other = json.loads((tmp_path / "again" / "run.json").read_text())
    assert (other["task"], other["model"], other["train"]) == (record["task"], record["model"], record["train"])
    assert "held, then a cosine to 0 over the last 50% of the steps after it" in model_card("full", record, "cpu", [])
