"""Paper III's diagnostics on language models: known answers on constructed models, every analysis on every
constructed model family (a random-initialised TransformerLens-native model, tiny GPT-NeoX and grouped-query Llama
models converted from Hugging Face), and the CLI's --model on a saved model folder with its tokenizer."""
import json
import math

import numpy as np
import pytest
import torch

import analyses
from analyses import activations
from analyses.attention_focusing import normalised_entropy
from analyses.base import AnalysisError
from analyses.value_manifold import bootstrap_intervals, gram_share_and_r, pca_share_and_r
from models.language_model import LanguageModel, from_hugging_face, n_kv_heads
from tests.tiny_language_models import native
from tasks.prompts import two_label
from tests.cli import run_cli
from tests.tiny_language_models import FAMILIES, brute_force_calibration, saved, tiny, word_tokenizer

LANGUAGE = ("key-orthogonality", "value-manifold", "attention-focusing", "entropy-axis", "calibration")
QUICK = {"value-manifold": dict(bootstrap=20), "entropy-axis": dict(controls=2)}


def hooked(d_vocab=16, n_layers=1, n_heads=1, d_head=16, **settings):
    """A TransformerLens model without LayerNorm, MLP or positions: one-hot embeddings when d_model = d_vocab."""
    model = native(n_layers=n_layers, d_model=d_vocab, d_head=d_head, n_heads=n_heads, d_vocab=d_vocab,
                   act_fn="relu", attn_only=True, normalization_type=None, **settings)
    with torch.no_grad():
        model.W_E.copy_(torch.eye(d_vocab))
        model.W_pos.zero_()
    return model


def family(name: str) -> LanguageModel:
    if name == "random":
        return LanguageModel(native(), "random")
    return LanguageModel(from_hugging_face(tiny(name, vocab_size=len(word_tokenizer()))), name, word_tokenizer())


@pytest.mark.parametrize("name", ["random", *FAMILIES])
@pytest.mark.parametrize("analysis", LANGUAGE)
def test_every_language_analysis_runs_on_every_model_family(name, analysis):
    lm = family(name)
    for prompts in ("two-label", "coin"):
        result = analyses.run(analysis, lm, prompts=prompts, per_shot=8, **QUICK.get(analysis, {}))
        json.dumps(result.metrics, allow_nan=True)
        assert result.figures
    if analysis == "key-orthogonality":  # one column per key/value head, never one per query head
        assert [len(row) for row in result.metrics["trained"]] == [n_kv_heads(lm.model)] * lm.model.cfg.n_layers
        assert n_kv_heads(lm.model) == (2 if name == "llama-gqa" else 4)
    if analysis == "value-manifold":
        assert len(result.metrics["residual"]["pc12_variance"]) == lm.model.cfg.n_layers


def test_orthogonal_keys_score_zero_and_identical_keys_one():
    model = hooked()
    with torch.no_grad():
        model.blocks[0].attn.W_K.copy_(torch.eye(16)[None])  # one-hot embeddings stay one-hot keys
        model.blocks[0].attn.b_K.fill_(3.0)  # a bias every key shares is left out
    metrics = analyses.run("key-orthogonality", LanguageModel(model, "one-hot"), per_shot=5).metrics
    assert metrics["trained"] == [[pytest.approx(0.0, abs=1e-12)]]
    with torch.no_grad():
        model.blocks[0].attn.W_K.copy_(torch.ones(1, 16, 16))  # every token the same key
    metrics = analyses.run("key-orthogonality", LanguageModel(model, "one-key"), per_shot=5).metrics
    assert metrics["trained"] == [[pytest.approx(1.0, abs=1e-12)]]
    assert metrics["random_expected"] == pytest.approx(math.sqrt(2 / (math.pi * 16)), rel=0.05)


