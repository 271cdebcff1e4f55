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



def search(arch="mamba", lrs=("1e-3", "1e-2", "3.2e-2"), scores=(0.1, 0.2, 0.3), states=("complete", "complete", "pruned"),
           curriculum=None, pruner="median", direction="minimize"):
    """A search's record as write_records keeps it, its best trial the best score."""
    trials = []
    for lr, score, trial_state in zip(lrs, scores, states):
        params = {"lr": lr} | ({"curriculum": curriculum} if curriculum else {})
        trials.append(dict(name="_".join(f"{k}={v}" for k, v in params.items()), params=params, state=trial_state,
                           score=score, curve={"1": 0.5, "2": score}, tokens_seen={"1": 1e6, "2": 2e6}))
    best = (min if direction == "minimize" else max)(trials, key=lambda t: t["score"])
    return dict(task={"name": "bijection"}, arch=arch, model_options={}, metric="entropy_mae_bits",
                budget=dict(steps=2, batch_size=4), direction=direction, pruner=pruner,
                best=dict(name=best["name"], score=best["score"]), trials=trials)


def test_the_headline_draws_each_rows_best_trial_alone():
    fig = module()["task_figure"]("bijection", [search("mamba"), search("lstm", scores=(0.3, 0.05, 0.4))], None)
    assert [t.name for t in fig.data] == ["mamba, lr 1e-3, 2 x 4", "lstm, lr 1e-2, 2 x 4"]
    assert [list(t.y) for t in fig.data] == [[0.5, 0.1], [0.5, 0.05]]


def test_a_row_with_two_searches_has_one_best_the_better_of_theirs():
    for direction, winner in (("minimize", "1e-2"), ("maximize", "1e-3")):
        searches = [search(lrs=("1e-3",), scores=(0.3,), states=("complete",), direction=direction),
                    search(lrs=("1e-2",), scores=(0.2,), states=("complete",), direction=direction)]
        fig = module()["task_figure"]("bijection", searches, None)
        assert [t.name for t in fig.data] == [f"mamba, lr {winner}, 2 x 4"]


def test_every_trial_is_a_point_of_its_rows_panel_by_learning_rate_and_recipe():
    searches = [search("mamba", curriculum="off"), search("mamba", curriculum="on", scores=(0.15, 0.25, 0.35)),
                search("mamba", lrs=("1e-2",), scores=(0.12,), states=("complete",), curriculum="on", pruner="none"),
                search("lstm")]
    fig = module()["trials_figure"]("bijection", searches)
    drawn = [t for t in fig.data if t.x[0] is not None]
    assert [(t.name, t.xaxis) for t in drawn] == [("no curriculum", "x"), ("curriculum", "x"),
                                                 ("curriculum, its own search without the pruner", "x"),
                                                 ("no curriculum", "x2")]
    assert list(drawn[1].x) == [1e-3, 1e-2, 3.2e-2] and list(drawn[1].y) == [0.15, 0.25, 0.35]
    assert list(drawn[1].marker.symbol) == ["circle", "circle", "circle-open"]  # the pruned trial: open
    assert [a.text for a in fig.layout.annotations[:2]] == ["mamba", "lstm"]
    assert drawn[0].marker.color != drawn[1].marker.color != drawn[2].marker.color


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
    assert (figures / "curves-bijection-trials.png").stat().st_size > 10_000
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
