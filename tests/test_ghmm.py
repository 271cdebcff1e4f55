"""The process wind tunnels (Mess3, RRXOR, any generalized HMM): beliefs against enumeration and hand calculation."""
import random

import numpy as np
import pytest
import torch

import tasks
from analyses import belief_state
from tasks.ghmm import GHMM, enumerated_beliefs, filter_beliefs, stationary


def test_the_stationary_distributions():
    torch.testing.assert_close(tasks.make("rrxor").pi, torch.tensor([2, 1, 1, 1, 1], dtype=torch.float64) / 6)
    torch.testing.assert_close(tasks.make("mess3").pi, torch.full((3,), 1 / 3, dtype=torch.float64))
    # p1 = 0.3, p2 = 0.8: S 1/3, "0" 0.1, "1" 7/30, T = 0.1 * 0.2 + 7/30 * 0.8, F the rest of 1/3
    pi = tasks.make("rrxor", p1=0.3, p2=0.8).pi
    T = 0.1 * 0.2 + 7 / 30 * 0.8
    torch.testing.assert_close(pi, torch.tensor([1 / 3, 0.1, 7 / 30, T, 1 / 3 - T], dtype=torch.float64))


def test_the_matrices_are_shai_et_al_s():
    a, x = 0.85, 0.05
    b, y = (1 - a) / 2, 1 - 2 * x
    T = tasks.make("mess3").transitions
    torch.testing.assert_close(T[0], torch.tensor([[a * y, b * x, b * x], [a * x, b * y, b * x], [a * x, b * x, b * y]],
                                                  dtype=torch.float64))
    for k in (1, 2):  # the same with the states rotated
        torch.testing.assert_close(T[k], T[0].roll((k, k), (0, 1)))


def test_the_first_mixed_states_by_hand():
    a, x = 0.85, 0.05
    b, y = (1 - a) / 2, 1 - 2 * x
    mess3 = tasks.make("mess3")
    beliefs, _ = filter_beliefs(mess3.transitions, mess3.pi, torch.tensor([[0, 0]]))
    torch.testing.assert_close(beliefs[0, 0], torch.tensor([a, b, b], dtype=torch.float64))  # after A: the column sums
    after_aa = torch.tensor([a * (a * y + 2 * b * x), b * (a * x + b * y + b * x), b * (a * x + b * x + b * y)],
                            dtype=torch.float64)
    torch.testing.assert_close(beliefs[0, 1], after_aa / after_aa.sum())
    rrxor = tasks.make("rrxor")
    batch = rrxor.batch_from_tokens(torch.tensor([0, 1]))
    # after 0 from [2,1,1,1,1]/6: S (from F) 1/6, "0" (from S) 1/6, T and F (from "1" and "0") 1/12 each
    torch.testing.assert_close(batch.hypothesis["belief"][0, 0], torch.tensor([1 / 3, 1 / 3, 0, 1 / 6, 1 / 6],
                                                                              dtype=torch.float64))
    torch.testing.assert_close(batch.posterior[0, 0], torch.tensor([0.5, 0.5]))
    # then 1: from S to "1" (1/3 * 1/2), from "0" to T (1/3 * 1/2), from T to S (1/6): [1/3, 0, 1/3, 1/3, 0]
    torch.testing.assert_close(batch.hypothesis["belief"][0, 1], torch.tensor([1 / 3, 0, 1 / 3, 1 / 3, 0],
                                                                              dtype=torch.float64))


@pytest.mark.parametrize("name", ["mess3", "rrxor"])
def test_beliefs_and_answers_match_enumeration_over_hidden_paths(name):
    task = tasks.make(name, L=5)
    batch = task.sample(12, generator=torch.Generator().manual_seed(3))
    for row in range(12):
        beliefs, nexts = enumerated_beliefs(task.transitions.tolist(), task.pi.tolist(), batch.tokens[row].tolist())
        torch.testing.assert_close(batch.hypothesis["belief"][row], torch.tensor(beliefs, dtype=torch.float64))
        torch.testing.assert_close(batch.posterior[row], torch.tensor(nexts, dtype=torch.float32))


@pytest.mark.parametrize("name", ["mess3", "rrxor"])
def test_sampled_paths_follow_the_matrices_and_the_frequencies_match_the_beliefs(name):
    task = tasks.make(name, L=8)
    batch = task.sample(4000, generator=torch.Generator().manual_seed(0))
    tokens, states = batch.tokens, batch.hypothesis["states"]
    # every emitted edge has positive probability
    edges = task.transitions[tokens[:, 1:], states[:, :-1], states[:, 1:]]
    assert (edges > 0).all()
    # the belief is calibrated: the mean belief equals the frequency of the true hidden state, per state
    belief = batch.hypothesis["belief"].reshape(-1, task.S)
    truth = torch.nn.functional.one_hot(states.reshape(-1), task.S).double()
    assert (belief.mean(0) - truth.mean(0)).abs().max() < 0.01
    # and the next-token posterior is calibrated against the sampled next tokens
    answered = torch.nn.functional.one_hot(batch.targets.reshape(-1), task.V).double()
    assert (batch.posterior.reshape(-1, task.V).double().mean(0) - answered.mean(0)).abs().max() < 0.01


