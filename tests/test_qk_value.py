"""QK alignment and value manifold on constructed models and inputs whose answer is known."""
import json
import math

import numpy as np
import pytest
import torch

import analyses
import models
import tasks
from analyses import qk_alignment as qk
from analyses import value_manifold as vm

V, L, N = 6, 5, 48


def one_layer_model():
    """A 1-layer, 1-head bijection model whose value tokens' keys are orthogonal: value v has the
    zero-mean embedding e_2v - e_2v+1 (LayerNorm keeps its direction) and W_K is the identity."""
    task = tasks.make("bijection", V=V, L=L)
    model = models.build("transformer", task, config=dict(d_model=16, n_layers=1, n_heads=1), seed=0)
    with torch.no_grad():
        W_E = torch.randn(2 * V, 16, generator=torch.Generator().manual_seed(0))
        for v in range(V):
            W_E[V + v] = 0
            W_E[V + v, 2 * v], W_E[V + v, 2 * v + 1] = 1.0, -1.0
        model.embed.W_E.copy_(W_E)
        model.blocks[0].ln1.w.fill_(1.0)
        model.blocks[0].ln1.b.zero_()
        model.blocks[0].attn.W_K[0].copy_(torch.eye(16))
        model.blocks[0].attn.b_K.zero_()
    return model.eval()


def value_direction(*values):
    out = torch.zeros(16)
    for v in values:
        out[2 * v], out[2 * v + 1] = 1.0, -1.0
    return out


def test_a_fixed_query_has_the_hand_computed_gap():
    model = one_layer_model()
    with torch.no_grad():  # q = b_Q at every position: the keys of values 0 and 1, summed
        model.blocks[0].attn.W_Q.zero_()
        model.blocks[0].attn.b_Q[0].copy_(value_direction(0, 1))
    result = analyses.run("qk-alignment", model, n=N, seed=7)
    m = result.metrics

    # By hand: cos(q, k_v) = 2 / (|q| |k_v|) = 2 / (2 * sqrt 2) = 1/sqrt2 for v in {0, 1}, else 0.
    # At the t-th key the revealed values are the first t-1 of the sequence.
    c = 1 / math.sqrt(2)
    batch = analyses.base.eval_batch(model, N, 7)
    values = batch.hypothesis["values"].tolist()
    sums = {t: [0.0, 0.0] for t in range(2, L + 1)}
    for row in values:
        for t in range(2, L + 1):
            revealed = set(row[:t - 1])
            feasible = set(range(V)) - revealed
            sums[t][0] += c * len(feasible & {0, 1}) / len(feasible)
            sums[t][1] += c * len(revealed & {0, 1}) / len(revealed)
    pp = m["per_position"]
    assert pp["gap"][0][0][0] is None and pp["n_counted"][0] == 0  # nothing eliminated at the first key
    for t in range(2, L + 1):
        f, e = sums[t][0] / N, sums[t][1] / N
        assert pp["feasible_cos"][0][0][t - 1] == pytest.approx(f, abs=1e-6)
        assert pp["eliminated_cos"][0][0][t - 1] == pytest.approx(e, abs=1e-6)
        assert pp["gap"][0][0][t - 1] == pytest.approx(f - e, abs=1e-6)
    overall_f = sum(s[0] for s in sums.values()) / (N * (L - 1))
    overall_e = sum(s[1] for s in sums.values()) / (N * (L - 1))
    assert m["per_head"]["feasible_cos"][0][0] == pytest.approx(overall_f, abs=1e-6)
    assert m["per_head"]["gap"][0][0] == pytest.approx(overall_f - overall_e, abs=1e-6)
    assert m["gap_first_layer"] == m["gap_last_layer"] == pytest.approx(overall_f - overall_e, abs=1e-6)
    assert abs(overall_f - overall_e) > 0.01  # a non-trivial answer
    # score = q . k / sqrt(d_head), with |q| = 2 and |k| = sqrt2 / sqrt(2/16 + eps) after LayerNorm
    k_norm = math.sqrt(2) / math.sqrt(2 / 16 + model.cfg.eps)
    assert m["per_head"]["score_gap"][0][0] == pytest.approx((overall_f - overall_e) * 2 * k_norm / 4, rel=1e-5)
    assert m["n_counted_queries"] == N * (L - 1) and m["n_queries"] == N * L


