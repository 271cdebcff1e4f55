"""interp.recipe.resolve: the layers in order (generic preset, the task's variant, its per-architecture
layer, the user's options), a shorter run's curriculum fitted with a note, and refusals in one line."""
import dataclasses
import json

import pytest

from interp import recipe
from interp.errors import UserError


def test_the_layers_apply_in_order_and_the_user_has_the_last_word():
    hmm = recipe.resolve("hmm", "transformer", "cpu")
    assert hmm.train.steps == 25_000 and hmm.train.compile and hmm.train.lr == 2e-3  # task, then its transformer layer
    assert recipe.resolve("hmm", "mamba", "cpu").train.steps == 10_000 and recipe.PRESETS["cpu"].steps == 6000
    assert hmm.model["n_layers"] == 4 and hmm.model["n_heads"] == 8 and hmm.model["n_ctx"] == 103  # longest=50
    mine = recipe.resolve("hmm", "transformer", "cpu", task_options={"K": 10}, model_options={"n_layers": 2},
                          train_options={"lr": 1e-3, "compile": False})
    assert (mine.task.K, mine.model["n_layers"], mine.train.lr, mine.train.compile) == (10, 2, 1e-3, False)
    assert mine.record()["train"]["lr"] == 1e-3 and mine.record()["task"]["K"] == 10


def test_a_shorter_run_gets_the_preset_s_stages_in_proportion_and_says_so():
    full = recipe.resolve("recall", "transformer", "cpu")
    assert full.train.curriculum[0][0] == 600 and full.train.steps == 2000 and full.notes == ()
    assert recipe.resolve("recall", "transformer", "cpu", train_options={"steps": 1000}).train.curriculum[0][0] == 600
    short = recipe.resolve("recall", "transformer", "cpu", train_options={"steps": 500})  # stage 600 does not fit
    assert short.train.curriculum[0][0] == 150 and "end at [150]" in short.notes[0]
    given = recipe.resolve("recall", "transformer", "cpu", train_options={"steps": 500, "curriculum": []})
    assert given.train.curriculum == () and given.notes == ()  # checked: a validated curriculum is a tuple


@pytest.mark.parametrize("kwargs, message", [
    (dict(task="hmm", arch="transformer", preset="huge"), "unknown preset 'huge'"),
    (dict(task="hmm", arch="transformer", train_options={"lrr": 1}), "unknown training setting(s) lrr"),
    (dict(task="hmm", arch="transformer", task_options={"colour": 3}), "unknown setting(s) colour for task 'hmm'"),
    (dict(task="hmm", arch="rnn9000"), "rnn9000"),
])
def test_what_cannot_be_resolved_is_one_line(kwargs, message):
    with pytest.raises(UserError) as err:
        recipe.resolve(**kwargs)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_named_curriculum_is_built_by_the_task_for_the_run_and_a_wrong_name_is_one_line():
    from interp.cli import parse_curriculum

    assert parse_curriculum("dense-mix") == "dense-mix" and parse_curriculum('[[5, {"N": 2}]]') == [[5, {"N": 2}]]
    with pytest.raises(UserError, match="--curriculum must be JSON"):
        parse_curriculum("dense-mix", named=False)  # a search's curricula are JSON only
    spec = recipe.resolve("recall", "transformer", "cpu", train_options=dict(curriculum="dense-mix", steps=300),
                          model_options=dict(n_ctx=480))  # the dense full table's length: a context that holds it
    ((end, mixture),) = spec.train.curriculum
    # the paper's 64-pair table: dense tables of 8, 16 and 32 pairs, the dense full table, then the task itself
    assert end == 300 and [stage.get("N") for stage in mixture] == [8, 16, 32, None, None] and mixture[-1] == {}
    assert mixture[0] == dict(N=8, N_min=8, slots=8, fillers=4, queries=8, gap=0, ask="every", p_unbound=0.0)
    with pytest.raises(UserError, match="has no curriculum named 'sparse'"):
        recipe.resolve("recall", "transformer", "cpu", train_options=dict(curriculum="sparse"))
    with pytest.raises(UserError, match="dense-mix curriculum needs layout='paper'"):
        recipe.resolve("recall", "transformer", "cpu", task_options=dict(layout="compact", N_min=None),
                train_options=dict(curriculum="dense-mix"))


def test_a_run_of_the_same_recipe_has_no_differences_and_another_says_each_setting_that_differs():
    """What a sweep and a reproduction ask before they reuse or resume a run in their folder: the run's record
    against the recipe, a setting added since the record was written at its default, and what is named ignored."""
    spec = recipe.resolve("bijection", "mlp", "cpu")
    record = json.loads(json.dumps(spec.record()))  # as a run's record holds it
    assert spec.differences(record) == []
    del record["train"]["decay"], record["model"]["d_mlp"]  # written before these settings existed: at their defaults
    assert spec.differences(record) == []
    record["train"].update(lr=1.0, eval_size=7)
    record["arch"] = "lstm"
    assert spec.differences(record) == [("train.lr", 1.0, spec.train.lr), ("train.eval_size", 7, spec.train.eval_size),
                                        ("arch", "lstm", "mlp")]
    assert spec.differences(record, ignore=("eval_size",)) == [("train.lr", 1.0, spec.train.lr),
                                                                ("arch", "lstm", "mlp")]


def test_a_stated_recipe_is_checked_as_a_resolved_one_is():
    task, model = dict(name="bijection", V=6, L=5), dict(d_model=16, n_layers=1, n_heads=2)
    spec = recipe.stated(task, "transformer", model, recipe.TrainSettings(steps=20))
    assert spec.task.config()["V"] == 6 and spec.model["n_ctx"] is None and spec.train.steps == 20
    assert recipe.stated(task, "mlp").model == recipe.resolve(spec.task, "mlp").model  # no model: the cpu preset's
    with pytest.raises(UserError, match="lr must be"):
        recipe.stated(task, "transformer", model, recipe.TrainSettings(lr=-1.0))
    with pytest.raises(UserError, match="longer than the model's context"):
        recipe.stated(task, "transformer", model | dict(n_ctx=9),
                      recipe.TrainSettings(steps=20, curriculum=[[10, dict(L=7, replacement=True)]]))
    with pytest.raises(UserError, match="checkpoint not found"):
        recipe.stated(task, "transformer", model, recipe.TrainSettings(init="/nowhere/run"))


def test_a_resumed_run_takes_only_what_it_may_switch_of_a_recipe_given_with_it():
    every = {f.name: 1 for f in dataclasses.fields(recipe.TrainSettings)}
    assert recipe.fixed_on_resume({}, {}, every) == [name for name in every if name != "compile"]
    assert recipe.fixed_on_resume({"V": 3}, {"d_model": 8}, {"compile": False}) == ["task_options", "model_options"]
    assert recipe.fixed_on_resume({}, {}, {"compile": True}) == []
