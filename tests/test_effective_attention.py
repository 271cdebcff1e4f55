"""Mamba's selective scan as a matrix (effective attention), against the scan itself in float64."""
import random

import pytest
import torch

import models
import tasks
from models.mamba import reference_scan, scan_matrix


def scan_inputs(b=2, T=7, E=5, N=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    rand = lambda *shape: torch.randn(*shape, generator=g, dtype=torch.float64)  # noqa: E731
    delta = torch.nn.functional.softplus(rand(b, T, E))
    A = -torch.rand(E, N, generator=g, dtype=torch.float64) * 3
    return rand(b, T, E), delta, A, rand(b, T, N), rand(b, T, N), rand(E)


def test_the_matrix_reproduces_the_sequential_scan(monkeypatch):
    import models.mamba

    x, delta, A, B, C, D = scan_inputs()
    y, _ = reference_scan(x, delta, A, B, C, D)
    monkeypatch.setattr(models.mamba, "BLOCK_ELEMENTS", 2 * 2 * 7 * 7)  # blocks of 2 channels: 2 does not divide 5
    M = scan_matrix(delta, A, B, C)
    assert torch.allclose(torch.einsum("bets,bse->bte", M, x) + D * x, y, rtol=0, atol=1e-12)
    assert (M.triu(1) == 0).all()  # causal: no position reads a later one


def test_one_decay_per_channel_is_mamba2_form():
    # A the same for every state: M = L o (C B^T) with L_ts = exp(a sum_{s<r<=t} delta_r) delta_s
    x, delta, A, B, C, _ = scan_inputs(seed=1)
    A = A[:, :1].expand_as(A).contiguous()
    M = scan_matrix(delta, A, B, C)
    cum = delta.cumsum(1)  # [b, T, E]
    gap = (cum[:, :, None, :] - cum[:, None, :, :]).permute(0, 3, 1, 2)  # [b, E, t, s]
    L = torch.exp(A[:, 0][None, :, None, None] * gap).tril() * delta.transpose(1, 2)[:, :, None, :]
    expected = L * torch.einsum("btn,bsn->bts", C, B)[:, None]
    assert torch.allclose(M, expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize("task_name", ["hmm", "bijection"])
def test_a_mamba_model_s_effective_attention_is_its_hook_y(task_name):
    task = tasks.make(task_name, **tasks.REGISTRY[task_name].small_config(random.Random(5)))
    model = models.build("mamba", task, {"d_model": 16, "n_layers": 2, "d_state": 4}, seed=3).double()
    tokens = task.sample(3, generator=torch.Generator().manual_seed(0)).tokens
    for layer in range(2):
        M, x = model.effective_attention(tokens, layer)
        _, cache = model.run_with_cache(tokens, names_filter=[f"blocks.{layer}.mixer.hook_y"])
        y = cache[f"blocks.{layer}.mixer.hook_y"]
        assert M.dtype == torch.float64 and M.shape == (3, model.blocks[layer].mixer.sizes[0], *tokens.shape[1:2] * 2)
        predicted = torch.einsum("bets,bse->bte", M, x) + model.blocks[layer].mixer.D * x
        assert (predicted - y).abs().max() <= 1e-10 * max(1.0, y.abs().max().item())


def test_the_explorer_draws_a_mamba_layer_s_effective_attention(tmp_path):
    from interp import checkpoint
    from interp.explore import Explorer
    from interp.explore.attention import attention_view

    task = tasks.make("bijection", V=5, L=4)
    model = models.build("mamba", task, {"d_model": 16, "n_layers": 2, "d_state": 4}, seed=0).eval()
    checkpoint.save(tmp_path / "checkpoints" / checkpoint.checkpoint_name(0), model, step=0, seed=0)
    explorer = Explorer(tmp_path, n_calibration=8, n_geometry=8)
    tokens = explorer.sample(0)
    fig = attention_view(explorer, 0, tokens, 0, [], layer=1, head=0)
    assert "effective attention" in fig.layout.title.text
    shown = torch.tensor(fig.data[0].z, dtype=torch.float64)
    M, _ = explorer.model(0).effective_attention(explorer.batch(tokens, 0).tokens, 1)
    weight = M[0].abs().mean(0)
    future = torch.ones_like(shown, dtype=torch.bool).triu(1)
    assert shown[future].isnan().all()  # masked cells are blank, not weight 0
    expected = (weight / weight.sum(-1, keepdim=True)).double()
    assert torch.allclose(shown[~future], expected[~future], atol=1e-6)
    assert torch.allclose(shown.nan_to_num().sum(-1), torch.ones(len(tokens), dtype=torch.float64), atol=1e-5)
    with pytest.raises(Exception, match="not in this model"):
        attention_view(explorer, 0, tokens, 0, [], layer=0, head=1)  # a scan has one "head" per layer


def small_bijection_mamba(seed=0):
    task = tasks.make("bijection", V=5, L=4)
    return task, models.build("mamba", task, {"d_model": 16, "n_layers": 2, "d_state": 4}, seed=seed).eval()


def test_attention_patterns_are_the_normalised_effective_attention():
    task, model = small_bijection_mamba()
    tokens = task.sample(3, generator=torch.Generator().manual_seed(1)).tokens
    patterns = model.attention_patterns(tokens)
    assert model.has_patterns() and not model.has_attention() and len(patterns) == 2
    for layer, pattern in enumerate(patterns):
        M, _ = model.effective_attention(tokens, layer)
        weight = M.abs().mean(1)
        assert pattern.shape == (3, 1, tokens.shape[1], tokens.shape[1])
        assert torch.allclose(pattern[:, 0], weight / weight.sum(-1, keepdim=True), atol=1e-6)
        assert torch.allclose(pattern.sum(-1), torch.ones(3, 1, tokens.shape[1]), atol=1e-5)
        assert (pattern.triu(1) == 0).all()


def test_the_rows_of_a_query_are_the_same_rows_of_the_whole_pattern(monkeypatch):
    import models.mamba

    x, delta, A, B, C, _ = scan_inputs(T=9, E=5)
    rows = torch.tensor([0, 3, 8])
    monkeypatch.setattr(models.mamba, "BLOCK_ELEMENTS", 2 * 3 * 9 * 3 * 2)  # blocks of 2 channels: 2 does not divide 5
    blocks = list(models.mamba.scan_matrix_rows(delta, A, B, C, rows))
    assert [b.shape[1] for b in blocks] == [2, 2, 1]
    assert torch.allclose(torch.cat(blocks, 1), scan_matrix(delta, A, B, C)[:, :, rows], rtol=0, atol=1e-12)
    task, model = small_bijection_mamba()
    tokens = task.sample(3, generator=torch.Generator().manual_seed(1)).tokens
    rows = torch.tensor([1, tokens.shape[1] - 1])
    transformer = models.build("transformer", task, {"d_model": 16, "n_layers": 2, "n_heads": 2}, seed=0).eval()
    for each in (model, transformer):
        for whole, part in zip(each.attention_patterns(tokens), each.attention_patterns(tokens, rows=rows)):
            assert torch.allclose(part, whole[:, :, rows], atol=1e-6)


def test_a_transformer_s_patterns_are_its_hook_pattern_and_an_lstm_has_none():
    task = tasks.make("bijection", V=5, L=4)
    model = models.build("transformer", task, {"d_model": 16, "n_layers": 2, "n_heads": 2}, seed=0).eval()
    tokens = task.sample(2, generator=torch.Generator().manual_seed(1)).tokens
    _, cache = model.run_with_cache(tokens)
    for layer, pattern in enumerate(model.attention_patterns(tokens)):
        assert torch.equal(pattern, cache[f"blocks.{layer}.attn.hook_pattern"])
    lstm = models.build("lstm", task, {"d_model": 16, "n_layers": 1}, seed=0)
    assert not lstm.has_patterns()
    with pytest.raises(ValueError, match="no attention patterns"):
        lstm.attention_patterns(tokens)


def test_qk_alignment_on_a_scan_that_forgets_at_once_sees_only_self_attention():
    # A -> -inf: exp(delta A) = 0, so h_t = delta_t B_t x_t and M is diagonal. Every query attends to itself.
    import analyses

    task, model = small_bijection_mamba()
    with torch.no_grad():
        for block in model.blocks:
            block.mixer.A_log.fill_(30.0)
    result = analyses.REGISTRY["qk-alignment"](model, n=40, seed=0)
    mass = result.metrics["layer_mean"]["attention_mass"]
    assert result.metrics["n_heads"] == 1 and "gap" not in result.metrics["layer_mean"]
    assert "effective attention" in result.metrics["patterns"]
    for layer in range(2):
        assert mass["self"][layer] == pytest.approx(1.0, abs=1e-6)
        assert result.metrics["layer_mean"]["attention_entropy_bits"][layer] == pytest.approx(0.0, abs=1e-5)
    assert set(result.figures) == {"attention-entropy", "attention-mass"}
    for fig in result.figures.values():  # the figures say what they show: no heads, an effective attention
        assert "effective attention" in fig.layout.title.text and "mean over channels" in fig.layout.title.text


def test_qk_alignment_on_an_untrained_mamba_reports_masses_that_sum_to_one():
    import analyses

    _, model = small_bijection_mamba(seed=2)
    result = analyses.REGISTRY["qk-alignment"](model, n=40, seed=0)
    mass = result.metrics["layer_mean"]["attention_mass"]
    for layer in range(2):
        assert sum(shares[layer] for shares in mass.values()) == pytest.approx(1.0, abs=1e-6)
        assert 0 < mass["earlier_values"][layer] < 1  # an untrained scan spreads its mixing
