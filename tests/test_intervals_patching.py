"""Bootstrap intervals of the patching family on constructed cases whose answer is known: the interval holds
the point and the true value, is the same for the same seed, narrows with more pairs, and a paired difference
of an answer with itself is exactly [0, 0]."""
import contextlib

import pytest
import torch

import analyses
from analyses import interventions as P
from analyses.attribution_patching import gap_intervals
from analyses.direct_logit_attribution import figure, intervals as dla_intervals
from analyses.intervals import bootstrap_interval, bootstrap_sums
from tests.test_patching import N, one_head_circuit


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


class Answers(torch.nn.Module):
    """A stand-in model whose "input" is already its answer: row i of a [B, 1, K] input is the answer vector."""

    def forward(self, x):
        return x

    def hooks(self, fwd_hooks=()):
        return contextlib.nullcontext()


def pair_of(clean, corrupted, bayes_clean, bayes_corrupted) -> P.Pair:
    """A Pair whose model answers its input: the model's clean and corrupted answers are ``clean``, ``corrupted``."""
    return P.Pair(Answers(), clean[:, None], corrupted[:, None], 0, (0,), bayes_clean.double(),
                  bayes_corrupted.double(), "constructed", ["0"], lambda out: out[:, 0].double(), "constructed", "mean")


def noisy_pair(n: int, restored: float, seed: int = 0):
    """Bayes moves each answer by a random amount; a patched answer restores ``restored`` of it plus zero-mean noise
    independent of the move, so sum <a - ref, Delta> / sum <Delta, Delta> tends to ``restored``: the true value."""
    g = torch.Generator().manual_seed(seed)
    bayes_corrupted = torch.randn(n, 1, generator=g, dtype=torch.float64)
    delta = 0.5 + torch.rand(n, 1, generator=g, dtype=torch.float64)
    bayes_clean = bayes_corrupted + delta
    patched = bayes_corrupted + restored * delta + 0.5 * torch.randn(n, 1, generator=g, dtype=torch.float64)
    scorer = P.Scorer(pair_of(bayes_clean, bayes_corrupted, bayes_clean, bayes_corrupted))  # the model is Bayes
    return scorer, patched


def width(interval):
    return interval[1] - interval[0]


def test_bootstrap_sums_of_a_count_ratio_is_bootstrap_interval():
    """The new helper resamples exactly as bootstrap_interval does: on counts the two intervals are equal."""
    g = torch.Generator().manual_seed(3)
    right = torch.randint(0, 5, (40,), generator=g).double()
    asked = torch.randint(1, 6, (40,), generator=g).double()
    ratio = lambda s: s[:, 0] / s[:, 1]  # noqa: E731
    assert bootstrap_sums(torch.stack([right, asked], 1), ratio) == bootstrap_interval(right, asked)
    # many numbers at once are the same intervals as one at a time
    both = bootstrap_sums(torch.stack([right, asked], 1), lambda s: s / 40)
    assert both[0] == bootstrap_sums(right[:, None], lambda s: s[:, 0] / 40)
    assert both[1] == bootstrap_sums(asked[:, None], lambda s: s[:, 0] / 40)


def test_a_score_interval_holds_the_point_and_the_true_value_and_narrows_with_four_times_the_pairs():
    scorer, patched = noisy_pair(200, 0.4)
    projected = scorer.project(patched)
    point = scorer.bayes(patched)
    interval = scorer.interval("bayes", projected)
    assert interval[0] < point < interval[1]
    assert interval[0] < 0.4 < interval[1]  # the constructed truth
    assert interval == scorer.interval("bayes", projected)  # seeded: the same interval again
    big, big_patched = noisy_pair(800, 0.4, seed=1)
    wide, narrow = width(interval), width(big.interval("bayes", big.project(big_patched)))
    assert 0.35 < narrow / wide < 0.7  # about 1/sqrt(4)


def test_a_paired_difference_of_an_answer_with_itself_is_exactly_zero():
    scorer, patched = noisy_pair(100, 0.4)
    p = scorer.project(patched)
    assert scorer.interval("bayes", p, p) == [0.0, 0.0]
    assert scorer.interval("model", p, p) == [0.0, 0.0]
    # the unpatched corrupted answer gains nothing over itself: the cell's gain is [0, 0] and does not differ
    cell = scorer.cell_intervals([scorer.refs["model"][0]])[0]
    assert cell["gain"] == [0.0, 0.0] and cell["differs"] is False
    # while the noisy patch restores 0.4 beyond its interval
    cell = scorer.cell_intervals([p])[0]
    assert cell["differs"] is True and cell["gain"][0] < 0.4 < cell["gain"][1]


def test_the_model_scale_of_the_clean_answer_is_exactly_one_in_every_resample():
    scorer, _ = noisy_pair(50, 0.4)
    assert scorer.interval("model", scorer.refs["model"][1]) == pytest.approx([1, 1], abs=1e-12)
    base = scorer.baseline_intervals()
    assert base["clean_on_bayes_scale"] == pytest.approx([1, 1], abs=1e-12)  # this model is Bayes
    assert base["corrupted_on_bayes_scale"] == pytest.approx([0, 0], abs=1e-12)
    assert base["model_move_differs"] is True


def test_an_undefined_scale_has_no_interval():
    same = torch.zeros(8, 1, dtype=torch.float64)
    scorer = P.Scorer(pair_of(same, same, same, same))  # nothing moves: every denominator is 0
    assert scorer.interval("bayes", scorer.project(same)) is None
    assert scorer.cell_intervals([scorer.project(same)])[0]["differs"] is None


