"""jacobian-lens: an exact answer on linear models, TransformerLens 4.3's own Jacobian lens on a bridged Llama, and
a run on every architecture and on a language model."""
import pytest
import torch
from torch import nn

import analyses
import models
import tasks
from analyses import jacobian_lens as J
from analyses import logit_lens

SMALL = {"transformer": {"d_model": 16, "n_layers": 3, "n_heads": 2}, "mamba": {"d_model": 16, "n_layers": 3},
         "lstm": {"d_model": 16, "n_layers": 3}, "mlp": {"d_model": 16, "n_layers": 3}}


class LinearMixer(nn.Module):
    """x -> A x W^T: W [d, d] on the features, A [T, T] on the positions (identity, or a causal running mean)."""

    def __init__(self, W: torch.Tensor, causal: bool):
        super().__init__()
        self.W, self.causal = nn.Parameter(W), causal

    def mixing(self, T: int) -> torch.Tensor:
        if not self.causal:
            return torch.eye(T, dtype=self.W.dtype)
        return torch.tril(torch.ones(T, T, dtype=self.W.dtype)) / torch.arange(1, T + 1, dtype=self.W.dtype)[:, None]

    def forward(self, x):
        return torch.einsum("ts,bsd,ed->bte", self.mixing(x.shape[1]), x, self.W)


def linear_model(causal: list[bool], d: int = 6):
    """The MLP architecture with every block made linear: h_l = h_{l-1} + A_l h_{l-1} W_l^T (no norm), float64."""
    task = tasks.make("bijection", V=5, L=4)
    model = models.build("mlp", task, {"d_model": d, "n_layers": len(causal)}, seed=0).double().eval()
    g = torch.Generator().manual_seed(1)
    for block, mixes in zip(model.blocks, causal):
        block.ln = nn.Identity()
        block.mixer = LinearMixer(0.3 * torch.randn(d, d, generator=g, dtype=torch.float64), mixes)
    return model, task


def expected(model, T: int, layer: int, skip_first: int) -> torch.Tensor:
    """J_layer from the whole linear map, built without autograd: the stack's matrix on the flattened (position,
    feature) residual stream is the product of the blocks' I + kron(A_k, W_k), and J sums its [t', t] blocks over
    t, t' in V, divided by |V|."""
    d = model.cfg.d_model
    M = torch.eye(T * d, dtype=torch.float64)
    for block in model.blocks[layer + 1:]:
        M = (torch.eye(T * d, dtype=torch.float64) + torch.kron(block.mixer.mixing(T), block.mixer.W.detach())) @ M
    valid = range(skip_first, T - 1)
    blocks = M.reshape(T, d, T, d)  # [t', e, t, d]
    return sum(blocks[tp, :, t, :] for t in valid for tp in valid) / len(valid)


@pytest.mark.parametrize("causal", [[False, False, False], [True, False, True], [True, True, True]])
@pytest.mark.parametrize("skip_first", [0, 2])
def test_the_fit_is_the_exact_jacobian_of_a_linear_stack(causal, skip_first):
    model, task = linear_model(causal)
    tokens = task.sample(5, generator=torch.Generator().manual_seed(0)).tokens
    fitted = J.fit(model, [tokens[:2], tokens[2:]], skip_first=skip_first)
    assert sorted(fitted) == [0, 1]
    for layer in (0, 1):
        torch.testing.assert_close(fitted[layer], expected(model, tokens.shape[1], layer, skip_first),
                                   atol=1e-12, rtol=1e-10)
    if not any(causal):  # positions do not mix: J_l is the product of the later blocks' (I + W_k)
        I = torch.eye(6, dtype=torch.float64)
        W = [b.mixer.W.detach() for b in model.blocks]
        torch.testing.assert_close(fitted[0], (I + W[2]) @ (I + W[1]), atol=1e-12, rtol=1e-10)
        torch.testing.assert_close(fitted[1], I + W[2], atol=1e-12, rtol=1e-10)


