"""The 95% bootstrap intervals of belief-state, advantage-law, em-dynamics and length-generalization, on constructed
cases whose answer is known: each interval holds its point estimate, is the same for the same seed, narrows with
more sequences, covers a known true value, and resamples whole sequences (not the queries inside one)."""
import random

import numpy as np
import pytest
import torch

import analyses
import models
import tasks
from analyses import advantage_law, belief_state, em_dynamics, length_generalization
from analyses.intervals import bootstrap_interval


# -- belief-state: R² and RMSE of a read-out, resampling held-out sequences ----------------------------------------
def noisy_read_out(n_sequences: int, per_sequence: int = 10, C: int = 4, noise: float = 0.1, seed: int = 0):
    """Dirichlet(1) beliefs and a read-out off by N(0, noise²) in every coordinate: its population R² is
    1 - C noise² / (sum of the coordinates' variances, C (C - 1) / (C² (C + 1)))."""
    rng = np.random.default_rng(seed)
    y = rng.dirichlet(np.ones(C), size=n_sequences * per_sequence)
    prediction = y + rng.normal(0, noise, y.shape)
    owner = np.repeat(np.arange(n_sequences), per_sequence)
    true_r2 = 1 - C * noise ** 2 / ((C - 1) / (C * (C + 1)))
    return y, prediction, owner, true_r2


def test_the_r2_and_rmse_of_the_summed_columns_are_held_out_scores():
    rng = np.random.default_rng(1)
    y = rng.dirichlet(np.ones(3), size=400)
    x = np.hstack([y @ rng.normal(size=(3, 8)), rng.normal(size=(400, 4))])
    train, test = np.arange(200), np.arange(200, 400)
    r2, rmse, prediction = belief_state.held_out_scores(x, y, train, test)
    sums = belief_state.score_columns(y[test], [prediction], np.repeat(np.arange(20), 10)).sum(0)
    assert belief_state.scores_of_sums(sums, 1, 3).tolist() == pytest.approx([r2, rmse], rel=1e-9)


def test_the_r2_interval_holds_its_estimate_repeats_narrows_and_covers_the_true_r2():
    covered = 0
    for seed in range(20):
        y, prediction, owner, true_r2 = noisy_read_out(100, seed=seed)
        (low, high), _ = belief_state.score_intervals(y, [prediction], owner)[0]
        r2 = belief_state.scores_of_sums(belief_state.score_columns(y, [prediction], owner).sum(0), 1, 4)[0]
        assert low <= r2 <= high
        covered += low <= true_r2 <= high
    assert covered >= 16  # 95% intervals: 19 of 20 expected; below 16 has probability < 0.02
    y, prediction, owner, _ = noisy_read_out(100)
    assert belief_state.score_intervals(y, [prediction], owner) == belief_state.score_intervals(y, [prediction], owner)
    def width(n):
        y, prediction, owner, _ = noisy_read_out(n)
        low, high = belief_state.score_intervals(y, [prediction], owner)[0][0]
        return high - low
    assert 0.35 < width(400) / width(100) < 0.65  # 4x the sequences: about half as wide


def test_the_r2_interval_resamples_sequences_not_the_points_inside_them():
    y, prediction, owner, _ = noisy_read_out(60, per_sequence=1)
    once = belief_state.score_intervals(y, [prediction], owner)
    # each sequence's point ten times over: the same sequences, so the same interval (points as independent
    # draws would narrow it by sqrt(10))
    ten = belief_state.score_intervals(np.repeat(y, 10, 0), [np.repeat(prediction, 10, 0)], np.repeat(owner, 10))
    assert np.allclose(np.array(once, dtype=float), np.array(ten, dtype=float), rtol=1e-9)


def test_belief_state_reports_intervals_that_hold_every_r2():
    task = tasks.make("hmm", S=3, K=6)
    model = models.build("transformer", task, config=dict(d_model=16, n_layers=2, n_heads=2), seed=0).eval()
    m = analyses.run("belief-state", model, n=40, seed=1).metrics
    per = m["per_layer"]
    assert m["n_test_sequences"] == 20 and m["n_test_points"] == 20 * 6
    for key in ("r2", "untrained_r2", "shuffled_r2", "rmse"):
        assert m["intervals"][key] == per[f"{key}_interval"][-1]
        for value, (low, high) in zip(per[key], per[f"{key}_interval"]):
            assert low <= value <= high, key