def test_uniform_attention_is_not_focused_and_attention_on_one_position_is():
    model = hooked(n_heads=2, d_head=8)
    with torch.no_grad():
        model.blocks[0].attn.W_Q.zero_()
        model.blocks[0].attn.b_Q.zero_()  # every score 0: uniform over the context
    metrics = analyses.run("attention-focusing", LanguageModel(model, "uniform"), prompts="coin", per_shot=5).metrics
    assert metrics["entropy_reduction"] == pytest.approx(0.0, abs=1e-6)  # float32 patterns
    with torch.no_grad():
        model.blocks[0].attn.b_Q.fill_(1.0)
        model.blocks[0].attn.W_K.zero_()
        model.blocks[0].attn.W_K[:, 2] = 10.0  # only the coin prompts' start token (id 2) has a key: score 80
    metrics = analyses.run("attention-focusing", LanguageModel(model, "start"), prompts="coin", per_shot=5).metrics
    assert metrics["entropy_reduction"] > 0.999
    # the normalisation: uniform over T positions is 1 at every T
    for T in (2, 7, 40):
        assert normalised_entropy(torch.full((T,), 1 / T, dtype=torch.float64)).item() == pytest.approx(1.0)


def test_manifold_numbers_on_points_whose_answer_is_known():
    rng = np.random.default_rng(0)
    entropy = rng.uniform(0, 1, 300)
    X = np.outer(entropy, rng.standard_normal(20)) + 1e-3 * rng.standard_normal((300, 20))  # a line
    share, r = pca_share_and_r(X, entropy)
    assert share > 0.999 and r > 0.999
    X = rng.standard_normal((300, 20))  # no structure: PC1 + PC2 near 2 / 20, r near 0
    share, r = pca_share_and_r(X, entropy)
    assert 0.1 < share < 0.2 and r < 0.2
    low, high = bootstrap_intervals(X, entropy, 200, seed=0)["pc12_variance_ci"]
    assert share - 0.01 < low < high < 0.25  # resamples repeat points, which inflates the top components a little
    X = np.outer(entropy, rng.standard_normal(20)) + 0.5 * rng.standard_normal((300, 20))  # a noisy line
    share, r = pca_share_and_r(X, entropy)
    ci = bootstrap_intervals(X, entropy, 200, seed=0)
    assert ci["pc12_variance_ci"][0] < share < ci["pc12_variance_ci"][1]
    assert ci["pc1_pearson_abs_ci"][0] < r < ci["pc1_pearson_abs_ci"][1] and r > 0.9


@pytest.mark.parametrize("name", ["random", *FAMILIES])
def test_only_the_last_position_is_unembedded_and_the_logits_are_the_model_s_own(name):
    from models.base import act_name

    lm = family(name)
    tokens = torch.randint(0, 20, (3, 7), generator=torch.Generator().manual_seed(0))
    names = [act_name("k", 0), act_name("resid_post", 0)]
    widths = []
    handle = lm.model.unembed.register_forward_hook(lambda module, args, out: widths.append(args[0].shape[1]))
    try:
        logits, cache = activations.last_logits(lm, tokens, names)
    finally:
        handle.remove()
    assert widths[-1] == 1  # the unembedding saw the last position alone
    whole, reference = lm.model.run_with_cache(tokens, names_filter=lambda n: n in names)
    assert torch.allclose(logits, whole[:, -1], rtol=1e-5, atol=1e-5)
    for hook in names:
        assert torch.allclose(cache[hook], reference[hook], rtol=1e-6, atol=1e-6)
    assert not lm.model.hook_dict[names[0]]._forward_hooks  # the stopping hooks are gone
    # a model that does more after its last block (here a logit soft-cap) keeps its whole forward pass
    capped = LanguageModel(native(output_logits_soft_cap=2.0), "capped")
    assert not activations.decodes_last(capped.model, tokens)
    assert torch.allclose(activations.last_logits(capped, tokens)[0], capped.model(tokens)[:, -1])


