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

    from interp.explore.lm_lens import TOP, lens_view
    from interp.explore.lm_state import LanguageExplorer
    from models.language_model import from_hugging_face
    from tests.tiny_language_models import tiny, word_tokenizer

    tokenizer = word_tokenizer()
    explorer = LanguageExplorer(LanguageModel(from_hugging_face(tiny("llama-gqa", vocab_size=len(tokenizer))), "tiny",
                                              tokenizer))
    ids = explorer.encode("cat -> blue river -> green bread ->")
    ours = torch.tensor(lens_view(explorer, ids).data[0].z)  # [layer, TOP]: the top probabilities per layer
    theirs = logit_lens(explorer.lm.model, torch.tensor([ids]), return_type="probs")
    # their stack: the input to each block, then the last block's output; ours: each block's output
    after_each_block = theirs.values[1:, 0].double()
    assert len(theirs.labels) == ours.shape[0] + 1
    torch.testing.assert_close(after_each_block.topk(TOP, -1).values, ours, atol=1e-5, rtol=1e-4)


# -- activation, path and attribution patching against TransformerLens 4.3's own ---------------------------------
# Both sides score on our Bayes scale: TransformerLens's tools take any metric of the logits, so theirs is given
# ``Scorer.bayes`` of the answer read off the patched logits, and a cell's value is comparable number for number.


def bayes_metric(pair, scale: str = "bayes"):
    from analyses.interventions import Scorer

    scorer = Scorer(pair)
    return scorer, lambda logits: torch.tensor(getattr(scorer, scale)(pair.read(logits)))


def test_activation_patching_agrees_with_transformer_lens(pair):
    """Every site at every position (and each head at all positions at once) against ``transformer_lens.patching``'s
    get_act_patch_* sweeps, which patch the same hook (resid_pre, attn.hook_z per head, hook_attn_out, hook_mlp_out)
    with the clean value in one forward each: the same intervention, so agreement to float error (1e-5)."""
    from transformer_lens import patching

    from analyses.activation_patching import measure

    scorer, metric = bayes_metric(pair)
    chosen, where = P.sites(pair.model), list(range(pair.clean.shape[1]))
    ours = dict(zip([s.label for s in chosen], measure(pair, scorer, chosen, where)[0]["bayes"]))
    _, clean_cache = pair.model.run_with_cache(pair.clean)
    args = (pair.model, pair.corrupted, clean_cache, metric)
    theirs = dict(resid=patching.get_act_patch_resid_pre(*args), head=patching.get_act_patch_attn_head_out_by_pos(*args),
                  all_pos=patching.get_act_patch_attn_head_out_all_pos(*args), attn=patching.get_act_patch_attn_out(*args),
                  mlp_out=patching.get_act_patch_mlp_out(*args))
    checked = 0
    for site in chosen:
        row = torch.tensor(ours[site.label][:len(where)], dtype=torch.float64)
        if site.kind == "resid" and site.layer < pair.model.cfg.n_layers:  # "resid before L0" has layer -1
            expected = theirs["resid"][max(site.layer, 0)]
        elif site.kind == "head":
            expected = theirs["head"][site.layer, :, site.head]
            torch.testing.assert_close(torch.tensor(ours[site.label][-1], dtype=torch.float64), theirs["all_pos"][site.layer, site.head].double(),
                                       atol=1e-5, rtol=0)
        elif site.kind in ("attn", "mlp_out"):
            expected = theirs[site.kind][site.layer]
        else:  # the residual stream after the last block: TransformerLens has no sweep of hook_resid_post
            continue
        torch.testing.assert_close(row, expected.double(), atol=1e-5, rtol=0, msg=site.label)
        checked += 1
    assert checked == 2 + 2 * 4 + 2 + 2