# -- advantage-law and em-dynamics: gradient signals summed over sequences -----------------------------------------
def test_a_head_s_spread_interval_is_the_bootstrap_of_its_per_sequence_means():
    n, L, H, positions, groups = 50, 2, 3, 7, ["self", "earlier_other"]
    columns = torch.rand(n, 4 + len(groups), L, H, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    bounds = advantage_law.signal_intervals(columns, positions, groups)
    # the same resamples as bootstrap_interval: the interval of a mean over sequences is exactly its
    assert bounds["advantage_spread"][1][2] == pytest.approx(
        bootstrap_interval(columns[:, 0, 1, 2] / positions, torch.ones(n)), rel=1e-12)
    low, high = bootstrap_interval(columns[:, 2, 0, 1], torch.ones(n))
    # an RMS: the root of the mean's interval (to the percentile's interpolation between two resamples)
    assert bounds["value_grad_norm"][0][1] == pytest.approx([low ** 0.5, high ** 0.5], rel=1e-6)
    assert bounds["share_self"][0][0] == pytest.approx(bootstrap_interval(columns[:, 4, 0, 0], columns[:, 3, 0, 0]),
                                                       rel=1e-12)
    same = columns[:1].expand(n, -1, -1, -1)  # every sequence alike: nothing to resample
    point = advantage_law.signals_of_sums(same.sum(0), n, positions, groups)
    flat = advantage_law.signal_intervals(same, positions, groups)
    assert flat["model_mean_advantage_spread"] == pytest.approx([point["model_mean_advantage_spread"].item()] * 2,
                                                                rel=1e-12)


def test_advantage_law_reports_intervals_that_hold_its_numbers():
    task = tasks.make("bijection", **tasks.REGISTRY["bijection"].small_config(random.Random(3)))
    model = models.build("transformer", task, {"d_model": 16, "n_layers": 2, "n_heads": 2}, seed=1)
    m = analyses.run("advantage-law", model, n=12, chunk=5).metrics
    assert m["n_sequences"] == 12
    for key in advantage_law.SIGNALS:
        for values, bounds in zip(m[key], m["intervals"][key]):
            assert all(low - 1e-12 <= v <= high + 1e-12 for v, (low, high) in zip(values, bounds)), key
        for v, (low, high) in zip(m["layer_mean"][key], m["intervals"]["layer_mean"][key]):
            assert low - 1e-12 <= v <= high + 1e-12
    for name, rows in m["gradient_share"].items():
        for values, bounds in zip(rows, m["intervals"]["gradient_share"][name]):
            assert all(low - 1e-12 <= v <= high + 1e-12 for v, (low, high) in zip(values, bounds)), name
    # chunks change neither the numbers nor their intervals
    again = analyses.run("advantage-law", model, n=12, chunk=12).metrics["intervals"]
    assert np.allclose(np.array(again["value_grad_norm"]), np.array(m["intervals"]["value_grad_norm"]), rtol=1e-9)


def em_columns(routing_falls_at: int, precision_falls_at: int, n: int = 40, steps: int = 8, noise: float = 0.05):
    """Per-sequence columns [n, checkpoints, K, L=1, H=1] whose routing (spread) and precision (value gradient)
    curves drop by 100x at the given checkpoints, with a little per-sequence noise."""
    g = torch.Generator().manual_seed(0)
    columns = torch.ones(n, steps, 5, 1, 1, dtype=torch.float64)
    for kind, falls in ((0, routing_falls_at), (2, precision_falls_at)):
        columns[:, falls:, kind] = 0.01
        columns[:, :, kind] *= 1 + noise * torch.rand(n, steps, 1, 1, generator=g, dtype=torch.float64)
    return columns


def test_settling_steps_are_resampled_with_the_curves_and_the_share_says_how_firm_the_order_is():
    steps = [0, 100, 200, 300, 400, 500, 600, 700]
    intervals, share = em_dynamics.curve_intervals(em_columns(2, 6), steps, positions=1, groups=["self"])
    assert intervals["settling_steps"] == dict(routing=[200, 200], precision=[600, 600], score_gradient=[0, 0])
    assert share == 1.0
    assert em_dynamics.curve_intervals(em_columns(6, 2), steps, 1, ["self"])[1] == 0.0
    routing = intervals["routing_signal"]
    assert all(low <= high for low, high in routing) and routing[0][0] > 0.9 and routing[-1][1] < 0.0106
    assert em_dynamics.on_checkpoint_grid(steps, 150.5, 420.0) == [100, 500]  # outward to checkpoints


# -- length-generalization: per-position error and the mean past the training length -------------------------------
def test_the_per_position_intervals_are_each_column_s_bootstrap_and_the_beyond_mean_holds_its_estimate():
    g = torch.Generator().manual_seed(0)
    error = torch.rand(200, 6, generator=g, dtype=torch.float64)
    asked = torch.ones(200, 6, dtype=torch.float64)
    by_position, beyond = length_generalization.position_intervals(dict(abs_error=error, asked=asked), 4)
    for c in range(6):
        assert by_position[c] == pytest.approx(bootstrap_interval(error[:, c], asked[:, c]), rel=1e-12)
    assert beyond[0] <= error[:, 4:].mean().item() <= beyond[1]
    assert 0.5 - 0.05 < beyond[0] < 0.5 < beyond[1] < 0.5 + 0.05  # U(0, 1) errors: the true mean is 0.5
    assert length_generalization.position_intervals(dict(abs_error=error, asked=asked), 6)[1] is None


def test_length_generalization_states_its_intervals_and_counts():
    task = tasks.make("hmm", S=3, K=6)
    model = models.build("transformer", task, config=dict(d_model=16, n_layers=2, n_heads=2, n_ctx=64), seed=0).eval()
    m = analyses.run("length-generalization", model, lengths="6,9", n=30, seed=1).metrics
    longer = m["lengths"]["9"]
    assert (longer["n_sequences"], longer["n_queries"], longer["n_beyond_training_queries"]) == (30, 30 * 9, 30 * 3)
    for key in ("entropy_mae_bits", "kl_bits", "beyond_training_mae_bits"):
        low, high = longer["intervals"][key]
        assert low <= longer[key] <= high, key
    assert len(longer["intervals"]["abs_error_bits"]) == 9
    assert m["lengths"]["6"]["intervals"]["beyond_training_mae_bits"] is None
