"""advantage-law (Paper II): the closed forms against autograd on constructed attention, then on models."""
import random

import pytest
import torch

import analyses
import models
import tasks
from analyses import advantage_law


def manual_head(seed=0, b=3, H=2, T=5, d=4):
    """One causal attention step by hand: scores, values and a fixed linear read-out of z (so u is known)."""
    g = torch.Generator().manual_seed(seed)
    s = torch.randn(b, H, T, T, generator=g, dtype=torch.float64)
    s = s.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), -torch.inf).requires_grad_()
    v = torch.randn(b, T, H, d, generator=g, dtype=torch.float64, requires_grad=True)
    w = torch.randn(b, T, H, d, generator=g, dtype=torch.float64)
    alpha = s.softmax(-1)
    z = torch.einsum("bhqk,bkhd->bqhd", alpha, v)
    (z * w).sum().backward()  # L = <w, z>, so u = dL/dz = w exactly
    return alpha.detach(), v.detach(), w, s.grad, v.grad


def test_the_closed_forms_are_the_gradients_of_softmax_attention():
    alpha, v, u, ds, dv = manual_head()
    closed_s, closed_v, _ = advantage_law.closed_forms(alpha, v, u)
    assert advantage_law.relative_error(closed_s, ds, (0, 2, 3)).max() < 1e-13
    assert advantage_law.relative_error(closed_v, dv, (0, 1, 3)).max() < 1e-13
    assert (closed_s.masked_select(alpha == 0) == 0).all()  # masked keys get no gradient


def test_the_error_measure_catches_a_wrong_law():
    alpha, v, u, ds, _ = manual_head(seed=1)
    b = torch.einsum("bqhd,bkhd->bhqk", u, v)
    without_baseline = alpha * b  # forgets the attention-weighted mean: not the gradient
    assert advantage_law.relative_error(without_baseline, ds, (0, 2, 3)).min() > 1e-2


def test_equal_advantages_have_no_spread_and_move_no_score():
    # every value the same: each attended key helps exactly as much as the average, so dL/ds = 0
    alpha, v, u, _, _ = manual_head(seed=2)
    v = v[:, :1].expand_as(v).contiguous()
    closed_s, closed_v, b = advantage_law.closed_forms(alpha, v, u)
    assert closed_s.abs().max() < 1e-12
    spread = (alpha * (b - (alpha * b).sum(-1, keepdim=True)) ** 2).sum(-1)
    assert spread.max() < 1e-20
    assert closed_v.abs().max() > 0.1  # the values still move: the precision signal is not the routing one


def test_key_groups_partition_the_earlier_positions():
    task = tasks.make("bijection", V=5, L=4)
    batch = task.sample(3, generator=torch.Generator().manual_seed(0))
    columns = batch.query_mask.any(0).nonzero().flatten()
    groups = advantage_law.key_groups(task, batch.tokens, columns)
    cover = sum(mask.long() for mask in groups.values())
    causal = torch.arange(batch.tokens.shape[1])[None, :] <= columns[:, None]
    assert torch.equal(cover, causal.long()[None].expand_as(cover))  # each key at or before i in one group


@pytest.mark.parametrize("task_name", ["bijection", "regression", "hmm", "recall"])
def test_the_law_holds_on_every_head_of_an_untrained_transformer(task_name):
    task = tasks.make(task_name, **tasks.REGISTRY[task_name].small_config(random.Random(3)))
    model = models.build("transformer", task, {"d_model": 16, "n_layers": 2, "n_heads": 2}, seed=1)
    result = analyses.run("advantage-law", model, n=8, chunk=3)
    m = result.metrics
    assert m["holds"] and m["max_relative_error"] < 1e-10
    assert len(m["score_error"]) == 2 and len(m["score_error"][0]) == 2
    for shares in zip(*(torch.tensor(rows, dtype=torch.float64).flatten() for rows in m["gradient_share"].values())):
        assert sum(shares) == pytest.approx(1.0, abs=1e-9)
    assert all(x > 0 for row in m["value_grad_norm"] for x in row)
    # the float64 copy is a copy: the model keeps its dtype
    assert next(model.parameters()).dtype == torch.float32


def test_chunks_do_not_change_the_numbers():
    task = tasks.make("bijection", V=5, L=4)
    model = models.build("transformer", task, {"d_model": 16, "n_layers": 1, "n_heads": 2}, seed=2)
    whole = analyses.run("advantage-law", model, n=6, chunk=6).metrics
    split = analyses.run("advantage-law", model, n=6, chunk=3).metrics
    assert split["loss"] == pytest.approx(whole["loss"], rel=1e-12)
    for key in ("advantage_spread", "score_grad_norm", "value_grad_norm"):
        assert torch.tensor(split[key]) == pytest.approx(torch.tensor(whole[key]), rel=1e-10), key
    for name, rows in whole["gradient_share"].items():
        assert torch.tensor(split["gradient_share"][name]) == pytest.approx(torch.tensor(rows), rel=1e-10, abs=1e-15)
