"""benchmarks/equal_footing.py: every trial of a search drawn against its training tokens, one figure per task,
and the search's records written beside it (on a real tiny search)."""
import json
import runpy
import sys
from pathlib import Path

import pytest

import tasks
from tests.cli import run_cli
from tests.test_tune import TINY

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "equal_footing.py"


def module():
    return runpy.run_path(str(SCRIPT), run_name="equal_footing")


def test_a_transformer_without_the_shift_is_the_plain_row_and_labels_name_every_setting():
    family, label = module()["family"], module()["label"]
    plain = dict(params={"lr": "1e-3", "shift": "0"})
    assert family({"arch": "transformer", "model_options": {}}, plain) == "transformer plain"
    assert family({"arch": "transformer", "model_options": {"shift": 0}}, dict(params={"lr": "1e-3"})) == "transformer plain"
    assert family({"arch": "transformer", "model_options": {}}, dict(params={"shift": "3"})) == "transformer"
    assert family({"arch": "mamba", "model_options": {}}, plain) == "mamba"
    assert label({"arch": "mamba"}, dict(params={"lr": "1e-3", "shift": "0"})) == "mamba no shift, lr 1e-3"
    assert label({"arch": "transformer"}, dict(params={"lr": "1e-3", "shift": "0"})) == "transformer plain, lr 1e-3"
    offsets = {"arch": "transformer", "model_options": {"position_offsets": "true"}}  # fixed for the whole search
    assert label(offsets, dict(params={"lr": "1e-3"})) == "transformer (position_offsets true), lr 1e-3"



def test_the_legend_names_each_best_trial_and_one_entry_for_the_others():
    def trial(name, lr, state="complete"):
        return dict(name=name, params={"lr": lr}, state=state, curve={"1": 0.5, "2": 0.1}, tokens_seen={"1": 1e6, "2": 2e6})
    search = dict(arch="mamba", model_options={}, metric="entropy_mae_bits", budget=dict(steps=2, batch_size=4),
                  direction="minimize", best=dict(name="lr=1e-3", score=0.1),
                  trials=[trial("lr=1e-3", "1e-3"), trial("lr=1e-2", "1e-2"), trial("lr=3e-2", "3e-2", "pruned")])
    fig = module()["task_figure"]("bijection", [search], None)
    shown = [t.name for t in fig.data if t.showlegend is not False]
    assert shown == ["mamba, lr 1e-3, 2 x 4 (complete): best",
                     "mamba: its other 2 trials (dashed: stopped by the pruner)"]
    hidden = [t for t in fig.data if t.showlegend is False]  # every trial is still drawn, and named on hover
    assert len(hidden) == 2 and all(t.legendgroup == "mamba others" for t in hidden)
    assert "mamba, lr 3e-2, 2 x 4 (pruned)" in hidden[1].hovertemplate and hidden[1].line.dash == "dash"


def test_a_row_with_two_searches_has_one_best_the_better_of_theirs():
    def search(lr, score, direction="minimize"):
        trial = dict(name=f"lr={lr}", params={"lr": lr}, state="complete", curve={"1": score}, tokens_seen={"1": 1e6})
        return dict(arch="mamba", model_options={}, metric="entropy_mae_bits", budget=dict(steps=1, batch_size=4),
                    direction=direction, best=dict(name=trial["name"], score=score), trials=[trial])
    for direction, winner in (("minimize", "1e-2"), ("maximize", "1e-3")):
        searches = [search("1e-3", 0.3, direction), search("1e-2", 0.2, direction)]
        fig = module()["task_figure"]("bijection", searches, None)
        shown = [t.name for t in fig.data if t.showlegend is not False]
        assert shown == [f"mamba, lr {winner}, 1 x 4 (complete): best", "mamba: its other 1 trial (dashed: stopped by the pruner)"]

@pytest.mark.slow
def test_a_search_is_drawn_per_task_with_its_records(tmp_path, capsys, monkeypatch):
    search = tmp_path / "runs" / "eq-tiny"
    done = run_cli(capsys, "tune", *TINY, "--steps", "6", "--out", search, "--pruner", "none", "--space", "lr=1e-3,1e-2")
    assert done.code == 0, done.err
    figures = tmp_path / "figures"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["equal_footing.py", str(search)])
    namespace = module()
    namespace["main"].__globals__["OUT"] = figures
    namespace["main"]()
    assert (figures / "curves-bijection.png").stat().st_size > 10_000 and (figures / "curves-bijection.pdf").exists()
    record = json.loads((figures / "trials-eq-tiny.json").read_text())
    assert {t["name"] for t in record["trials"]} == {"lr=1e-3", "lr=1e-2"}
    for trial in record["trials"]:  # every evaluation's tokens: steps x batch x the sequence length
        run = json.loads((search / "trials" / trial["name"] / "run.json").read_text())
        length = tasks.from_config(run["task"]).seq_len
        steps = sorted(int(s) for s in trial["tokens_seen"])
        assert steps[-1] == 6 and all(trial["tokens_seen"][str(s)] == s * 4 * length for s in steps)
        assert not Path(trial["run"]).is_absolute()  # named by its place in the search, not this machine
    assert (figures / "trials-eq-tiny.csv").read_text().startswith("number,lr,")
    assert "bijection-transformer-cpu: 2 of 2 trials" in capsys.readouterr().out
