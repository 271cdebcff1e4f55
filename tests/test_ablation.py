"""Head and layer ablation on constructed models whose answer is known."""
import json

import pytest
import torch

import analyses
import models
import tasks
from analyses import activations, head_ablation, layer_ablation
from analyses.base import eval_batch
from analyses.calibration import measure

N = 64  # sequences per evaluation: enough to make every head matter, small enough to stay fast


def tiny_model(n_layers=1, seed=0):
    task = tasks.make("bijection", V=6, L=5)
    return models.build("transformer", task, config=dict(d_model=16, n_layers=n_layers, n_heads=2), seed=seed).eval()


def test_a_duplicated_head_ablates_symmetrically():
    model = tiny_model()
    attn = model.blocks[0].attn
    with torch.no_grad():
        for name in ("W_Q", "W_K", "W_V", "b_Q", "b_K", "b_V", "W_O"):
            getattr(attn, name)[1].copy_(getattr(attn, name)[0])
    metrics = analyses.run("head-ablation", model, n=N).metrics
    mae = metrics["zero"]["entropy_mae_bits"][0]
    assert mae[0] == pytest.approx(mae[1], abs=1e-6)
    assert metrics["mean"]["entropy_mae_bits"][0][0] == pytest.approx(metrics["mean"]["entropy_mae_bits"][0][1], abs=1e-6)
    assert metrics["zero"]["delta_mae_bits"][0][0] != 0  # the duplicated heads do matter
    assert metrics["hypothesis_frame_head"]["top_to_second_ratio"] == pytest.approx(1, abs=1e-4)


def test_a_head_without_output_weights_has_no_effect():
    model = tiny_model()
    with torch.no_grad():
        model.blocks[0].attn.W_O[1].zero_()
    metrics = analyses.run("head-ablation", model, n=N).metrics
    for kind in ("zero", "mean"):
        assert metrics[kind]["delta_mae_bits"][0][1] == 0
        assert metrics[kind]["mae_ratio"][0][1] == 1
        assert metrics[kind]["delta_mae_bits"][0][0] != 0  # the other head is live


def test_mean_ablation_of_a_constant_head_changes_nothing():
    model = tiny_model()
    with torch.no_grad():
        model.blocks[0].attn.W_V[0].zero_()  # z = pattern @ b_V = b_V at every position
        model.blocks[0].attn.b_V[0].copy_(torch.randn(8, generator=torch.Generator().manual_seed(1)))
    metrics = analyses.run("head-ablation", model, n=N).metrics
    assert metrics["mean"]["delta_mae_bits"][0][0] == pytest.approx(0, abs=1e-5)
    assert metrics["mean"]["delta_kl_bits"][0][0] == pytest.approx(0, abs=1e-5)
    assert abs(metrics["zero"]["delta_mae_bits"][0][0]) > 1e-3  # but removing it does matter


def test_the_mean_is_over_all_sequences_and_positions():
    model = tiny_model()
    batch = eval_batch(model, N, 0)
    _, cache = model.run_with_cache(batch.tokens)
    expected = cache["blocks.0.attn.hook_z"].mean((0, 1))
    for chunk in (N, 10):  # chunking must not change the mean
        assert torch.allclose(activations.mean_z(model, batch.tokens, chunk=chunk)[0].float(), expected, atol=1e-6)


def identity_block_model():
    """A 2-layer model whose block 1 writes nothing to the residual stream."""
    model = tiny_model(n_layers=2)
    block = model.blocks[1]
    with torch.no_grad():
        for p in (block.attn.W_O, block.attn.b_O, block.mlp.W_out, block.mlp.b_out):
            p.zero_()
    return model


def test_skipping_an_identity_block_changes_nothing():
    metrics = analyses.run("layer-ablation", identity_block_model(), n=N).metrics
    for part in ("block", "attention_only", "mlp_only"):
        assert metrics[part]["mae_ratio"][1] == pytest.approx(1, abs=1e-6)
    assert metrics["block"]["mae_ratio"][0] != pytest.approx(1, abs=1e-3)  # block 0 is live
    assert metrics["all_blocks_over_10x"] is False
    assert metrics["min_block_ratio"] == pytest.approx(1, abs=1e-6)