def test_attribution_gaps_are_zero_where_the_estimate_is_exact_and_beyond_the_noise_where_it_is_not():
    scorer, patched = noisy_pair(100, 0.4)
    p = scorer.project(patched)
    exact = gap_intervals(scorer, [(p, p), (p, p)])
    assert exact["mean_abs_gap"] == [0.0, 0.0] and exact["max_abs_gap"] == [0.0, 0.0] and exact["beyond"] == [False] * 2
    # one cell's estimate overshoots every pair by a tenth of the model's own move in that pair: a gap of 0.1
    move = scorer.refs["model"][1] - scorer.refs["model"][0]
    off = gap_intervals(scorer, [(p, p), (p + 0.1 * move, p)])
    assert off["beyond"] == [False, True]
    assert off["max_abs_gap"] == pytest.approx([0.1, 0.1], abs=1e-12)
    assert off["mean_abs_gap"] == pytest.approx([0.05, 0.05], abs=1e-12)


def test_activation_patching_on_the_one_head_circuit_the_copying_head_restores_one_in_every_resample():
    metrics = analyses.run("activation-patching", one_head_circuit(), n=N).metrics
    assert metrics["n_sequences"] == N
    cells = {(c["site"], c["position"]): c for c in metrics["intervals"]["strongest"]}
    head = cells["L0H0", 4]
    assert head["model_scale"] == pytest.approx([1, 1], abs=1e-5) and head["differs"] is True
    low, high = head["bayes_scale"]
    assert low <= metrics["bayes_scale"][metrics["sites"].index("L0H0")][metrics["positions"].index(4)] <= high
    silent = cells["L0H1", metrics["strongest"][metrics["sites"].index("L0H1")]["position"]]
    assert silent["gain"] == pytest.approx([0, 0], abs=1e-6) and silent["differs"] is False  # no W_O: nothing moves
    result = analyses.run("activation-patching", one_head_circuit(), n=N)
    assert f"95% intervals over {N} pairs" in result.figures["sites-by-position"].layout.title.text
    assert "intervals" in result.descriptions and "n_sequences" in result.descriptions


def test_path_patching_the_path_through_the_head_restores_one_in_every_resample():
    result = analyses.run("path-patching", one_head_circuit(), n=N)
    best = result.metrics["intervals"]["strongest"]
    assert best["model_scale"] == pytest.approx([1, 1], abs=1e-5) and best["differs"] is True
    assert f"over {N} pairs" in result.figures["senders-by-receivers"].layout.title.text


def test_attribution_patching_states_its_gaps_beyond_the_noise():
    metrics = analyses.run("attribution-patching", one_head_circuit(), n=N, exact=True).metrics
    low, high = metrics["intervals"]["mean_abs_gap"]
    assert low <= metrics["mean_abs_gap"] <= high
    assert 0 <= metrics["gaps_beyond_interval"] <= metrics["n_cells"]


def test_direct_logit_attribution_intervals_on_constructed_parts():
    """Component a writes the same on both inputs (its change is exactly [0, 0]); b carries the whole change with
    noise (its share is exactly 1 in every resample: it is the only part that moves)."""
    g = torch.Generator().manual_seed(0)
    n = 64
    same = torch.randn(n, generator=g, dtype=torch.float64)
    moved = 1 + torch.randn(n, generator=g, dtype=torch.float64)
    clean = dict(parts=dict(a=same, b=moved), total=same + moved, bias=torch.zeros(n, dtype=torch.float64))
    corrupted = dict(parts=dict(a=same, b=torch.zeros(n, dtype=torch.float64)), total=same.clone(),
                     bias=torch.zeros(n, dtype=torch.float64))
    out = dla_intervals(clean, corrupted, dict(component="b", share=1.0))
    a, b = out["components"]
    assert a["change"] == [0.0, 0.0] and a["differs"] is False and a["share"] == [0.0, 0.0]
    assert b["share"] == pytest.approx([1, 1], abs=1e-12) and b["differs"] is True
    assert b["change"][0] < 1 < b["change"][1]  # the constructed mean change
    assert out["largest_share"] == b["share"]
    assert out["logit_difference_change"] == b["change"]  # the whole change is b's


def test_direct_logit_attribution_bars_carry_their_intervals_and_the_summed_bar_none():
    # 64 pairs: on 16 this random circuit's head moves the logit difference by less than the noise between pairs
    metrics = analyses.run("direct-logit-attribution", one_head_circuit(), n=64).metrics
    parts = {c["component"]: c for c in metrics["intervals"]["components"]}
    assert parts["L0H1"]["clean"] == [0.0, 0.0] and parts["L0H1"]["differs"] is False  # no W_O, no write
    assert parts["L0H0"]["differs"] is True  # the copying head writes each input's own answer
    fig = figure(metrics)
    assert fig.data[0].error_x.array is not None and "over 64 pairs" in fig.layout.title.text
    rows = [dict(component=f"L{i}H0", clean=float(i), corrupted=0.0, share=i / 1770) for i in range(60)]
    spans = [dict(component=r["component"], clean=[r["clean"] - 1, r["clean"] + 1], corrupted=[-1, 1]) for r in rows]
    fig = figure(dict(components=rows, subject="m", query=3, answer="class", logit_difference_clean=1.0,
                      logit_difference_corrupted=0.0, corruption="c", n_sequences=5, intervals=dict(components=spans)))
    assert fig.data[0].error_x.array[0] == 1 and fig.data[0].error_x.array[-1] is None  # the other components' sum