def test_the_lens_reads_the_transported_stream_and_is_the_logit_lens_when_j_is_the_identity():
    model, task = linear_model([False, False, False])
    tokens = task.sample(3, generator=torch.Generator().manual_seed(0)).tokens
    fitted = J.fit(model, [tokens])
    lens = J.lens_probs(model, tokens, fitted)
    _, cache = model.run_with_cache(tokens)
    # no position mixing: J_0 h_0 is the output's residual stream exactly, so the lens at every layer is the output
    for l in range(3):
        torch.testing.assert_close(lens[l], model.answer_probs(tokens).float(), atol=1e-6, rtol=1e-5)
    identity = {l: torch.eye(6, dtype=torch.float64) for l in (0, 1)}
    for ours, theirs in zip(J.lens_probs(model, tokens, identity), logit_lens.lens_probs(model, tokens)):
        torch.testing.assert_close(ours, theirs)


def test_a_stack_that_adds_nothing_has_the_identity_as_its_lens():
    task = tasks.make("bijection", V=5, L=4)
    model = models.build("transformer", task, SMALL["transformer"], seed=1).eval()
    with torch.no_grad():
        for block in model.blocks[1:]:
            for p in block.parameters():
                p.zero_()
    fitted = J.fit(model, [task.sample(4, generator=torch.Generator().manual_seed(0)).tokens])
    for layer in (0, 1):
        torch.testing.assert_close(fitted[layer], torch.eye(16, dtype=torch.float64), atol=1e-6, rtol=0)


@pytest.mark.parametrize("arch", models.ARCHS)
def test_it_runs_on_every_architecture(arch):
    task = tasks.make("bijection", V=5, L=4)
    model = models.build(arch, task, SMALL[arch], seed=1).eval()
    m = analyses.run("jacobian-lens", model, n=12, n_fit=6).metrics
    for lens in ("jacobian", "logit"):
        assert len(m[lens]["kl_bits"]) == len(m[lens]["kl_bits_interval"]) == 3
        lo, hi = m[lens]["kl_bits_interval"][0]
        assert lo <= m[lens]["kl_bits"][0] <= hi
    # the last layer's lens is the model's output for both lenses
    assert m["jacobian"]["kl_bits"][-1] == pytest.approx(m["logit"]["kl_bits"][-1], abs=1e-6)
    assert m["transport_distance"][-1] == 0 and m["transport_distance"][0] > 0
    assert m["kl_gain_bits"][-1] == pytest.approx(0, abs=1e-6)


def test_it_runs_on_a_bridged_language_model():
    from models.language_model import LanguageModel, from_hugging_face
    from tests.tiny_language_models import tiny, word_tokenizer

    tokenizer = word_tokenizer()
    lm = LanguageModel(from_hugging_face(tiny("llama-gqa", vocab_size=len(tokenizer))), "tiny", tokenizer)
    m = analyses.run("jacobian-lens", lm, per_shot=3).metrics
    assert m["n_prompts"] == 15 and m["n_fit_prompts"] == 10 and len(m["jacobian"]["kl_bits"]) == 2
    assert m["jacobian"]["kl_bits"][-1] == pytest.approx(m["logit"]["kl_bits"][-1], abs=1e-9)
    # the two halves' lenses: the last layer is the output for both, so only the layers below can differ
    first, second = m["fit_halves_kl_bits"]
    assert first[-1] == pytest.approx(second[-1], abs=1e-9)
    assert m["fit_halves_max_gap_bits"] == pytest.approx(max(abs(a - b) for a, b in zip(first, second)))


def test_the_fit_on_halves_is_the_fit_on_each_half_alone():
    """fit(halves=True): each half's J is what fitting its batches alone gives, and the whole J their average
    weighted by sequences (the batches alternate between halves by count)."""
    from analyses.jacobian_lens import fit

    task = tasks.make("bijection", V=5, L=4)
    model = models.build("transformer", task, SMALL["transformer"], seed=1).eval()
    tokens = task.sample(7, generator=torch.Generator().manual_seed(3)).tokens
    batches = [tokens[:3], tokens[3:4], tokens[4:7]]  # 3 sequences to the first half, then 1 and 3 to the second
    whole, first, second = fit(model, iter(batches), halves=True)
    alone_first, alone_second = fit(model, iter(batches[:1])), fit(model, iter(batches[1:]))
    for l in whole:
        torch.testing.assert_close(first[l], alone_first[l], rtol=0, atol=1e-12)
        torch.testing.assert_close(second[l], alone_second[l], rtol=0, atol=1e-12)
        torch.testing.assert_close(whole[l], (3 * first[l] + 4 * second[l]) / 7, rtol=0, atol=1e-12)