def test_rrxor_refuses_a_sequence_it_cannot_emit_and_eliminates_once_in_phase():
    rrxor = tasks.make("rrxor")
    with pytest.raises(tasks.ConfigError, match="never emits"):
        rrxor.batch_from_tokens(torch.tensor([0, 0, 1, 0, 0, 1]))  # no phase makes every third token the XOR
    batch = rrxor.sample(200, generator=torch.Generator().manual_seed(1))
    assert (batch.posterior.max(-1).values == 1).any()  # a certain next token somewhere


def test_bad_settings_are_refused_in_one_line():
    for name, settings, message in (("mess3", dict(x=0.6), "x must be"), ("mess3", dict(a=1.0), "a must be"),
                                    ("rrxor", dict(p1=0), "p1 must be"), ("rrxor", dict(L=0), "L must be"),
                                    ("mess3", dict(x="0.1"), "x must be")):
        with pytest.raises(tasks.ConfigError, match=message):
            tasks.make(name, **settings)


class GoldenMean(GHMM):
    """A user's process in a few lines: no two 1s in a row."""
    token_labels = ("0", "1")

    def __init__(self, p: float = 0.5, L: int = 6):
        self.p = p
        super().__init__(L)

    def matrices(self):
        return [[[self.p, 0.0], [1.0, 0.0]], [[0.0, 1 - self.p], [0.0, 0.0]]]


def test_a_process_of_ones_own_is_a_few_lines():
    task = GoldenMean()
    torch.testing.assert_close(task.pi, torch.tensor([2 / 3, 1 / 3], dtype=torch.float64))
    batch = task.sample(64, generator=torch.Generator().manual_seed(0))
    assert not ((batch.tokens[:, 1:] == 1) & (batch.tokens[:, :-1] == 1)).any()
    assert task.config() == dict(name="", p=0.5, L=6)


def test_a_process_that_is_not_one_is_refused():
    class NotStochastic(GoldenMean):
        def matrices(self):
            return [[[0.5, 0.0], [1.0, 0.0]], [[0.0, 0.4], [0.0, 0.0]]]

    class Split(GoldenMean):  # two closed classes: no one stationary distribution
        def matrices(self):
            return [[[1.0, 0.0], [0.0, 0.0]], [[0.0, 0.0], [0.0, 1.0]]]

    with pytest.raises(tasks.ConfigError, match="stochastic"):
        NotStochastic()
    with pytest.raises(tasks.ConfigError, match="stationary"):
        Split()
    with pytest.raises(tasks.ConfigError, match="more than one"):
        stationary(torch.eye(3, dtype=torch.float64))


def test_belief_state_reads_the_belief_over_hidden_states_not_the_answer():
    task = tasks.make("rrxor", L=6)
    batch = task.sample(10, generator=torch.Generator().manual_seed(0))
    target = belief_state.beliefs_at_queries(batch)
    assert target.shape == (60, 5) and np.allclose(target.sum(1), 1)
    assert np.allclose(target, batch.hypothesis["belief"].reshape(-1, 5).numpy())


def test_small_configs_are_small():
    for name in ("mess3", "rrxor"):
        assert tasks.make(name, **tasks.REGISTRY[name].small_config(random.Random(0))).L <= 5


def test_the_explorer_draws_a_process_models_belief_by_layer_and_reads_typed_sequences(tmp_path):
    """The geometry panel offers the belief over hidden states for a process, and draws the exact belief beside each
    layer's read-out; a typed sequence gets its beliefs, and one the process cannot emit is refused in one line."""
    import models
    from interp import checkpoint
    from interp.explore import Explorer, build_app, parse_tokens
    from interp.explore.geometry import geometry_view
    from interp.explore.posterior import posterior_views

    task = tasks.make("rrxor", L=6)
    model = models.build("lstm", task, {"d_model": 16, "n_layers": 2}, seed=0).eval()
    checkpoint.save(tmp_path / "checkpoints" / checkpoint.checkpoint_name(0), model, step=0, seed=0)
    explorer = Explorer(tmp_path, n_calibration=8, n_geometry=16)
    assert "belief over the hidden states by layer" in str(build_app(explorer).layout)
    figure = geometry_view(explorer, 0, [], "belief")
    titles = [a.text for a in figure.layout.annotations]
    assert titles[0] == "Bayes belief" and titles[1].startswith("L0: R² ") and titles[-1].startswith("all layers")
    assert {t.name for t in figure.data if t.showlegend is not False and t.name} == {f"certain of {s}" for s in
                                                                                    ("S", "0", "1", "T", "F")}
    # the latent view draws the true hidden state beside the belief's MAP, on the hidden states' names (the
    # answers are tokens: 2 classes, the states 5)
    latent = posterior_views(explorer, 0, explorer.sample(3), 3, [])["latent"]
    path = [t for t in latent.data if t.type == "scatter"]
    assert [t.name for t in path] == ["true", "Bayes MAP"] and set(path[0].y) <= {"S", "0", "1", "T", "F"}
    typed = explorer.batch(parse_tokens(task, "0 1 1 0 1 1"), None)
    assert typed.hypothesis["belief"].shape == (1, 6, 5)
    with pytest.raises(Exception, match="never emits this sequence"):  # said in the panel as one line
        explorer.batch(parse_tokens(task, "0 0 1 0 0 1"), None)
