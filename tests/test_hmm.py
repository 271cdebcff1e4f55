"""The HMM wind tunnel against brute-force enumeration of every hidden path."""
import math

import pytest
import torch

from tasks.base import ConfigError
from tasks.hmm import EMIT, OBS0, SEP, TRANS, HMM, dirichlet, forward_filter, quantise_units
from tasks.hmm import enumerated_filter as hmm_filter


@pytest.mark.parametrize("S, O, K", [(2, 2, 6), (3, 3, 5), (3, 2, 4)])
def test_posterior_equals_enumeration(S, O, K):
    task = HMM(S=S, O=O, K=K)
    batch = task.sample(6, generator=torch.Generator().manual_seed(1))
    positions = batch.query_mask[0].nonzero().flatten()
    assert positions.tolist() == list(range(task.seq_len - K, task.seq_len))
    h = batch.hypothesis
    for b in range(len(batch)):
        T, E, obs = h["T"][b].tolist(), h["E"][b].tolist(), h["observations"][b].tolist()
        expected = hmm_filter(T, E, obs, S)
        torch.testing.assert_close(batch.posterior[b, positions].double(), expected, atol=1e-6, rtol=0)


def test_forward_filter_matches_enumeration_in_float64():
    g = torch.Generator().manual_seed(5)
    T, E = dirichlet((4, 3, 3), 1.0, g), dirichlet((4, 3, 2), 1.0, g)
    obs = torch.randint(0, 2, (4, 5), generator=g)
    post = forward_filter(T, E, obs)
    assert post.dtype == torch.float64
    for b in range(4):
        expected = hmm_filter(T[b].tolist(), E[b].tolist(), obs[b].tolist(), 3)
        torch.testing.assert_close(post[b], expected, atol=1e-12, rtol=0)
    uniform = torch.full((4, 3), 1 / 3, dtype=torch.float64)
    torch.testing.assert_close(forward_filter(T, E, obs, initial=uniform), post)
    # a known initial state: the first posterior is that state whatever is observed
    onehot = torch.tensor([[0.0, 1.0, 0.0]], dtype=torch.float64).expand(4, 3)
    assert (forward_filter(T, E, obs, initial=onehot)[:, 0] == onehot).all()


@pytest.mark.parametrize("settings", [dict(), dict(S=3, O=7), dict(S=20, O=2, concentration=0.2)])
def test_quantised_tables_are_exact_probability_rows(settings):
    batch = HMM(**settings).sample(256, generator=torch.Generator().manual_seed(2))
    for name in ("T", "E"):
        units, table = batch.hypothesis[f"{name}_units"], batch.hypothesis[name]
        assert units.dtype == torch.long and table.dtype == torch.float64
        assert (units.sum(-1) == 100).all() and (units >= 5).all()
        assert torch.equal(table, units.double() / 100)
        assert (table.sum(-1) - 1).abs().max() < 1e-12


def test_quantisation_rule():
    # exact grid values are kept; remainders go to the largest fractions, ties to the lower index
    p = torch.tensor([[0.50, 0.30, 0.20], [0.333, 0.333, 0.334], [1 / 3, 1 / 3, 1 / 3],
                      [0.98, 0.01, 0.01], [0.0, 0.0, 1.0]])
    assert quantise_units(p).tolist() == [[50, 30, 20], [33, 33, 34], [34, 33, 33],
                                          [90, 5, 5], [5, 5, 90]]
    # twenty entries leave no spare units: all exactly 0.05
    assert (quantise_units(dirichlet((3, 20), 1.0, torch.Generator().manual_seed(0))) == 5).all()


def test_tokens_follow_the_format_and_tables_round_trip():
    task = HMM(S=4, O=3, K=7)
    batch = task.sample(32, generator=torch.Generator().manual_seed(0))
    h, tok = batch.hypothesis, batch.tokens
    assert tok.shape == (32, 3 + 16 + 12 + 7) == (32, task.seq_len)
    assert (tok[:, 0] == TRANS).all() and (tok[:, 17] == EMIT).all() and (tok[:, 30] == SEP).all()
    assert torch.equal(tok[:, 31:], h["observations"] + OBS0)
    assert tok.max() < task.answer_token_offset == OBS0 + 3 and task.vocab_size == OBS0 + 3 + 4
    T_units, E_units = task.decode_tables(tok)
    assert torch.equal(T_units, h["T_units"]) and torch.equal(E_units, h["E_units"])
    t1, e1 = task.decode_tables(tok[3])
    assert torch.equal(t1, h["T_units"][3]) and torch.equal(e1, h["E_units"][3])
    assert (batch.targets[:, 31:] == h["states"]).all() and (batch.targets[:, :31] == -100).all()
    names = task.token_names(tok[0])
    assert names[0] == "TRANS" and names[17] == "EMIT" and names[30] == "SEP"
    assert names[1] == f"{int(h['T_units'][0, 0, 0]) / 100:.2f}"
    assert names[31] == f"o{int(h['observations'][0, 0])}"
    assert task.token_names(torch.tensor([5, 100, OBS0 + 3])) == ["0.05", "1.00", "s0"]
    groups = task.hypothesis_tokens()
    assert groups["observations"].tolist() == [104, 105, 106]
    assert groups["states"].tolist() == [107, 108, 109, 110]


