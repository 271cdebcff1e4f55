"""Uncertainty on the geometric diagnostics (key-orthogonality, attention-focusing, entropy-axis, logit-lens,
frame-precision, belief-clusters): intervals on constructed cases whose answer is known. Each contains its point
estimate, is the same for the same seed, narrows with 4x the sequences, covers a known true value, and a paired
difference of a model with itself is exactly [0, 0]."""
import numpy as np
import pytest
import torch

from analyses import activations
from analyses import attention_focusing as af
from analyses import belief_clusters as bc
from analyses import entropy_axis as ea
from analyses import frame_precision as fp
from analyses import key_orthogonality as ko
from analyses import logit_lens as ll
from analyses.base import readout_r2
from tasks.prompts import Prompt, PromptSet


def prompt_set(n: int, sequence: list[int] | None = None) -> PromptSet:
    """n placeholder prompts (the interval code reads only how many there are and their units)."""
    prompt = Prompt([0], [], torch.tensor([0.5, 0.5], dtype=torch.float64), 1.0)
    return PromptSet([prompt] * n, (0, 1), sequence=sequence)


def width(interval) -> float:
    return interval[1] - interval[0]


# -- the shared per-prompt means (attention-focusing, key-orthogonality, entropy-axis) -----------------
def test_mean_interval_holds_its_estimate_is_seeded_and_narrows_with_four_times_the_prompts():
    g = torch.Generator().manual_seed(0)
    values = 0.3 + torch.randn(4000, 1, generator=g)  # the true mean is 0.3
    small, large = values[:250], values[:1000]
    (low, high), = activations.mean_intervals(small, prompt_set(250))
    assert low < small.mean().item() < high
    assert [[low, high]] == activations.mean_intervals(small, prompt_set(250))
    assert low < 0.3 < high
    (big,) = activations.mean_intervals(large, prompt_set(1000))
    assert width(big) == pytest.approx(width([low, high]) / 2, rel=0.25)  # 1/sqrt(n): half as wide


