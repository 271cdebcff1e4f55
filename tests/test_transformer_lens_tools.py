"""Our analyses against TransformerLens 4's own (transformer_lens.tools.analysis) where both apply: a
TransformerLens model in compatibility mode whose final norm has no learned affine part (TransformerLens's
direct logit attribution refuses others), on the two-label prompts."""
import pytest
import torch

from analyses import interventions as P
from analyses.direct_logit_attribution import decompose, direction
from models.language_model import LanguageModel, compatible
from tests.tiny_language_models import native


@pytest.fixture(scope="module")
def pair():
    lm = LanguageModel(compatible(native()), "native")
    return P.language_pair(lm, "two-label", "mixed", per_shot=6, alpha=0.9, seed=0, index=-1)


def test_direct_logit_attribution_per_head_agrees_with_transformer_lens(pair):
    from transformer_lens.tools.analysis import direct_logit_attribution

    ours = decompose(pair, pair.clean)["parts"]
    # each row's direction is +1 on the answer Bayes favours on the clean prompt, -1 on the other
    d = direction(pair)
    answers = pair.answer_index(torch.arange(pair.model.cfg.d_vocab))  # the answer tokens' ids
    correct, incorrect = answers[d.argmax(-1)], answers[d.argmin(-1)]
    theirs = direct_logit_attribution(pair.model, pair.clean, correct, incorrect, unit="head")
    by_label = dict(zip(theirs.labels, theirs.attribution))
    heads = [label for label in ours if label[1:].replace("H", "").isdigit()]
    assert len(heads) == 2 * 4
    for label in heads:
        torch.testing.assert_close(by_label[label].double(), ours[label], atol=1e-5, rtol=1e-4, msg=label)


def test_the_explorers_logit_lens_agrees_with_transformer_lens():
    """Each layer's residual stream through the model's own final norm (its statistics recomputed) and unembedding:
    the explorer's view on a bridged grouped-query Llama against ``transformer_lens.tools.analysis.logit_lens``."""
    from transformer_lens.tools.analysis import logit_lens

    from interp.explore_lm import TOP, LanguageExplorer
    from models.language_model import from_hugging_face
    from tests.tiny_language_models import tiny, word_tokenizer

    tokenizer = word_tokenizer()
    explorer = LanguageExplorer(LanguageModel(from_hugging_face(tiny("llama-gqa", vocab_size=len(tokenizer))), "tiny",
                                              tokenizer))
    ids = explorer.encode("cat -> blue river -> green bread ->")
    ours = torch.tensor(explorer.lens_view(ids).data[0].z)  # [layer, TOP]: the top probabilities per layer
    theirs = logit_lens(explorer.lm.model, torch.tensor([ids]), return_type="probs")
    # their stack: the input to each block, then the last block's output; ours: each block's output
    after_each_block = theirs.values[1:, 0].double()
    assert len(theirs.labels) == ours.shape[0] + 1
    torch.testing.assert_close(after_each_block.topk(TOP, -1).values, ours, atol=1e-5, rtol=1e-4)
