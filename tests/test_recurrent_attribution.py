"""Attribution patching on recurrent states (Mamba's hook_h, the LSTM's hidden and cell states), checked
against what it estimates: the gradient a hooked state gets is the total derivative through the
recurrence (a finite difference of the carried patch), the weights' gradients are unchanged by hooking,
and on a smooth constructed model the estimate agrees with activation patching of the state to first
order; the same comparison fails with the sign flipped, the position moved or the recurrence's path cut."""
import pytest
import torch

import models
import tasks
from analyses import attribution_patching
from models import lstm, mamba

P = attribution_patching.P  # the shared patching machinery, whatever its module is called
N = 16
SMOOTH = tasks.make("regression", d=3, n=5)  # a Gaussian head: the answer is smooth in every activation
STATE_HOOKS = {"mamba": ["blocks.0.mixer.hook_h"], "lstm": ["blocks.0.mixer.hook_hidden", "blocks.0.mixer.hook_cell"]}


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


def smooth_model(arch, dtype=torch.float32):
    model = models.build(arch, SMOOTH, config=dict(d_model=16, n_layers=1), seed=0).eval().to(dtype)
    if arch == "mamba":  # the short convolution reads only the current position: the state is the only route
        with torch.no_grad():
            model.blocks[0].mixer.conv1d.weight[..., :-1].zero_()
    return model


def inputs(dtype):
    return SMOOTH.sample(8, generator=torch.Generator().manual_seed(0)).tokens.to(dtype)


def loss(out):
    return (out[..., 0] ** 2).sum()


@pytest.mark.parametrize("arch", ["mamba", "lstm"])
def test_a_hooked_state_gets_the_total_derivative_through_the_recurrence(arch):
    model, x = smooth_model(arch, torch.float64), inputs(torch.float64)
    names = STATE_HOOKS[arch]
    saved = {}

    def keep(act, hook):
        act.retain_grad()
        saved[hook.name] = act
        return act

    with model.hooks(fwd_hooks=[(name, keep) for name in names]):
        loss(model(x)).backward()
    hooked = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    loss(model(x)).backward()
    for n, p in model.named_parameters():  # hooking changes no weight's gradient (no path counted twice)
        torch.testing.assert_close(hooked[n], p.grad, rtol=1e-9, atol=1e-12)
    with torch.no_grad():
        _, cache = model.run_with_cache(x, names_filter=names)
    for name in names:
        for t in (0, 2, 4, 7):
            v = torch.randn_like(cache[name][:, t], generator=None)

            def moved(eps):  # the state at step t set to its value + eps v, carried on by the recurrence
                def put(act, hook):
                    act = act.clone()
                    act[:, t] = cache[name][:, t] + eps * v
                    return act
                with torch.no_grad(), model.hooks(fwd_hooks=[(name, put)]):
                    return loss(model(x)).item()
            finite = (moved(1e-5) - moved(-1e-5)) / 2e-5
            got = (saved[name].grad[:, t] * v).sum().item()
            assert got == pytest.approx(finite, rel=1e-6, abs=1e-9), (name, t)


def state_grid(model, size, wrong=None):
    """(estimated, measured) model-scale values of the state site at every position, for a corruption of
    ``size``; ``wrong`` misplaces the estimate: "sign", "position" (read one step later) or "path" (the
    state's gradient cut to its own step's read-out)."""
    batch = SMOOTH.sample(N, generator=torch.Generator().manual_seed(0))
    pair = P.pair_of(model, SMOOTH.corrupt(batch, None, size=size))
    scorer = P.Scorer(pair)
    site = next(s for s in P.sites(model) if s.kind == "state")
    where = list(range(SMOOTH.seq_len))
    estimate = attribution_patching.estimates(pair, [site], where, scorer)["model"][0][:-1]
    names = P.cache_names(model, [site])
    clean, corrupted = P.run_cache(pair, pair.clean, names), P.run_cache(pair, pair.corrupted, names)
    measured = [scorer.model(a) for a in P.patched_answers(pair, site, where, clean, corrupted)]
    base = scorer.model(scorer.corrupted)
    if wrong == "sign":
        estimate = [2 * base - e for e in estimate]
    elif wrong == "position":
        estimate = estimate[1:] + [base]
    return estimate, measured


def worst_gap(estimate, measured):
    return max(abs(e - m) for e, m in zip(estimate, measured))


@pytest.mark.parametrize("arch", ["mamba", "lstm"])
def test_attribution_of_a_recurrent_state_agrees_with_activation_patching_to_first_order(arch):
    model = smooth_model(arch, torch.float64)  # float32's rounding would hide the second-order gap
    gaps = []
    for size in (0.2, 0.1, 0.05):
        estimate, measured = state_grid(model, size)
        assert max(abs(m) for m in measured) > 0.3  # the state carries the change: nothing trivial agrees
        gaps.append(worst_gap(estimate, measured))
    assert gaps[0] < 0.1, gaps
    for big, small in zip(gaps, gaps[1:]):
        assert 1.6 < big / small < 2.5, gaps  # the error is second order: on this scale, proportional to size


@pytest.mark.parametrize("arch", ["mamba", "lstm"])
@pytest.mark.parametrize("wrong", ["sign", "position", "path"])
def test_the_agreement_fails_when_the_estimate_is_misplaced(arch, wrong, monkeypatch):
    model = smooth_model(arch, torch.float64)
    right = worst_gap(*state_grid(model, 0.05))
    if wrong == "path":  # the old reading: the hooked state's gradient through its own read-out only
        monkeypatch.setattr(mamba, "read_through", lambda new, decay: new)
        monkeypatch.setattr(lstm.LSTMMixer, "read_through", lambda self, x, new_h, new_c: new_h)
    misplaced = worst_gap(*state_grid(model, 0.05, None if wrong == "path" else wrong))
    assert misplaced > 0.2 and misplaced > 10 * right, (right, misplaced)


@pytest.mark.parametrize("arch", ["mamba", "lstm"])
def test_a_hook_that_adds_to_one_step_adds_once_and_the_recurrence_carries_it(arch):
    """The hooks are called again after a change is carried on; a hook that adds (not sets) must still
    change the step it targets once, in what the model reads and in what a cache records."""
    model, x = smooth_model(arch, torch.float64), inputs(torch.float64)
    name = STATE_HOOKS[arch][0]
    with torch.no_grad():
        _, cache = model.run_with_cache(x, names_filter=[name])
    before = cache[name]
    bump = torch.randn_like(before[:, 2])

    def add(act, hook):
        act = act.clone()
        act[:, 2] += bump
        return act

    def set_to(act, hook):
        act = act.clone()
        act[:, 2] = before[:, 2] + bump
        return act

    answers, states = [], []
    for hook in (add, set_to):
        with torch.no_grad(), model.hooks(fwd_hooks=[(name, hook)]):
            out, patched = model.run_with_cache(x, names_filter=[name])
        answers.append(out)
        states.append(patched[name])
    torch.testing.assert_close(states[0][:, 2] - before[:, 2], bump)  # once, not once per call
    torch.testing.assert_close(states[0], states[1])  # adding and setting the same state are one intervention
    torch.testing.assert_close(answers[0], answers[1])
    assert (states[0][:, 3:] - before[:, 3:]).abs().max() > 1e-6  # and it is carried on