def test_wide_points_are_resampled_through_their_gram_matrix_with_the_same_numbers():
    rng = np.random.default_rng(1)
    entropy = rng.uniform(0, 1, 40)
    X = np.outer(entropy, rng.standard_normal(90)) + 0.7 * rng.standard_normal((40, 90))  # wider than many
    for idx in (np.arange(40), rng.integers(0, 40, 40)):  # a resample repeats points
        assert np.allclose(gram_share_and_r(X[idx] @ X[idx].T, entropy[idx]), pca_share_and_r(X[idx], entropy[idx]),
                           rtol=1e-9, atol=1e-12)
    seeded = np.random.default_rng(2)
    draws = [seeded.integers(0, 40, 40) for _ in range(50)]
    samples = np.array([pca_share_and_r(X[idx], entropy[idx]) for idx in draws])
    expected = np.nanpercentile(samples, [2.5, 97.5], axis=0)
    ci = bootstrap_intervals(X, entropy, 50, seed=2)  # the same draws: the generator seeded alike
    assert np.allclose(ci["pc12_variance_ci"], expected[:, 0], rtol=1e-9)
    assert np.allclose(ci["pc1_pearson_abs_ci"], expected[:, 1], rtol=1e-9)


def test_ablating_an_axis_removes_it_and_a_direction_the_answer_does_not_read_changes_nothing():
    model = hooked(d_vocab=16)
    lm = LanguageModel(model, "one-layer")
    prompt_set = two_label.token_prompts(range(2, 16), (0, 1), per_shot=6, seed=0)
    intact, _ = activations.last_positions(lm, prompt_set, [])
    # the renormalised answer reads the residual only through W_U[:, 0] - W_U[:, 1]
    readout = (model.W_U[:, 0] - model.W_U[:, 1]).detach()
    direction = torch.randn(16, generator=torch.Generator().manual_seed(1))
    direction -= (direction @ readout) / (readout @ readout) * readout
    with activations.projected_out(lm, 0, direction):
        kept, caught = activations.last_positions(lm, prompt_set, ["blocks.0.hook_resid_post"])
    assert torch.allclose(kept, intact, atol=1e-6)
    assert max(abs(x @ direction.double() / direction.norm()) for x in caught["blocks.0.hook_resid_post"]) < 1e-5
    with activations.projected_out(lm, 0, readout):  # the one direction it reads: the answer is a coin toss
        moved, _ = activations.last_positions(lm, prompt_set, [])
    assert torch.allclose(moved, torch.full_like(moved, 0.5), atol=1e-5)


def test_the_entropy_axis_analysis_reports_intact_ablated_and_random_axes():
    metrics = analyses.run("entropy-axis", family("gpt-neox"), per_shot=10, controls=3).metrics
    assert metrics["max_component_left_along_axis"] < 1e-4
    for part in ("intact", "entropy_axis"):
        assert set(metrics[part]) == {"readout_r2", "pc1_pearson_abs", "pc12_variance", "entropy_mae_bits", "kl_bits"}
    assert metrics["n_controls"] == 3 and metrics["random_axes"]["entropy_mae_bits"]["std"] is not None


@pytest.mark.parametrize("name", [*FAMILIES, "random", "wind-tunnel"])
def test_an_axis_projected_out_of_the_last_layer_is_decoded_as_the_forward_pass_answers(name):
    """entropy-axis decodes the last layer's ablated stream through the final norm and the unembedding instead of
    running the model again: the same answers and activations as the hooked forward pass, on every family."""
    from analyses import entropy_axis as ea

    if name == "wind-tunnel":
        import models
        import tasks

        task = tasks.make("bijection", V=5, L=4)
        lm = LanguageModel(models.build("transformer", task, {"d_model": 16, "n_layers": 2, "n_heads": 2}, seed=1),
                           "t", task=task)
    else:
        lm = family(name)
    prompt_set = activations.prompt_set(lm, "", "mixed", 6, 0.9, 0)
    last = lm.model.cfg.n_layers - 1
    fit, test = ea.split_halves(len(prompt_set.prompts), 0)
    _, X, _, probs = ea.measure(lm, prompt_set, last, fit, test, None)
    shortcut = ea.last_layer_shortcut(lm, last, X, probs, prompt_set.answers)
    assert shortcut is not None and ea.last_layer_shortcut(lm, last - 1, X, probs, prompt_set.answers) is None
    direction = np.random.default_rng(0).standard_normal(X.shape[1])
    direction /= np.linalg.norm(direction)
    hooked_numbers, hooked_X, _, hooked_probs = ea.measure(lm, prompt_set, last, fit, test, direction)
    decoded_numbers, decoded_X, _, decoded_probs = ea.measure(lm, prompt_set, last, fit, test, direction, shortcut)
    assert torch.allclose(decoded_probs, hooked_probs, atol=1e-5)
    assert np.allclose(decoded_X, hooked_X, atol=1e-5)
    assert decoded_numbers["entropy_mae_bits"] == pytest.approx(hooked_numbers["entropy_mae_bits"], abs=1e-5)


