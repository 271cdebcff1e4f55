"""interp.recipe.resolve: the layers in order (generic preset, the task's variant, its per-architecture
layer, the user's options), a shorter run's curriculum fitted with a note, and refusals in one line."""
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
    assert given.train.curriculum == [] and given.notes == ()


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
    spec = recipe.resolve("recall", "transformer", "cpu", train_options=dict(curriculum="dense-mix", steps=300))
    ((end, mixture),) = spec.train.curriculum
    # the paper's 64-pair table: dense tables of 8, 16 and 32 pairs, the dense full table, then the task itself
    assert end == 300 and [stage.get("N") for stage in mixture] == [8, 16, 32, None, None] and mixture[-1] == {}
    assert mixture[0] == dict(N=8, N_min=8, slots=8, fillers=4, queries=8, gap=0, ask="every", p_unbound=0.0)
    with pytest.raises(UserError, match="has no curriculum named 'sparse'"):
        recipe.resolve("recall", "transformer", "cpu", train_options=dict(curriculum="sparse"))
    with pytest.raises(UserError, match="dense-mix curriculum needs layout='paper'"):
        recipe.resolve("recall", "transformer", "cpu", task_options=dict(layout="compact", N_min=None),
                train_options=dict(curriculum="dense-mix"))