PROMPTS = ["cat -> blue river -> green bread -> blue", "river -> green cat -> blue bread -> green stone -> blue",
           "bread -> blue stone -> green cat ->"]


def test_the_fit_and_readout_agree_with_transformer_lens():
    """TransformerLens 4.3's ``JacobianLens.fit`` (on a raw bridge, which it requires) and ours (on a bridge of the
    same weights in compatibility mode, as models/language_model.py makes them) on the same prompts: the transport
    matrices within 1e-5 (float32 gradients summed over a few positions), the lens logits of ``readout`` within 1e-4."""
    from transformer_lens.model_bridge.sources import build_bridge_from_module
    from transformer_lens.tools.analysis import JacobianLens

    from models.language_model import from_hugging_face
    from tests.tiny_language_models import tiny, word_tokenizer

    tokenizer = word_tokenizer()
    raw_hf, ours_hf = (tiny("llama-gqa", vocab_size=len(tokenizer)) for _ in range(2))  # the same seed: same weights
    raw = build_bridge_from_module(raw_hf, "LlamaForCausalLM", hf_config=raw_hf.config, tokenizer=tokenizer,
                                   model_name="tiny").eval()
    ours = from_hugging_face(ours_hf)
    theirs = JacobianLens.fit(raw, PROMPTS, corpus="test", skip_first_positions=1, dim_batch=8, show_progress=False)
    fitted = J.fit(ours, [raw.to_tokens(p) for p in PROMPTS], skip_first=1)
    assert theirs.source_layers == sorted(fitted) == [0] and theirs.n_prompts == 3
    torch.testing.assert_close(fitted[0].float(), theirs.jacobians[0], atol=1e-5, rtol=1e-4)
    tokens = raw.to_tokens(PROMPTS[2])
    read = theirs.readout(raw, tokens, return_full_logits=True)
    _, cache = ours.run_with_cache(tokens)
    mine = J.lens_logits(ours, cache["blocks.0.hook_resid_post"][0], fitted[0]).float()
    torch.testing.assert_close(mine, read.lens_logits[0], atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("causal", [[False, False, False], [True, True, True]])
def test_the_same_position_fit_is_the_mean_diagonal_block(causal):
    """same_position: each sequence contributes d h_{L-1,t} / d h_{l,t} at one position, cycling through V, so over
    a multiple of |V| sequences (split unevenly across batches) the fit is the mean over V of the diagonal blocks."""
    model, task = linear_model(causal)
    tokens = task.sample(2 * (task.seq_len - 1), generator=torch.Generator().manual_seed(0)).tokens
    T = tokens.shape[1]
    fitted = J.fit(model, [tokens[:5], tokens[5:]], same_position=True)
    d = model.cfg.d_model
    for layer in (0, 1):
        M = torch.eye(T * d, dtype=torch.float64)
        for block in model.blocks[layer + 1:]:
            M = (torch.eye(T * d, dtype=torch.float64) + torch.kron(block.mixer.mixing(T), block.mixer.W.detach())) @ M
        blocks = M.reshape(T, d, T, d)
        diagonal = sum(blocks[t, :, t, :] for t in range(T - 1)) / (T - 1)
        torch.testing.assert_close(fitted[layer], diagonal, atol=1e-12, rtol=1e-10)
    if not any(causal):  # no mixing: the same-position Jacobian is the whole one
        torch.testing.assert_close(fitted[0], J.fit(model, [tokens])[0], atol=1e-12, rtol=1e-10)