def test_zero_queries_and_keys_give_no_gap_and_uniform_attention():
    model = one_layer_model()
    with torch.no_grad():
        for name in ("W_Q", "b_Q", "W_K", "b_K"):
            getattr(model.blocks[0].attn, name).zero_()
    m = analyses.run("qk-alignment", model, n=N).metrics
    assert m["per_head"]["gap"][0][0] == 0 and m["per_head"]["feasible_cos"][0][0] == 0
    pp = m["per_position"]
    for t in range(1, L + 1):  # the t-th key sits at position 2(t-1) and attends to 2t-1 positions
        attended = 2 * t - 1
        assert pp["position"][t - 1] == 2 * (t - 1)
        assert pp["attention_entropy_bits"][0][0][t - 1] == pytest.approx(math.log2(attended), abs=1e-5)
        assert pp["uniform_attention_entropy_bits"][t - 1] == pytest.approx(math.log2(attended))
        mass = pp["attention_mass"]
        assert mass["self"][0][0][t - 1] == pytest.approx(1 / attended, abs=1e-6)
        assert mass["earlier_values"][0][0][t - 1] == pytest.approx((t - 1) / attended, abs=1e-6)
        assert mass["earlier_keys"][0][0][t - 1] == pytest.approx((t - 1) / attended, abs=1e-6)
        assert mass["earlier_other"][0][0][t - 1] == pytest.approx(0, abs=1e-9)
    assert m["per_head"]["attention_entropy_fraction_of_uniform"][0][0] == pytest.approx(1, abs=1e-5)
    assert m["attention_entropy_first_layer_bits"] == pytest.approx(
        sum(math.log2(2 * t - 1) for t in range(1, L + 1)) / L, abs=1e-5)


def test_attention_entropy_of_known_patterns():
    p = torch.tensor([[1.0, 0, 0, 0], [0.5, 0.5, 0, 0], [0.25, 0.25, 0.25, 0.25]])
    assert qk.attention_entropy_bits(p).tolist() == pytest.approx([0, 1, 2])


def test_qk_alignment_runs_and_serialises(small_model):
    result = analyses.run("qk-alignment", small_model, n=32)
    m = result.metrics
    assert set(result.figures) == {"gap-by-layer", "gap-by-position", "attention-entropy", "attention-mass"}
    assert m["group"] == "values" and m["n_hypotheses"] == 8
    assert len(m["per_head"]["gap"]) == 2 and len(m["per_head"]["gap"][0]) == 2
    assert len(m["per_position"]["gap"][1][1]) == 7 and len(m["per_position"]["layer_mean"]["gap"][0]) == 7
    for l in range(2):
        for h in range(2):
            total = sum(m["per_head"]["attention_mass"][k][l][h] for k in m["per_head"]["attention_mass"])
            assert total == pytest.approx(1, abs=1e-5)
            assert m["per_head"]["gap"][l][h] == pytest.approx(
                m["per_head"]["feasible_cos"][l][h] - m["per_head"]["eliminated_cos"][l][h], abs=1e-9)
    assert_complete(result, "posterior_c == 0")


def test_qk_alignment_refuses_tasks_without_eliminated_hypotheses():
    regression = models.build("transformer", tasks.make("regression", d=2, n=4),
                              config=dict(d_model=16, n_layers=1, n_heads=2), seed=0).eval()
    with pytest.raises(analyses.AnalysisError, match="qk-alignment needs a task with a hypothesis frame"):
        analyses.run("qk-alignment", regression, n=8)
    hmm = models.build("transformer", tasks.make("hmm", K=3),
                       config=dict(d_model=16, n_layers=1, n_heads=2), seed=0).eval()
    with pytest.raises(analyses.AnalysisError, match="whose posterior can rule hypotheses out"):
        analyses.run("qk-alignment", hmm, n=8)
    # the declaration is true: no HMM query ever rules a hidden state out
    assert (tasks.make("hmm", K=3).sample(64).posterior > 0).all()