def test_wind_tunnel_analyses_refuse_language_models_and_language_ones_wind_tunnels():
    lm = family("random")
    with pytest.raises(AnalysisError, match="needs a wind-tunnel model.*value-manifold"):
        analyses.run("head-ablation", lm)
    import models
    import tasks

    tunnel = models.build("transformer", tasks.make("bijection", V=4, L=3), {"d_model": 16, "n_layers": 1,
                                                                           "n_heads": 2}, seed=0)
    with pytest.raises(AnalysisError, match="runs on language models"):
        analyses.run("entropy-axis", tunnel)
    # attention focusing also runs on a wind-tunnel transformer itself, on its own prompts
    direct = analyses.run("attention-focusing", tunnel, n=6, seed=3).metrics
    wrapped = analyses.run("attention-focusing", LanguageModel(tunnel, "t", task=tunnel.task), per_shot=6, seed=3)
    assert direct == wrapped.metrics
    with pytest.raises(AnalysisError, match="max_points"):
        analyses.run("value-manifold", lm, max_points=5)  # a wind-tunnel option
    with pytest.raises(AnalysisError, match="alpha"):
        analyses.run("value-manifold", lm, alpha=1.0)


@pytest.mark.parametrize("name", FAMILIES)
def test_the_cli_runs_on_a_saved_model_folder_with_its_tokenizer(tmp_path, capsys, name):
    folder = saved(name, tmp_path / f"tiny-{name}")
    capsys.readouterr()
    shown = run_cli(capsys, "run", "value-manifold", "--model", folder, "--per-shot", "6", "--bootstrap", "10",
                    "--words", "math", "--format", "json,html", "--out", tmp_path / "out")
    assert shown.code == 0, shown.err
    written = json.loads((tmp_path / "out" / f"tiny-{name}" / "value-manifold.json").read_text())
    assert written["metrics"]["prompts"] == "two-label prompts, math words" and written["model"] == str(folder)
    shown = run_cli(capsys, "run", "entropy-axis", "--model", folder, "--per-shot", "6", "--controls", "2",
                    "--format", "json", "--out", tmp_path / "out")
    assert shown.code == 0, shown.err
    import interp  # the same folder from Python

    lm = interp.load_language_model(str(folder))
    assert lm.tokenizer is not None and lm.model.cfg.n_layers == 2


def test_the_cli_says_in_one_line_what_is_wrong(tmp_path, capsys):
    folder = saved("gpt-neox", tmp_path / "tiny")
    capsys.readouterr()
    cases = [
        (["run", "head-ablation", "--model", folder], "needs a wind-tunnel model"),
        (["run", "entropy-axis", "--ckpt", "bijection-transformer-cpu"], "runs on language models"),
        (["run", "entropy-axis"], "pass --model"),
        (["run", "value-manifold", "--model", tmp_path], "no config.json"),
        (["run", "value-manifold", "--model", "nobody/no-such-model"], "nor a model TransformerLens knows"),
        (["run", "value-manifold", "--model", "EleutherAI/pythia-14m"], "local Hugging Face cache"),
        (["run", "value-manifold", "--model", folder, "--words", "klingon"], "shipped domain"),
        (["run", "value-manifold", "--model", folder, "--ckpt", "x"], "not both"),
    ]
    for args, message in cases:
        shown = run_cli(capsys, *args)
        assert shown.code != 0 and message in shown.err, (args, shown.err)
        # one line (after the progress of loading the weights, when it got that far)
        assert "Traceback" not in shown.err and shown.err.count("error") == 1, shown.err
        assert message in shown.err.strip().splitlines()[-1]