def test_hidden_path_follows_the_tables():
    # a path drawn from the tables takes a move of probability p with probability p
    task = HMM(S=3, O=3, K=30)
    batch = task.sample(2000, generator=torch.Generator().manual_seed(4))
    h = batch.hypothesis
    s, o = h["states"], h["observations"]
    rows = torch.arange(len(batch))[:, None]
    moves = h["T"][rows, s[:, :-1], s[:, 1:]]
    emits = h["E"][rows, s, o]
    # the average probability of the moves taken is E[sum p^2] per row, not the 1/3 of a uniform pick
    expected_move = (h["T"] ** 2).sum(-1).mean(-1, keepdim=True)
    assert abs(moves.mean() - expected_move.mean()) < 0.01
    assert abs(emits.mean() - (h["E"] ** 2).sum(-1).mean()) < 0.01
    assert abs((s[:, 0] == 0).double().mean() - 1 / 3) < 0.04  # uniform initial state


def test_posteriors_are_distributions():
    task = HMM(S=5, O=5, K=50)
    batch = task.sample(128, generator=torch.Generator().manual_seed(3))
    assert batch.posterior.dtype == torch.float32
    torch.testing.assert_close(batch.posterior.sum(-1), torch.ones(128, task.seq_len))
    assert (batch.posterior >= 0).all()
    h = batch.bayes_entropy[batch.query_mask]
    assert (h >= 0).all() and (h <= math.log2(5) + 1e-5).all()
    assert h.mean() < math.log2(5) - 0.1  # the observations are informative on average


@pytest.mark.parametrize("concentration", [1.0, 0.3, 2.5])
def test_dirichlet_moments(concentration):
    n, a = 5, concentration
    x = dirichlet((40000, n), a, torch.Generator().manual_seed(0))
    assert x.dtype == torch.float64 and (x >= 0).all()
    torch.testing.assert_close(x.sum(-1), torch.ones(40000, dtype=torch.float64))
    torch.testing.assert_close(x.mean(0), torch.full((n,), 1 / n, dtype=torch.float64), atol=0.005, rtol=0)
    # Var of a symmetric Dirichlet coordinate: (1/n)(1 - 1/n) / (n a + 1)
    var = (1 / n) * (1 - 1 / n) / (n * a + 1)
    assert abs(x[:, 0].var().item() / var - 1) < 0.05


@pytest.mark.parametrize("settings, message", [
    (dict(S=1), "S must be at least 2"),
    (dict(O=1), "O must be at least 2"),
    (dict(K=0), "K must be at least 1"),
    (dict(S=2.5), "S must be an integer"),
    (dict(K=True), "K must be an integer"),
    (dict(S=21), r"S \* 0.05 must be <= 1"),
    (dict(O=30), "use O <= 20"),
    (dict(concentration=0), "concentration must be a finite number > 0"),
    (dict(concentration=float("inf")), "concentration must be a finite number > 0"),
    (dict(concentration="1"), "concentration must be a number"),
])
def test_bad_settings_are_refused(settings, message):
    with pytest.raises(ConfigError, match=message):
        HMM(**settings)


def test_config_and_length_setting():
    task = HMM(S=3, O=4, K=9, concentration=0.5)
    assert task.config() == dict(name="hmm", S=3, O=4, K=9, concentration=0.5)
    assert HMM(**{k: v for k, v in task.config().items() if k != "name"}).config() == task.config()
    assert task.length_setting == "K" and task.n_classes == 3
    assert HMM(K=50).seq_len == HMM(K=20).seq_len + 30


def test_window_baseline_known_answers(benchmark_module):
    """benchmarks/hmm_window_baseline.py: a window reaching o_1 is the exact filter; w = 0 is the
    normalised emission column times the prior; the stationary prior is a fixed point of T."""
    window = benchmark_module("hmm_window_baseline")
    task = HMM(S=3, O=4, K=6)
    batch = task.sample(16, torch.Generator().manual_seed(0))
    T, E = batch.hypothesis["T"].double(), batch.hypothesis["E"].double()
    obs = batch.tokens[:, task.obs_offset:] - OBS0
    exact = forward_filter(T, E, obs)
    torch.testing.assert_close(window.window_filter(T, E, obs, 5), exact)
    pi = window.stationary(T)
    torch.testing.assert_close((pi[:, None, :] @ T)[:, 0], pi)
    for prior in (None, pi):
        w0 = window.window_filter(T, E, obs, 0, prior)
        start = torch.full_like(pi, 1 / 3) if prior is None else prior
        column = E.gather(2, obs[:, None, :].expand(-1, 3, -1)).transpose(1, 2)  # [B, K, S]: E[s, o_t]
        expected = column[:, 1:] * start[:, None, :]
        torch.testing.assert_close(w0[:, 1:], expected / expected.sum(-1, keepdim=True))
        torch.testing.assert_close(w0[:, 0], exact[:, 0])  # o_1 comes from the true, uniform initial
    # window 2 at t = 4 forgets o_1, o_2: the exact filter over o_3..o_5 from the prior
    torch.testing.assert_close(window.window_filter(T, E, obs, 2, pi)[:, 4], forward_filter(T, E, obs[:, 2:5], pi)[:, -1])
    assert window.entropy_bits(torch.full((2, 4), 0.25, dtype=torch.float64)).tolist() == [2.0, 2.0]