def test_pca_finds_an_entropy_direction():
    rng = np.random.default_rng(0)
    entropy = rng.uniform(0, 4, size=600)
    X = np.concatenate([10 * entropy[:, None], 0.1 * rng.standard_normal((600, 7))], axis=1)
    X = X @ np.linalg.qr(rng.standard_normal((8, 8)))[0]  # rotated: the direction is not an axis
    fit, test = vm.split_halves(600, seed=0)
    numbers, scores = vm.stream_stats(X, entropy, fit, test)
    assert numbers["pc1_pearson_abs"] == pytest.approx(1, abs=1e-3)
    assert numbers["pc1_spearman_abs"] == pytest.approx(1, abs=1e-3)
    assert numbers["readout_r2"] == pytest.approx(1, abs=1e-3)
    assert numbers["pc1_variance"] > 0.99 and numbers["pc12_variance"] >= numbers["pc1_variance"]
    assert numbers["pc1_pearson_sign"] in (1, -1) and scores.shape == (600, 2)
    # the sign is reported separately and follows the (arbitrary) orientation of PC1
    assert numbers["pc1_pearson_sign"] == np.sign(np.corrcoef(scores[:, 0], entropy)[0, 1])


def test_pca_of_noise_or_a_constant():
    rng = np.random.default_rng(1)
    entropy = rng.uniform(0, 4, size=600)
    fit, test = vm.split_halves(600, seed=0)
    noise, _ = vm.stream_stats(rng.standard_normal((600, 8)), entropy, fit, test)
    assert noise["pc1_pearson_abs"] < 0.15 and noise["readout_r2"] < 0.05
    constant, _ = vm.stream_stats(np.ones((600, 8)), entropy, fit, test)
    assert constant["pc1_variance"] is None and constant["pc1_pearson_abs"] is None
    json.dumps(constant, allow_nan=False)
    assert set(fit).isdisjoint(test) and len(fit) + len(test) == 600


def test_value_manifold_runs_and_serialises(small_model):
    result = analyses.run("value-manifold", small_model, n=32, max_points=50)
    m = result.metrics
    assert set(result.figures) == {"pca", "pca-by-position", "entropy-readout"}  # a page per colouring
    assert m["n_points"] == 32 * 7 and m["n_points_shown"] == 50 and m["skipped"] == {}
    for stream in ("residual", "attention_out"):
        table = m["streams"][stream]
        assert set(table) >= {"pc1_variance", "pc12_variance", "pc1_pearson_abs", "pc1_pearson_sign",
                              "pc1_spearman_abs", "pc1_spearman_sign", "readout_r2"}
        assert len(table["readout_r2"]) == 2
    assert m["final_residual_readout_r2"] == m["streams"]["residual"]["readout_r2"][-1]
    scatter = result.figures["pca"]
    assert len(scatter.data) == 4 and len(scatter.data[0].x) == 50  # a row per stream, a panel per layer
    assert scatter.data[0].customdata.shape == (50, 4)  # sequence, position, entropy, top posterior
    by_position = result.figures["pca-by-position"]  # the same points, coloured by token position
    assert list(by_position.data[0].x) == list(scatter.data[0].x)
    assert list(by_position.data[0].marker.color) == list(scatter.data[0].customdata[:, 1])
    assert by_position.layout.coloraxis.colorbar.title.text == "token position"
    assert_complete(result, "random half")


def test_value_manifold_on_a_continuous_task():
    model = models.build("transformer", tasks.make("regression", d=2, n=4),
                         config=dict(d_model=16, n_layers=1, n_heads=2), seed=0).eval()
    result = analyses.run("value-manifold", model, n=32)
    assert result.metrics["final_residual_pc1_variance"] > 0
    assert result.figures["pca"].data[0].customdata.shape[1] == 3  # no top posterior
    json.dumps(result.metrics, allow_nan=False)


