"""Paper III's prompt tasks: the two-label task's exact posterior against brute force, the coin's against
enumeration, their prompts, and the renormalised answer distribution of a language model on a constructed
model whose answer is known."""
import itertools
import math

import pytest
import torch

from analyses import activations
from tasks import prompts
from tasks.prompts import coin, two_label


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
    prompt_set = two_label.token_prompts(inputs=list(range(10)), labels=(20, 21), shots=(0, 2, 8), per_shot=300,
                                         alpha=0.8, seed=1, separator=(15,))
    assert len(prompt_set.prompts) == 900 and prompt_set.answers == (20, 21)
    for prompt in prompt_set.prompts:
        k = len(prompt.shown)
        assert len(prompt.tokens) == 3 * k + 2 and prompt.tokens[-1] == 15
        assert [prompt.tokens[3 * i + 2] - 20 for i in range(k)] == prompt.shown
        assert torch.equal(prompt.bayes, two_label.predictive(prompt.shown, 0.8))
    # the shown labels agree with each other as often as labels drawn from one latent at rate 0.8 do
    pairs = [a == b for p in prompt_set.prompts if len(p.shown) == 8 for a, b in zip(p.shown, p.shown[1:])]
    assert abs(sum(pairs) / len(pairs) - (0.8 ** 2 + 0.2 ** 2)) < 0.03  # 2,100 pairs
    with pytest.raises(ValueError, match="two different tokens"):
        two_label.token_prompts([1], (3, 3))
    with pytest.raises(ValueError, match="alpha"):
        two_label.token_prompts([1], (3, 4), alpha=1.0)


def test_text_prompts_need_one_token_labels():
    vocab = {w: i for i, w in enumerate([" ->", " cat", " dog", " blue", " green", " heads", " tails"])}
    encode = lambda text: [vocab[text]] if text in vocab else [0, 1]  # noqa: E731  (unknown: two tokens)
    prompt_set = prompts.make("two-label").build(reader(encode), ["cat", "dog"], per_shot=5, alpha=0.9, seed=0)
    assert prompt_set.answers == (3, 4) and all(p.tokens[-1] == 0 for p in prompt_set.prompts)
    with pytest.raises(ValueError, match="one token each"):
        prompts.make("coin").build(reader(lambda text: [vocab.get(text, 9), 9]), [], per_shot=5, alpha=0.9, seed=0)


def reader(encode):
    """What a prompt task reads of a language model: its tokenizer, vocabulary size and (none) wind tunnel."""
    from types import SimpleNamespace

    return SimpleNamespace(encode=encode, model=SimpleNamespace(cfg=SimpleNamespace(d_vocab=16)), task=None)


def test_the_coins_predictive_and_posterior_entropy_are_exact():
    import itertools

    for k in range(7):
        for shown in itertools.product((0, 1), repeat=k):
            heads = k - sum(shown)
            # Laplace's rule by integrating p^(h+1) (1-p)^t against p^h (1-p)^t on a fine grid
            grid = torch.linspace(0, 1, 200_001, dtype=torch.float64)
            like = grid ** heads * (1 - grid) ** (k - heads)
            assert coin.predictive(shown)[0].item() == pytest.approx(
                torch.trapezoid(grid * like, grid).item() / torch.trapezoid(like, grid).item(), abs=1e-8)
            density = like / torch.trapezoid(like, grid)
            numeric = -torch.trapezoid(density * torch.log2(density.clamp_min(1e-300)), grid).item()
            assert coin.beta_entropy_bits(1 + heads, 1 + k - heads) == pytest.approx(numeric, abs=1e-4)
    assert coin.beta_entropy_bits(1, 1) == 0.0  # the uniform prior


def constant_model(log_odds: float):
    """A TransformerLens model whose next-token logits are its unembedding bias alone: label 0 vs 1 at log_odds."""
    from tests.tiny_language_models import native

    model = native(n_layers=1, d_model=8, d_head=4, n_heads=2, d_vocab=24)
    with torch.no_grad():
        model.W_U.zero_()
        model.b_U.zero_()
        model.b_U[20], model.b_U[21] = log_odds, 0.0
    return model


def test_the_answer_distribution_is_renormalised_over_the_two_answers():
    from models.language_model import LanguageModel

    prompt_set = two_label.token_prompts(list(range(10)), (20, 21), shots=(0, 1, 4), per_shot=4, seed=0)
    lm = LanguageModel(constant_model(math.log(3)), "constant")
    probs, _ = activations.last_positions(lm, prompt_set, [])
    assert torch.allclose(probs, torch.tensor([[0.75, 0.25]] * len(prompt_set.prompts), dtype=torch.float64),
                          atol=1e-6)
    # the exact predictive scores zero against itself, and a constant model does not
    perfect = activations.calibration(prompt_set.bayes, prompt_set)
    assert perfect["entropy_mae_bits"] < 1e-12 and perfect["kl_bits"] < 1e-12
    constant = activations.calibration(probs, prompt_set)
    assert sorted(constant["by_shots"]) == [0, 1, 4] and constant["by_shots"][4]["kl_bits"] > 0.1
    assert constant["by_shots"][0]["entropy_mae_bits"] == pytest.approx(
        1 - activations.entropy_bits(torch.tensor([0.75, 0.25])).item(), abs=1e-6)


def test_word_lists_are_shipped_or_read_from_a_file(tmp_path):
    assert "prime" in prompts.read_words("math") and len(prompts.read_words("mixed")) >= 20
    mine = tmp_path / "words.txt"
    mine.write_text("# my domain\nalpha\nbeta  # a comment\n\n")
    assert prompts.read_words(str(mine)) == ["alpha", "beta"]
    with pytest.raises(ValueError, match="shipped domain"):
        prompts.read_words("no-such-domain")
    (tmp_path / "one.txt").write_text("alpha\n")
    with pytest.raises(ValueError, match="at least 2"):
        prompts.read_words(str(tmp_path / "one.txt"))
