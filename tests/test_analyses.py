"""Every diagnostic on a constructed model or input whose answer is known."""
import math

import pytest
import torch

import analyses
import models
import tasks
from analyses import calibration
from analyses import key_orthogonality as ko


class PosteriorOracle:
    """A predictor that states a fixed function of the exact posterior (for calibration ground truth)."""

    def __init__(self, task, transform):
        self.task, self.transform = task, transform
        self.batch = None

    def answer_probs(self, tokens):
        return self.transform(self.batch.posterior[: len(tokens)])


def test_calibration_of_the_exact_posterior_is_zero():
    task = tasks.make("bijection", V=10, L=9)
    batch = task.sample(300, generator=torch.Generator().manual_seed(0))
    oracle = PosteriorOracle(task, lambda p: p)
    oracle.batch = batch
    numbers = calibration.measure(oracle, batch)
    assert numbers["entropy_mae_bits"] == pytest.approx(0, abs=1e-6)
    assert numbers["kl_bits"] == pytest.approx(0, abs=1e-6)
    assert numbers["infeasible_mass"] == 0
    assert numbers["bayes_accuracy"] == pytest.approx(sum(1 / (10 - t) for t in range(9)) / 9, rel=1e-6)


def test_calibration_of_a_uniform_predictor_matches_the_closed_form():
    V, L = 10, 9
    task = tasks.make("bijection", V=V, L=L)
    batch = task.sample(200, generator=torch.Generator().manual_seed(0))
    oracle = PosteriorOracle(task, lambda p: torch.full_like(p, 1 / V))
    oracle.batch = batch
    numbers = calibration.measure(oracle, batch, intervals=True)
    # At the t-th key: |log2 V - log2(V-t+1)|, and KL(uniform over n || uniform over V) = log2(V/n).
    expected = sum(math.log2(V) - math.log2(V - t + 1) for t in range(1, L + 1)) / L
    assert numbers["entropy_mae_bits"] == pytest.approx(expected, rel=1e-5)
    # every sequence has the same error, so resampling sequences cannot move it: the interval is a point
    assert numbers["intervals"]["entropy_mae_bits"] == pytest.approx([expected, expected], rel=1e-5)
    # the accuracy of sampled answers does vary by sequence: its interval is the binomial one, about
    low, high = numbers["intervals"]["accuracy"]
    assert low < numbers["accuracy"] < high and high - low < 4 * 1.96 * (0.25 / numbers["n_queries"]) ** 0.5
    assert numbers["kl_bits"] == pytest.approx(expected, rel=1e-5)
    assert numbers["per_position"]["bayes_entropy_bits"][0] == pytest.approx(math.log2(V))


def test_cosine_statistic_on_known_matrices():
    eye = torch.eye(6)
    assert ko.mean_abs_offdiagonal(ko.cosine_matrices(eye)).item() == 0
    same = torch.ones(5, 3)
    assert ko.mean_abs_offdiagonal(ko.cosine_matrices(same)).item() == pytest.approx(1)
    mixed = torch.tensor([[1.0, 0], [0, 1], [1, 1]])  # cosines 0, 1/sqrt2, 1/sqrt2
    assert ko.mean_abs_offdiagonal(ko.cosine_matrices(mixed)).item() == pytest.approx(2 / 3 / math.sqrt(2))


def test_random_baseline_matches_theory():
    mean, std, _ = ko.random_baseline(20, 16, draws=400)
    assert mean == pytest.approx(ko.expected_abs_cos(16), rel=0.03)
    assert ko.expected_abs_cos(1000) == pytest.approx(math.sqrt(2 / (math.pi * 1000)), rel=1e-3)


def orthogonal_key_model():
    """A transformer whose layer-0 value-token keys are exactly orthogonal in head 0."""
    task = tasks.make("bijection", V=8, L=7)
    model = models.build("transformer", task, config=dict(d_model=32, n_layers=1, n_heads=2), seed=0)
    with torch.no_grad():
        d = 32
        W_E = torch.zeros(16, d)
        for i in range(8):  # value token 8+i -> (e_2i - e_2i+1): zero mean, so LayerNorm keeps the direction
            W_E[8 + i, 2 * i], W_E[8 + i, 2 * i + 1] = 1.0, -1.0
        W_E[:8] = torch.randn(8, d)
        model.embed.W_E.copy_(W_E)
        model.blocks[0].ln1.w.fill_(1.0)
        model.blocks[0].ln1.b.zero_()
        W_K = torch.zeros(2, d, 16)
        W_K[0, :16, :16] = torch.eye(16)  # head 0 reads coordinates 0..15: exactly the value embeddings
        W_K[1] = torch.randn(d, 16)
        model.blocks[0].attn.W_K.copy_(W_K)
    return model.eval()


def test_orthogonal_keys_score_zero():
    model = orthogonal_key_model()
    result = analyses.run("key-orthogonality", model)
    trained = result.metrics["groups"]["values"]["trained"]
    assert trained[0][0] == pytest.approx(0, abs=1e-6)
    assert trained[0][1] > 0.05  # the random head is not orthogonal
    assert set(result.figures) == {"cosine-heatmap", "per-head", "distribution"}
    heat = result.figures["cosine-heatmap"].data[0].z
    assert heat.shape == (8, 8) and abs(heat - torch.eye(8).numpy()).max() < 1e-5


def test_key_orthogonality_compares_with_init_and_random(small_model):
    result = analyses.run("key-orthogonality", small_model)
    values = result.metrics["groups"]["values"]
    # The model *is* its own init here (untrained, same seed), so trained == init exactly.
    assert values["trained"] == values["init"]
    assert values["random_mean"] == pytest.approx(ko.expected_abs_cos(16), rel=0.05)
    assert "LN_l(W_E[i]) @ W_K[l, h]" in result.definition


def test_analysis_options_are_validated(small_model):
    with pytest.raises(analyses.AnalysisError, match="valid analyses"):
        analyses.run("telepathy", small_model)
    with pytest.raises(analyses.AnalysisError, match="unknown option"):
        analyses.run("calibration", small_model, colour="red")
    with pytest.raises(analyses.AnalysisError, match="out of range"):
        analyses.run("key-orthogonality", small_model, layer=5)
    with pytest.raises(analyses.AnalysisError, match="this task has: values, keys"):
        analyses.run("key-orthogonality", small_model, group="queries")


def test_calibration_run_on_a_model(small_model):
    result = analyses.run("calibration", small_model, n=64)
    m = result.metrics
    assert 0 <= m["entropy_mae_bits"] < 3 and m["kl_bits"] >= 0 and 0 <= m["accuracy"] <= 1
    assert len(m["per_position"]["model_entropy_bits"]) == 7
    assert set(result.figures) == {"staircase", "error-by-position"}


def test_calibration_says_which_accuracy_is_sampled(small_model, tmp_path):
    import json

    from interp.export import write_result

    result = analyses.run("calibration", small_model, n=32)
    assert "sampled" in result.descriptions["accuracy"] and "not sampled" in result.descriptions["bayes_accuracy"]
    assert "accuracy (sampled)" in result.definition and "bayes_accuracy (expected, not sampled)" in result.definition
    write_result(result, tmp_path, ("json", "html"))
    written = json.loads((tmp_path / "calibration.json").read_text())
    assert written["descriptions"] == result.descriptions and "accuracy" in written["metrics"]  # keys unchanged
    assert "expected, not sampled" in (tmp_path / "calibration.html").read_text()