def test_value_manifold_on_the_hmm_also_colours_the_points_by_their_true_state():
    task = tasks.make("hmm", S=3, O=4, K=6)
    model = models.build("transformer", task, config=dict(d_model=16, n_layers=2, n_heads=2), seed=0).eval()
    result = analyses.run("value-manifold", model, n=40, max_points=100)
    assert "pca-by-states" in result.figures
    by_state = result.figures["pca-by-states"]
    plain = result.figures["pca"]
    for layer in range(4):  # each panel's points, split into one trace per state, are the same points
        traces = [t for t in by_state.data if t.xaxis == plain.data[layer].xaxis]
        assert sorted(t.name for t in traces) == [f"state {c}" for c in range(len(traces))] and len(traces) <= 3
        assert sum(len(t.x) for t in traces) == len(plain.data[layer].x) == 100
        assert sorted(x for t in traces for x in t.x) == sorted(plain.data[layer].x)
    batch = analyses.base.eval_batch(model, 40, 1234)
    states = analyses.value_manifold.latent_at_queries(task, batch)
    assert len(states) == int(batch.query_mask.sum()) and set(states.tolist()) <= {0, 1, 2}


def test_options_are_listed():
    assert analyses.options("qk-alignment") == {"n": 500, "seed": 1234}
    assert analyses.options("value-manifold") == {"n": 1000, "seed": 1234, "max_points": 600}


def assert_complete(result, phrase: str) -> None:
    """Strict JSON numbers, the definition in words, and a title on every figure."""
    json.dumps(result.metrics, allow_nan=False)
    assert phrase in result.definition
    for fig in result.figures.values():
        assert fig.layout.title.text


def test_value_manifold_untrained_baseline_is_the_model_itself_at_init():
    model = models.build("transformer", tasks.make("bijection", V=6, L=5),
                         config=dict(d_model=16, n_layers=2, n_heads=2), seed=3).eval()
    m = analyses.run("value-manifold", model, n=64).metrics
    assert m["final_residual_readout_r2_untrained"] == m["final_residual_readout_r2"]
    with torch.no_grad():  # a trained model differs from its twin
        model.blocks[1].mlp.W_out.mul_(3)
    m = analyses.run("value-manifold", model, n=64).metrics
    assert m["final_residual_readout_r2_untrained"] != m["final_residual_readout_r2"]


def test_qk_gaps_carry_bootstrap_intervals(small_model):
    m = analyses.run("qk-alignment", small_model, n=64).metrics
    for gap, ci in [(m["gap_first_layer"], m["gap_first_layer_ci95"]), (m["gap_last_layer"], m["gap_last_layer_ci95"])]:
        assert ci[0] <= gap <= ci[1] and ci[0] < ci[1]  # an interval around the estimate, not a point
    assert m["layer_mean"]["gap_ci95"][0] == m["gap_first_layer_ci95"] and m["bootstrap_resamples"] == qk.BOOTSTRAP
    assert len(m["per_head"]["gap_ci95"]) == 2 and len(m["per_head"]["gap_ci95"][0][0]) == 2
    by_position = m["per_position"]["layer_mean"]
    assert all(ci is None or ci[0] <= g <= ci[1] + 1e-12
               for g, ci in zip(by_position["gap"][1], by_position["gap_ci95"][1]))
    # the same per-sequence value everywhere: every resample gives it, so the interval is that point
    same = dict(head=torch.full((5, 1, 2), 0.3, dtype=torch.float64),
                query=torch.full((5, 1, 3), 0.2, dtype=torch.float64), valid=torch.ones(5, 3))
    intervals = qk.bootstrap_gaps(same, seed=0, resamples=20)
    assert intervals["layer_mean"][0] == pytest.approx([0.1, 0.1]) and intervals["per_position"][0][0] == pytest.approx(
        [0.2 / 2, 0.2 / 2])