def test_wind_tunnel_prompts_are_resampled_by_their_sequence():
    """Prompts cut from one sequence move together: four copies of each value in one sequence give the interval
    of one copy; counted as four independent prompts they would look twice as precise."""
    values = torch.randn(200, 1, generator=torch.Generator().manual_seed(1))
    copies = values.repeat_interleave(4, 0)
    one = activations.mean_intervals(values, prompt_set(200))
    by_sequence = activations.mean_intervals(copies, prompt_set(800, sequence=[i // 4 for i in range(800)]))
    as_prompts = activations.mean_intervals(copies, prompt_set(800))
    assert np.allclose(by_sequence, one, rtol=0, atol=1e-12)
    assert width(as_prompts[0]) < 0.7 * width(one[0])
    assert activations.n_sequences(prompt_set(800, sequence=[i // 4 for i in range(800)])) == 200


def test_weighted_mean_intervals_average_each_column_over_its_prompts():
    values = torch.tensor([[1.0]] * 30 + [[3.0]] * 30).expand(60, 2)
    weights = torch.ones(60, 2)
    weights[30:, 0] = 0  # column 0: the first 30 prompts only
    first, both = activations.mean_intervals(values, prompt_set(60), weights)
    assert first == [1.0, 1.0]  # only prompts worth 1 are counted there
    assert both[0] >= 1.0 and both[1] <= 3.0


def test_a_mean_over_a_rare_subset_stays_finite_when_some_resamples_miss_it():
    """A column averaged over 2 prompts of 60 (a number of shots with few prompts): about 1 resample in 8 draws
    neither, a 0/0 that is left out of that column's percentiles, not an interval of NaN."""
    values = torch.arange(60, dtype=torch.float64)[:, None].expand(60, 2)
    weights = torch.ones(60, 2)
    weights[2:, 0] = 0  # column 0: prompts 0 and 1 only
    rare, every = activations.mean_intervals(values, prompt_set(60), weights)
    assert rare == [0.0, 1.0] and all(np.isfinite(every))


# -- key-orthogonality on language models --------------------------------------------------------------
def test_key_orthogonality_difference_of_a_model_with_itself_is_zero():
    scores = torch.rand(60, 2, 3, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    valid = torch.ones(60)
    same = ko.key_intervals(scores, scores.clone(), valid, prompt_set(60))
    assert same["mean_difference"] == [0.0, 0.0]
    assert same["mean_trained"] == same["mean_init"]
    point = ko.mean_over(scores, valid)
    for l in range(2):
        for h in range(3):
            low, high = same["trained"][l][h]
            assert low <= point[l, h].item() <= high


def test_key_orthogonality_intervals_cover_a_known_gap_and_skip_prompts_that_do_not_count():
    g = torch.Generator().manual_seed(3)
    init = 0.4 + 0.05 * torch.randn(400, 1, 2, generator=g, dtype=torch.float64)
    trained = init + 0.1 + 0.05 * torch.randn(400, 1, 2, generator=g, dtype=torch.float64)  # true gap 0.1
    valid = torch.ones(400)
    valid[:50] = 0
    trained[:50] = 100.0  # prompts that do not count must not move anything
    out = ko.key_intervals(trained, init, valid, prompt_set(400))
    low, high = out["mean_difference"]
    assert low < 0.1 < high and high < 0.2


# -- attention-focusing ----------------------------------------------------------------------------------
def test_focusing_intervals_are_exact_when_every_prompt_agrees_and_split_by_shots():
    reduction = torch.full((30, 2, 3), 0.8, dtype=torch.float64)
    shots = torch.tensor([0, 1, 2] * 10)
    reduction[shots == 2] = 0.5  # the per-shots means differ, each exactly known
    out = af.focusing_intervals(reduction, shots, shots.unique(), prompt_set(30))
    assert out["by_shots"][0] == pytest.approx([0.8, 0.8]) and out["by_shots"][2] == pytest.approx([0.5, 0.5])
    assert len(out["by_head"]) == 2 and len(out["by_head"][0]) == 3
    low, high = out["entropy_reduction"]
    assert low <= reduction.mean().item() <= high


# -- logit-lens ------------------------------------------------------------------------------------------
def lens_sums(n: int, seed: int = 4):
    """Per-sequence sums for 3 layers with true mean KLs (0.5, 0.02, 0.01), 10 queries per sequence."""
    g = torch.Generator().manual_seed(seed)
    counts = torch.full((n,), 10.0, dtype=torch.float64)
    kl = torch.tensor([0.5, 0.02, 0.01], dtype=torch.float64) * counts[:, None] * (
        1 + 0.3 * torch.randn(n, 3, generator=g, dtype=torch.float64))
    return {"kl_bits": kl, "entropy_mae_bits": kl / 2, "agreement": counts[:, None].expand(n, 3) / 2}, counts


def test_logit_lens_intervals_cover_the_true_curve_and_refind_the_first_layer():
    covered = [[low < true < high for true, (low, high) in zip((0.5, 0.02, 0.01),
                                                                ll.lens_intervals(*lens_sums(200, seed))["kl_bits"])]
               for seed in range(40)]
    assert np.mean(covered) >= 0.88  # a 95% interval: about 95% of 120 intervals hold the true mean
    sums, counts = lens_sums(2000)
    out = ll.lens_intervals(sums, counts)
    assert out["final_kl_bits"] == out["kl_bits"][-1]
    assert out["first_layer_within_twice_final"] == [1.0, 1.0]  # 0.02 <= 2 x 0.01 in every resample
    assert out["agreement"] == [[0.5, 0.5]] * 3  # no spread, no width
    assert out == ll.lens_intervals(sums, counts)


def test_logit_lens_intervals_narrow_with_four_times_the_sequences():
    few = ll.lens_intervals(*lens_sums(250))["kl_bits"][0]
    many = ll.lens_intervals(*lens_sums(1000))["kl_bits"][0]
    assert width(many) == pytest.approx(width(few) / 2, rel=0.25)


def test_first_layer_within_twice_final_on_constructed_curves():
    curves = torch.tensor([[1.0, 0.3, 0.1], [1.0, 0.15, 0.1], [0.2, 0.5, 0.1]])
    assert ll.first_within_twice_final(curves).tolist() == [2, 1, 0]


# -- frame-precision -------------------------------------------------------------------------------------
def test_vectorised_settling_steps_equal_the_scalar_ones():
    steps = [0, 10, 20, 50, 100, 200]
    g = torch.Generator().manual_seed(5)
    curves = torch.cat([torch.randn(40, 6, generator=g, dtype=torch.float64),
                        torch.ones(1, 6, dtype=torch.float64),  # no change: settles at the first step
                        torch.tensor([[0.0, 1.0, 0.2, 0.5, 0.95, 1.0]], dtype=torch.float64)])  # falls back
    expected = [fp.settling_step(steps, row.tolist()) for row in curves]
    assert fp.settling_steps(steps, curves).tolist() == expected
    assert expected[-2:] == [0, 10]


def checkpoint_data(n: int, noise: float, seed: int = 6):
    """Per-sequence sums over 4 checkpoints whose true entropy MAE is (1, 0.1, 0.01, 0.005) bits."""
    g = torch.Generator().manual_seed(seed)
    counts = torch.full((n,), 5.0, dtype=torch.float64)
    mae = torch.tensor([1.0, 0.1, 0.01, 0.005], dtype=torch.float64)
    per = [counts * m * (1 + noise * torch.randn(n, generator=g, dtype=torch.float64)) for m in mae]
    js = [torch.full((n, 2), 3 * 5.0 * d, dtype=torch.float64) for d in (0.4, 0.1, 0.01, 0.0)]  # 3 heads
    return dict(entropy_mae_bits=per, kl_bits=per, js=js), counts


def test_checkpoint_intervals_without_noise_are_the_points_and_with_noise_cover_them():
    steps = [0, 100, 200, 300]
    data, counts = checkpoint_data(100, 0.0)
    exact, share = fp.checkpoint_intervals(data, counts, 3, steps, frame_step=100)
    assert np.allclose(exact["entropy_mae_bits"], [[m, m] for m in (1.0, 0.1, 0.01, 0.005)], rtol=1e-12, atol=0)
    assert np.allclose(exact["attention_js_bits_mean"], [[d, d] for d in (0.4, 0.1, 0.01, 0.0)], rtol=1e-12, atol=0)
    # log10 MAE 0, -1, -2, -2.3: 90% of the change first at step 300; the frame (step 100) settles first
    assert exact["settling_steps"]["entropy_mae"] == [300.0, 300.0] and share == 1.0
    data, counts = checkpoint_data(400, 0.5)
    noisy, _ = fp.checkpoint_intervals(data, counts, 3, steps, frame_step=None)
    for true, (low, high) in zip((1.0, 0.1, 0.01, 0.005), noisy["entropy_mae_bits"]):
        assert low < true < high


# -- belief-clusters -------------------------------------------------------------------------------------
def test_purity_from_per_sequence_contingency_equals_purity():
    rng = np.random.default_rng(7)
    sequence = np.repeat(np.arange(50), 8)
    clusters, labels = rng.integers(0, 4, 400), rng.integers(0, 4, 400)
    cells = bc.contingency(sequence, 50, clusters, labels, 4)
    assert cells.sum().item() == 400
    assert bc.purity_of(cells.sum(0), 4).item() == pytest.approx(bc.purity(clusters, labels), abs=1e-15)


def test_cluster_intervals_hold_their_points_and_are_exact_for_perfect_clusters():
    """Two layers, S = 2: layer 0 clusters are the true states (purity 1 in every resample), layer 1 random."""
    rng = np.random.default_rng(8)
    S, n, per = 2, 100, 6
    sequence = np.repeat(np.arange(n), per)
    truth = rng.integers(0, S, n * per)
    sub = np.arange(0, n * per, 2)
    points = truth[:, None] * 10.0 + rng.normal(size=(n * per, 3))
    layers = {key: [] for key in bc.PER_LAYER}
    columns = []
    for clusters in (truth, rng.integers(0, S, n * per)):
        for labels, key in ((clusters, "kmeans_silhouette"), (truth, "true_state_silhouette")):
            values = bc.silhouette_values(points, labels, sub)
            layers[key].append(float(values.mean()))
            columns.append(bc.per_sequence(sequence[sub], n, values))
        layers["purity"].append(bc.purity(clusters, truth))
        layers["purity_vs_bayes_map"].append(bc.purity(clusters, truth))
        columns += [bc.contingency(sequence, n, clusters, truth, S)] * 2
    columns += [bc.per_sequence(sequence[sub], n, np.ones(len(sub))), bc.per_sequence(sequence, n, np.eye(S)[truth]),
                bc.per_sequence(sequence, n, np.ones(n * per))]
    out = bc.cluster_intervals(torch.cat(columns, 1), layers, S, 2)
    assert out["per_layer"]["purity"][0] == [1.0, 1.0]
    assert out["bayes_map_accuracy"] == [1.0, 1.0]
    for key in bc.PER_LAYER:
        for l in range(2):
            low, high = out["per_layer"][key][l]
            assert low - 1e-12 <= layers[key][l] <= high + 1e-12
    assert out["purity"] == out["per_layer"]["purity"][-1]
    assert layers["kmeans_silhouette"][0] == pytest.approx(bc.silhouette(points, truth, sub))


# -- entropy-axis ----------------------------------------------------------------------------------------
def test_held_out_intervals_hold_the_read_out_r2_and_pair_an_unchanged_stream_to_zero():
    rng = np.random.default_rng(9)
    X = rng.normal(size=(300, 5))
    entropy = X @ np.array([1.0, 0.5, 0, 0, 0]) + 0.5 * rng.normal(size=300)  # true R² = 1.25 / 1.5
    fit, test = np.arange(150), np.arange(150, 300)
    axis = np.array([1.0, 0.5, 0, 0, 0]) / np.sqrt(1.25)
    out = ea.held_out_intervals(X, X.copy(), axis, entropy, fit, test, prompt_set(300))
    point = readout_r2(X, entropy, fit, test, ridge=True)
    low, high = out["readout_r2"][0]
    assert low < point < high and low < 1.25 / 1.5 < high
    assert out["readout_r2"][0] == out["readout_r2"][1]
    assert out["readout_r2_drop"] == [0.0, 0.0]
    low, high = out["axis_entropy_pearson_abs_held_out"]
    assert low < abs(np.corrcoef(X[test] @ axis, entropy[test])[0, 1]) < high
