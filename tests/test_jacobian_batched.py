"""The Jacobian lens's fit, batched (a probe per source layer, the output dimensions' backward passes vmapped in
chunks), gives what one backward pass per output dimension with a one-hot cotangent gave, on a bridged language
model and on every wind-tunnel architecture (Mamba's C++ kernels have no vmap rule: one pass per cotangent there)."""
import pytest
import torch

import models
import tasks
from analyses import jacobian_lens as J
from models.base import act_name

SMALL = {"transformer": {"d_model": 16, "n_layers": 3, "n_heads": 2}, "mamba": {"d_model": 16, "n_layers": 3},
         "lstm": {"d_model": 16, "n_layers": 3}, "mlp": {"d_model": 16, "n_layers": 3}}


def one_at_a_time(model, tokens, skip_first=0, same_position=False, offset=0):
    """The reference: the full gradient at every source position, one backward pass per output dimension with its
    one-hot cotangent planted at every target position, then averaged over the source positions."""
    n_layers, d = model.cfg.n_layers, model.cfg.d_model
    B, T = tokens.shape
    valid = torch.arange(min(skip_first, T - 1), T - 1)
    rows = torch.arange(B)
    own = valid[(offset + rows) % len(valid)]
    names = [act_name("resid_post", l) for l in range(n_layers)]
    captured = {}

    def capture(name):
        def hook(resid, hook):
            resid = resid.detach().requires_grad_(True) if name == names[0] else resid
            captured[name] = resid
            return resid
        return hook

    sums = {l: torch.zeros(d, d, dtype=torch.float64) for l in range(n_layers - 1)}
    with torch.enable_grad(), J._Frozen(model), model.hooks(fwd_hooks=[(n, capture(n)) for n in names]):
        model(tokens)
        target = captured[names[-1]]
        for i in range(d):
            cotangent = torch.zeros_like(target)
            if same_position:
                cotangent[rows, own, i] = 1.0
            else:
                cotangent[:, valid, i] = 1.0
            grads = torch.autograd.grad(target, [captured[n] for n in names[:-1]], cotangent, retain_graph=True)
            for l, grad in enumerate(grads):
                picked = grad[rows, own] if same_position else grad[:, valid].mean(1)
                sums[l][i] = picked.double().sum(0)
    return sums


def assert_same_fit(model, tokens, **options):
    batched, n = J.jacobian_sums(model, tokens, **options)
    reference = one_at_a_time(model, tokens, **options)
    assert n == len(tokens) and sorted(batched) == sorted(reference)
    for l in reference:
        assert reference[l].abs().max() > 0.1  # a real Jacobian, not zeros on both sides
        torch.testing.assert_close(batched[l], reference[l], atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("options", [{}, {"skip_first": 3}, {"same_position": True, "offset": 2}])
def test_the_batched_fit_is_the_one_at_a_time_fit_on_a_bridged_language_model(options, monkeypatch):
    from models.language_model import from_hugging_face
    from tests.tiny_language_models import tiny

    model = from_hugging_face(tiny("llama-gqa")).eval()
    tokens = torch.randint(0, 64, (5, 9), generator=torch.Generator().manual_seed(0))
    assert_same_fit(model, tokens, **options)
    monkeypatch.setattr(J, "CHUNK_BYTES", 1)  # one cotangent per batch: the chunk edges change nothing
    assert_same_fit(model, tokens, **options)


@pytest.mark.parametrize("arch", models.ARCHS)
def test_the_batched_fit_is_the_one_at_a_time_fit_on_every_architecture(arch):
    task = tasks.make("bijection", V=5, L=4)
    model = models.build(arch, task, SMALL[arch], seed=0).eval()
    tokens = task.sample(6, generator=torch.Generator().manual_seed(0)).tokens
    assert_same_fit(model, tokens, skip_first=1)