def llama_pair(zero_queries_of: int | None = None):
    """The two-label pair on a tiny bridged Llama with as many key/value heads as query heads (TransformerLens's
    direct path patching refuses K/V on grouped-query models, and its native models' attention has no per-head
    Q/K/V input fork), optionally with one layer's query projection zeroed."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from models.language_model import from_hugging_face
    from tests.tiny_language_models import word_tokenizer

    tokenizer = word_tokenizer()
    torch.manual_seed(0)
    hf = LlamaForCausalLM(LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64,
                                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                                      max_position_embeddings=64)).eval()
    if zero_queries_of is not None:
        with torch.no_grad():
            hf.model.layers[zero_queries_of].self_attn.q_proj.weight.zero_()  # Llama's projections have no bias
    lm = LanguageModel(from_hugging_face(hf), "tiny", tokenizer)
    return P.language_pair(lm, "two-label", "mixed", per_shot=6, alpha=0.9, seed=0, index=0)


def test_path_patching_agrees_with_transformer_lens_where_their_edge_is_ours():
    """TransformerLens's ``get_act_patch_direct_path`` (Wang et al. 2022) adds the sender head's write (z W_O, clean
    minus corrupted) to the pre-ln1 copy of the residual that ONE of the receiver head's Q, K or V inputs reads
    (``component``), everything downstream of the receiver running on; ours (analyses/path_patching.py) adds it to
    the receiver's whole input, so its Q, K and V all see it at once. The two are different edges whenever the
    receiver's attention pattern depends on its input (checked below on the plain model). They are the same edge
    when it does not: with the receiver layer's query projection zeroed, every score is 0, attention is uniform
    whatever the keys, and only the value input matters. On that model ours equals theirs with component="v" for
    every layer-0 head into every layer-1 head, to float error (1e-5)."""
    from transformer_lens.patching import get_act_patch_direct_path

    from analyses import path_patching

    def both(pair):
        model = pair.model
        # the model scale (0: the corrupted answer, 1: the clean one): an untrained model's answers sit far from
        # Bayes's, where the Bayes scale's large offsets would swamp differences between paths
        scorer, metric = bayes_metric(pair, "model")
        names = ["blocks.0.attn.hook_z"]
        _, clean_cache = model.run_with_cache(pair.clean, names_filter=names)
        _, corrupted_cache = model.run_with_cache(pair.corrupted, names_filter=names)
        send = [s for s in path_patching.senders(model) if s.kind == "head" and s.layer == 0]
        receive = [(r, e) for r, e in path_patching.receivers(model) if r.kind == "head" and r.layer == 1]
        ours = torch.zeros(len(send), len(receive), dtype=torch.float64)
        theirs = torch.zeros_like(ours)
        for i, s in enumerate(send):
            delta = path_patching.write(pair, s, clean_cache) - path_patching.write(pair, s, corrupted_cache)
            for j, (r, entry) in enumerate(receive):
                ours[i, j] = scorer.model(path_patching.path_answers(pair, r, entry, [delta])[0])
            theirs[i] = get_act_patch_direct_path(model, pair.corrupted, clean_cache, corrupted_cache, metric,
                                                  src_layer=0, src_head=s.head, component="v", verbose=False)[1]
        return ours, theirs

    ours, theirs = both(llama_pair())
    assert (ours - theirs).abs().max() > 1e-4  # different edges on a model whose layer-1 patterns move
    ours, theirs = both(llama_pair(zero_queries_of=1))
    assert ours.shape == (4, 4) and ours.abs().max() > 1e-3  # the paths carry part of the effect: a real check
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=0)


def test_attribution_patching_agrees_with_transformer_lens(pair):
    """TransformerLens's ``attribution_patch`` (node granularity) scores each head's z, each MLP output and the token
    embedding at each position with (a_clean - a_corrupted) . d metric / d a on the corrupted run, one pair at a
    time, averaged over pairs; ours the same product with the gradient of sum over rows of <answer, Delta>, summed
    over rows and put on the Bayes scale (analyses/attribution_patching.py). So theirs with metric <answer, Delta_b>
    on row b, times the number of rows, over the scale's denominator, plus the corrupted answer's score, is our
    estimate: agreement to 1e-5. Their embed node is hook_embed, ours the residual stream before the first block
    (embedding plus positions): the corruption changes tokens only, so the differences and gradients are equal."""
    from transformer_lens.tools.analysis import attribution_patch

    from analyses.attribution_patching import estimates

    scorer = P.Scorer(pair)
    chosen, where = P.sites(pair.model), list(range(pair.clean.shape[1]))
    ours = dict(zip([s.label for s in chosen], estimates(pair, chosen, where, scorer)["bayes"]))
    B = len(pair.clean)
    totals = {}
    for b in range(B):
        metric = lambda logits, b=b: (pair.read(logits)[0] * pair.delta[b]).sum()  # noqa: E731
        for node, score in attribution_patch(pair.model, pair.clean[b:b + 1], pair.corrupted[b:b + 1],
                                             metric).node_scores.items():
            totals[node] = totals.get(node, 0.0) + score / B  # their mean over pairs
    base = scorer.bayes(scorer.corrupted)
    den = ((pair.bayes_clean - pair.bayes_corrupted) * pair.delta).sum().item()
    label = {"embed": lambda n: "resid before L0", "attn_head_out": lambda n: f"L{n.layer}H{n.head}",
             "mlp_out": lambda n: f"L{n.layer} MLP"}
    assert len(totals) == len(where) * (1 + 2 * 4 + 2)
    for node, total in totals.items():
        theirs = base + B * total / den
        assert ours[label[node.kind](node)][node.position] == pytest.approx(theirs, abs=1e-5), node
