"""What every registered architecture must do on every registered task, with no name spelled here:
a new architecture or task module is covered by these tests as soon as it exists."""
import json

import pytest
import torch

import analyses
import interp
import models
import tasks
from analyses.base import AnalysisError, untrained_twin
from interp import checkpoint
from interp.export import clean
from tests.tiny import small_config, small_task


CELLS = [(arch, task) for arch in models.ARCHS for task in tasks.NAMES]


@pytest.mark.parametrize("arch, task_name", CELLS)
def test_runs_with_hooks_and_states_beliefs(arch, task_name):
    task = small_task(task_name)
    model = models.build(arch, task, small_config(arch), seed=0).eval()
    batch = task.sample(3, generator=torch.Generator().manual_seed(0))
    out, cache = model.run_with_cache(batch.tokens)
    T = batch.tokens.shape[1]
    for name in ["hook_embed", *(f"blocks.{l}.hook_resid_{k}" for l in range(2) for k in ("pre", "post"))]:
        assert name in cache and cache[name].shape[:2] == (3, T), name
    patched = model.run_with_hooks(batch.tokens, fwd_hooks=[("blocks.1.hook_resid_post", lambda x, hook: x * 0)])
    assert not torch.allclose(patched, out)
    if task.continuous:
        mean, var = model.predictive(batch.tokens)
        assert mean.shape == var.shape == (3, T) and (var > 0).all()
    else:
        torch.testing.assert_close(model.answer_probs(batch.tokens).sum(-1), torch.ones(3, T))
    assert model.has_attention() == type(model).attention
    assert (model.cfg.n_ctx is not None) == type(model).positions  # the declared capability is the real one


@pytest.mark.parametrize("arch", models.ARCHS)
def test_outputs_never_depend_on_later_positions(arch):
    task = small_task(next(n for n in tasks.NAMES if not tasks.REGISTRY[n].continuous))
    model = models.build(arch, task, small_config(arch), seed=0).eval()
    tokens = task.sample(4, generator=torch.Generator().manual_seed(0)).tokens
    cut = tokens.shape[1] // 2
    changed = tokens.clone()
    changed[:, cut:] = (changed[:, cut:] + 1) % task.vocab_size
    with torch.no_grad():
        torch.testing.assert_close(model(tokens)[:, :cut], model(changed)[:, :cut])


@pytest.mark.parametrize("arch", models.ARCHS)
def test_save_and_load_round_trip_keeps_the_provenance(arch, tmp_path):
    task = small_task(tasks.NAMES[0])
    model = models.build(arch, task, small_config(arch), seed=3).eval()
    assert model.seed == 3 and model.step is None  # build records its seed
    for step in (0, 7):
        checkpoint.save(tmp_path / "checkpoints" / checkpoint.checkpoint_name(step), model, step=step, seed=3)
    loaded = interp.load(tmp_path)
    assert (loaded.arch, loaded.step, loaded.seed, loaded.run_dir) == (arch, 7, 3, tmp_path)
    assert [s for s, _ in loaded.provenance.checkpoints] == [0, 7] and loaded.config == model.config
    tokens = task.sample(2, generator=torch.Generator().manual_seed(0)).tokens
    with torch.no_grad():
        torch.testing.assert_close(loaded(tokens), model(tokens), rtol=0, atol=0)
        first = loaded.provenance.load(loaded.provenance.checkpoints[0][1])
        assert first.step == 0


@pytest.mark.parametrize("arch", models.ARCHS)
def test_the_untrained_twin_is_the_same_seed_at_init(arch):
    """It once rebuilt seed 0 for a model made with another seed (the loader set the seed, build did not)."""
    task = small_task(tasks.NAMES[0])
    model = models.build(arch, task, small_config(arch), seed=3)
    twin = untrained_twin(model)
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), twin.state_dict().values()))
    other = models.build(arch, task, small_config(arch), seed=0)
    assert not all(torch.equal(a, b) for a, b in zip(other.state_dict().values(), twin.state_dict().values()))


MATCHED = [(arch, task) for arch, task in CELLS if models.architecture(arch).presets["cpu"].d_model is None
           and not tasks.REGISTRY[task].continuous]


@pytest.mark.parametrize("arch, task_name", MATCHED)
def test_cpu_presets_are_capacity_matched(arch, task_name):
    task = tasks.make(task_name)
    ref = models.REFERENCE
    reference = models.n_params(models.build(ref, task, models.model_config(ref, "cpu", task)))
    config = models.model_config(arch, "cpu", task)
    assert abs(models.n_params(models.build(arch, task, config)) / reference - 1) <= 0.05
    assert config["d_model"] is not None


@pytest.mark.parametrize("arch, task_name", CELLS)
def test_every_analysis_runs_or_refuses_for_a_declared_reason(arch, task_name):
    """An analysis refuses a model exactly when a requirement it declares is unmet, with that reason."""
    task = small_task(task_name)
    model = models.build(arch, task, small_config(arch), seed=0).eval()
    for analysis in analyses.REGISTRY.values():
        subject = [model, model] if analysis.multi_model else model
        options = {"n": 24} if "n" in analysis.defaults() else {}
        unmet = analysis.unmet(model)
        if unmet:
            with pytest.raises(AnalysisError) as refused:
                analysis(subject, **options)
            assert unmet[0] in str(refused.value)
            continue
        result = analysis(subject, **options)  # every declared requirement is met: no refusal is allowed
        json.dumps(clean(result.metrics), allow_nan=False)  # as the JSON is written (a 1-token group has no pairs)
        assert result.figures and result.definition == analysis.definition, analysis.name