def test_help_shows_the_language_model_options(capsys):
    shown = run_cli(capsys, "run", "value-manifold", "--help")
    assert shown.code == 0 and "--model MODEL" in shown.out and "--bootstrap" in shown.out
    shown = run_cli(capsys, "run", "entropy-axis", "--help")
    assert shown.code == 0 and "--ckpt" not in shown.out and "--per-shot" in shown.out


def test_a_wind_tunnel_transformers_own_prompts_give_the_calibration_analysis_numbers():
    """The sanity row: cut at its queries, a wind-tunnel model's held-out sequences are prompts whose
    answer distribution scores exactly what the calibration analysis measures on the same sequences."""
    import models
    import tasks

    task = tasks.make("bijection", V=6, L=5)
    model = models.build("transformer", task, {"d_model": 16, "n_layers": 2, "n_heads": 2}, seed=3).eval()
    expected = analyses.run("calibration", model, n=30, seed=5).metrics
    lm = LanguageModel(model, "tiny-bijection", task=task)
    measured = analyses.run("entropy-axis", lm, per_shot=30, seed=5, controls=1).metrics["intact"]
    assert measured["entropy_mae_bits"] == pytest.approx(expected["entropy_mae_bits"], rel=1e-4)
    assert measured["kl_bits"] == pytest.approx(expected["kl_bits"], rel=1e-3)
    direct = analyses.run("calibration", lm, per_shot=30, seed=5).metrics  # calibration --model, same numbers
    assert direct["entropy_mae_bits"] == pytest.approx(expected["entropy_mae_bits"], rel=1e-4)
    assert direct["kl_bits"] == pytest.approx(expected["kl_bits"], rel=1e-3)
    for name in LANGUAGE:  # every language diagnostic runs on the wind-tunnel prompts
        assert analyses.run(name, lm, per_shot=6, **QUICK.get(name, {})).figures
    with pytest.raises(AnalysisError, match="discrete task"):
        regression = tasks.make("regression", d=2, n=4)
        analyses.run("attention-focusing", LanguageModel(
            models.build("transformer", regression, {"d_model": 16, "n_layers": 1, "n_heads": 2}, seed=0), "r",
            task=regression))


def test_the_cli_takes_a_shipped_wind_tunnel_transformer_as_a_model(tmp_path, capsys):
    shown = run_cli(capsys, "run", "attention-focusing", "--model", "bijection-transformer-cpu", "--per-shot", "5",
                    "--format", "json", "--out", tmp_path)
    assert shown.code == 0, shown.err
    written = json.loads((tmp_path / "bijection-transformer-cpu" / "attention-focusing.json").read_text())
    assert len(written["metrics"]["by_head"]) == 2
    shown = run_cli(capsys, "run", "attention-focusing", "--model", "bijection-mamba-cpu")
    assert shown.code == 1 and "takes TransformerLens models" in shown.err


@pytest.mark.parametrize("prompts", ["two-label", "coin"])
def test_calibration_on_a_language_model_is_the_brute_force_one(prompts):
    lm = family("llama-gqa")
    result = analyses.run("calibration", lm, prompts=prompts, per_shot=6, alpha=0.8, seed=2)
    prompt_set = activations.prompt_set(lm, prompts, "mixed", 6, 0.8, 2)
    mae, kl = brute_force_calibration(lm, prompt_set, 0.8 if prompts == "two-label" else None)
    assert result.metrics["entropy_mae_bits"] == pytest.approx(mae, rel=1e-6)
    assert result.metrics["kl_bits"] == pytest.approx(kl, rel=1e-6)
    for name, value in (("entropy_mae_bits", mae), ("kl_bits", kl)):  # a 95% interval over prompts around each
        low, high = result.metrics["intervals"][name]
        assert low < value < high
    by_shots = result.metrics["by_shots"]
    assert sorted(by_shots) == ([0, 1, 2, 4, 8] if prompts == "two-label" else [0, 1, 2, 4, 8, 16])
    assert by_shots[0]["uniform_kl_bits"] == pytest.approx(0.0, abs=1e-12)  # nothing shown: Bayes says 50/50
    assert all(0 < row["answer_mass"] <= 1 for row in by_shots.values())
