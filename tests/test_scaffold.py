"""The token shift (a causal short convolution on the embeddings) is offered to every architecture."""
import pytest
import torch

import models
import tasks


@pytest.mark.parametrize("arch", models.ARCHS)
def test_every_architecture_takes_the_token_shift_on_top_of_the_same_weights(arch):
    task = tasks.make("recall", N=4, n_keys=8, n_values=8, queries=2, fillers=1, gap=1)
    config = models.model_config(arch, "cpu", task, d_model=16, **({"n_heads": 2} if arch == "transformer" else {}))
    plain = models.build(arch, task, config=config | {"shift": None}, seed=3)
    shifted = models.build(arch, task, config=config | {"shift": 2}, seed=3)
    assert models.n_params(shifted) - models.n_params(plain) == 2 * 16  # one weight per tap and channel
    own = {k: v for k, v in shifted.state_dict().items() if not k.startswith("token_shift.")}
    for key, value in plain.state_dict().items():  # the shift has its own generator: the rest is the same init
        assert torch.equal(own[key], value), key
    tokens = task.sample(3, generator=torch.Generator().manual_seed(0)).tokens
    names = ("hook_embed", "hook_pos_embed", "hook_token_shift")
    _, cache = shifted.run_with_cache(tokens, names_filter=lambda name: name in names)
    embed = cache["hook_embed"] + (cache["hook_pos_embed"] if "hook_pos_embed" in cache else 0)  # the shift's input
    after = cache["hook_token_shift"]
    W = shifted.token_shift.W_shift.detach()
    expected = embed.clone()
    expected[:, 1:] += W[0] * embed[:, :-1]
    expected[:, 2:] += W[1] * embed[:, :-2]
    torch.testing.assert_close(after, expected, rtol=1e-5, atol=1e-6)
    with torch.no_grad():  # zero taps: the model without the shift, exactly
        shifted.token_shift.W_shift.zero_()
        torch.testing.assert_close(shifted(tokens), plain(tokens), rtol=0, atol=0)
