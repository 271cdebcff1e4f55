"""Paper III's two-label in-context task: its exact posterior against brute force, its prompts, and the
renormalised label distribution of a language model on a constructed model whose answer is known."""
import itertools
import math

import pytest
import torch

from interp import two_label


@pytest.mark.parametrize("alpha", [0.6, 0.9, 0.99])
def test_the_predictive_is_the_brute_force_ratio_of_joints(alpha):
    for k in range(9):
        for shown in itertools.product((0, 1), repeat=k):
            exact = two_label.predictive(shown, alpha)
            assert torch.allclose(exact, two_label.brute_force_predictive(shown, alpha), rtol=0, atol=1e-12)
            post = two_label.posterior(shown, alpha)
            # Bayes by enumeration over L
            like = [math.prod(alpha if y == latent else 1 - alpha for y in shown) for latent in (0, 1)]
            assert post[0].item() == pytest.approx(like[0] / sum(like), abs=1e-12)


def test_long_prompts_do_not_underflow():
    post = two_label.posterior([0] * 400 + [1] * 100, 0.9)
    assert torch.isfinite(post).all() and post[0] > 1 - 1e-12


def test_token_prompts_show_k_examples_whose_labels_follow_the_latent_label_at_rate_alpha():
    prompts = two_label.token_prompts(inputs=list(range(10)), labels=(20, 21), shots=(0, 2, 8), per_shot=300,
                                      alpha=0.8, seed=1, separator=(15,))
    assert len(prompts) == 900
    for prompt in prompts:
        k = len(prompt.shown)
        assert len(prompt.tokens) == 3 * k + 2 and prompt.tokens[-1] == 15
        assert [prompt.tokens[3 * i + 2] - 20 for i in range(k)] == prompt.shown
    agree = [y == p.latent for p in prompts for y in p.shown]
    assert abs(sum(agree) / len(agree) - 0.8) < 0.02  # 3,000 shown labels
    with pytest.raises(ValueError, match="two different tokens"):
        two_label.token_prompts([1], (3, 3))
    with pytest.raises(ValueError, match="alpha"):
        two_label.token_prompts([1], (3, 4), alpha=1.0)


def test_text_prompts_need_one_token_labels():
    vocab = {w: i for i, w in enumerate([" ->", " cat", " dog", " foo", " bar", " baz"])}
    encode = lambda text: [vocab[text]] if text in vocab else [0, 1]  # noqa: E731  (unknown: two tokens)
    prompts, labels = two_label.text_prompts(encode, ["cat", "dog"], ("foo", "bar"), shots=(1,), per_shot=5)
    assert labels == (3, 4) and all(p.tokens[1] == 0 and p.tokens[-1] == 0 for p in prompts)
    with pytest.raises(ValueError, match="one-token labels"):
        two_label.text_prompts(encode, ["cat"], ("foo", "zebra"))


def constant_model(log_odds: float):
    """A HookedTransformer whose next-token logits are its unembedding bias alone: label 0 vs 1 at log_odds."""
    from transformer_lens import HookedTransformer, HookedTransformerConfig

    from interp.language_models import quiet_deprecation

    cfg = HookedTransformerConfig(n_layers=1, d_model=8, n_ctx=64, d_head=4, n_heads=2, d_vocab=24, act_fn="gelu")
    with quiet_deprecation():
        model = HookedTransformer(cfg).eval()
    with torch.no_grad():
        model.W_U.zero_()
        model.b_U.zero_()
        model.b_U[20], model.b_U[21] = log_odds, 0.0
    return model


def test_the_label_distribution_is_renormalised_over_the_two_labels():
    prompts = two_label.token_prompts(list(range(10)), (20, 21), shots=(0, 1, 4), per_shot=4, seed=0)
    probs = two_label.label_distribution(constant_model(math.log(3)), prompts, (20, 21))
    assert torch.allclose(probs, torch.tensor([[0.75, 0.25]] * len(prompts), dtype=torch.float64), atol=1e-6)
    # the exact predictive scores zero against itself, and a constant model does not
    exact = torch.stack([two_label.predictive(p.shown, 0.9) for p in prompts])
    perfect = two_label.score(exact, prompts, 0.9)
    assert all(row["entropy_mae_vs_predictive_bits"] < 1e-12 and row["kl_predictive_bits"] < 1e-12
               for row in perfect.values())
    constant = two_label.score(probs, prompts, 0.9)
    assert sorted(constant) == [0, 1, 4] and constant[4]["kl_predictive_bits"] > 0.1
    assert constant[0]["entropy_mae_vs_predictive_bits"] == pytest.approx(1 - two_label.entropy_bits(
        torch.tensor([0.75, 0.25])).item(), abs=1e-6)
