"""logit-lens: the last layer's lens is the model's output; a block that adds nothing changes no lens."""
import pytest
import torch

import analyses
import models
import tasks
from analyses import logit_lens

SMALL = {"transformer": {"d_model": 16, "n_layers": 3, "n_heads": 2}, "mamba": {"d_model": 16, "n_layers": 3},
         "lstm": {"d_model": 16, "n_layers": 3}, "mlp": {"d_model": 16, "n_layers": 3}}


@pytest.mark.parametrize("arch", models.ARCHS)
def test_the_last_lens_is_the_output_and_an_empty_block_changes_nothing(arch):
    task = tasks.make("bijection", V=5, L=4)
    model = models.build(arch, task, SMALL[arch], seed=1).eval()
    tokens = task.sample(4, generator=torch.Generator().manual_seed(0)).tokens
    lens = logit_lens.lens_probs(model, tokens)
    assert len(lens) == 3
    assert torch.allclose(lens[-1], model.answer_probs(tokens).float(), atol=1e-6)
    with torch.no_grad():
        for p in model.blocks[2].parameters():
            p.zero_()  # the last block now adds nothing to the residual stream
    lens = logit_lens.lens_probs(model, tokens)
    assert torch.allclose(lens[1], lens[2], atol=1e-6)


def test_the_comparison_has_known_answers():
    bayes = torch.tensor([[0.5, 0.5, 0.0], [1.0, 0.0, 0.0]])
    same = logit_lens.compare(bayes.clamp_min(1e-12), bayes)
    assert same["kl_bits"].abs().max() < 1e-6 and same["agreement"].tolist() == [1.0, 1.0]
    uniform = logit_lens.compare(torch.full((2, 3), 1 / 3), bayes)
    assert uniform["kl_bits"].tolist() == pytest.approx([torch.log2(torch.tensor(1.5)).item(), 1.584962], rel=1e-5)
    assert uniform["entropy_mae_bits"].tolist() == pytest.approx([1.584962 - 1, 1.584962], rel=1e-5)
    wrong = logit_lens.compare(torch.tensor([[0.0, 0.1, 0.9]]), bayes[:1])
    assert wrong["agreement"].tolist() == [0.0]


def test_the_analysis_reports_every_layer():
    task = tasks.make("hmm", S=2, O=2, K=4)
    model = models.build("transformer", task, SMALL["transformer"], seed=0)
    m = analyses.run("logit-lens", model, n=16).metrics
    assert len(m["kl_bits"]) == len(m["agreement"]) == 3 and m["final_kl_bits"] == m["kl_bits"][-1]
    assert 0 <= m["first_layer_within_twice_final"] <= 2