def test_skipping_a_block_equals_zeroing_its_attention_and_mlp():
    model = tiny_model(n_layers=2, seed=3)
    batch = eval_batch(model, N, 0)
    for l in range(2):
        skipped = layer_ablation.measure_with(model, batch, activations.skip_block_hooks(l))
        zeroed = layer_ablation.measure_with(model, batch, activations.zero_hooks(f"blocks.{l}.hook_attn_out")
                                             + activations.zero_hooks(f"blocks.{l}.hook_mlp_out"))
        assert skipped["entropy_mae_bits"] == pytest.approx(zeroed["entropy_mae_bits"], abs=1e-6)
        assert skipped["kl_bits"] == pytest.approx(zeroed["kl_bits"], abs=1e-6)
    # and the hooks are gone afterwards: the model is intact again
    assert measure(model, batch)["entropy_mae_bits"] != skipped["entropy_mae_bits"]


def test_both_analyses_run_and_serialise(small_model):
    heads = analyses.run("head-ablation", small_model, n=N)
    assert set(heads.figures) == {"zero-ablation", "mean-ablation"}
    m = heads.metrics
    assert len(m["zero"]["delta_mae_bits"]) == 2 and len(m["zero"]["delta_mae_bits"][0]) == 2
    assert m["zero"]["delta_mae_bits"][1][0] == pytest.approx(
        m["zero"]["entropy_mae_bits"][1][0] - m["intact"]["entropy_mae_bits"])
    assert "mean over all sequences and all positions" in heads.definition
    # the two pages share one colour scale, wide enough for the larger effect of either
    scales = {(f.data[0].zmin, f.data[0].zmax) for f in heads.figures.values()}
    assert len(scales) == 1 and scales.pop()[1] == head_ablation.doubling_span([m["zero"], m["mean"]])
    layers = analyses.run("layer-ablation", small_model, n=N)
    assert set(layers.figures) == {"mae-ratio"}
    assert layers.figures["mae-ratio"].layout.yaxis.type == "log"
    assert len(layers.figures["mae-ratio"].data) == 3
    assert isinstance(layers.metrics["all_blocks_over_10x"], bool)
    assert layers.metrics["min_block_ratio"] == min(layers.metrics["block"]["mae_ratio"])
    for result in (heads, layers):
        json.dumps(result.metrics, allow_nan=False)
        json.dumps(result.definition)
        for fig in result.figures.values():
            assert fig.layout.title.text


def test_continuous_task():
    model = models.build("transformer", tasks.make("regression", d=2, n=4),
                         config=dict(d_model=16, n_layers=1, n_heads=2), seed=0).eval()
    heads = analyses.run("head-ablation", model, n=16).metrics
    layers = analyses.run("layer-ablation", model, n=16).metrics
    assert heads["zero"]["kl_bits"][0][0] >= 0 and layers["block"]["mae_ratio"][0] > 0
    json.dumps([heads, layers], allow_nan=False)


class NoAttention:
    arch = "mlp-only"

    def has_attention(self):
        return False


def test_a_model_without_attention_is_refused():
    with pytest.raises(analyses.AnalysisError, match="head-ablation needs an attention model"):
        analyses.run("head-ablation", NoAttention())
    with pytest.raises(analyses.AnalysisError, match="layer-ablation needs a hooked model"):
        analyses.run("layer-ablation", NoAttention())


def test_options_are_listed():
    assert analyses.options("head-ablation") == {"n": 1000, "seed": 1234}
    assert analyses.options("layer-ablation") == {"n": 1000, "seed": 1234}



def test_an_ablation_ratio_comes_with_a_paired_interval():
    model = tiny_model(n_layers=2)
    with torch.no_grad():
        model.blocks[0].attn.W_O[1].zero_()  # a head that writes nothing: ablating it changes no sequence
    heads = analyses.run("head-ablation", model, n=N).metrics
    assert heads["zero"]["mae_ratio_interval"][0][1] == pytest.approx([1.0, 1.0])
    live = heads["zero"]["mae_ratio_interval"][0][0]
    assert live[0] <= heads["zero"]["mae_ratio"][0][0] <= live[1] and live[0] < live[1]
    blocks = analyses.run("layer-ablation", model, n=N).metrics["block"]
    for ratio, (low, high) in zip(blocks["mae_ratio"], blocks["mae_ratio_interval"]):
        assert low <= ratio <= high and low < high
