"""Causal interventions on constructed models whose circuit is known: activation patching finds exactly the
component, position and state that carries a corruption; direct logit attribution adds up; the corruptions'
posteriors match brute-force enumeration; the same calls run on a language model and from the CLI."""
import json
import random
import re

import pytest
import torch

import analyses
import models
import tasks
from analyses import interventions as P
from analyses.direct_logit_attribution import decompose
from models.language_model import LanguageModel, from_hugging_face
from tests.cli import run_cli
from tests.tiny_language_models import tiny, word_tokenizer

N = 16


@pytest.fixture(autouse=True)
def _one_thread():
    """These models are tiny: a second thread only waits for the first (badly, on a busy machine)."""
    torch.set_num_threads(1)
SMALL = tasks.make("bijection", V=4, L=3)  # k0 v0 k1 v1 k2: pair 0's value at 1 changes, the answer is read at 4
ARCH_CONFIG = {"transformer": dict(d_model=16, n_layers=1, n_heads=2), "mamba": dict(d_model=16, n_layers=1),
               "lstm": dict(d_model=16, n_layers=1), "mlp": dict(d_model=16, n_layers=1)}


def build(arch, task=SMALL, **config):
    return models.build(arch, task, config=ARCH_CONFIG[arch] | config, seed=0).eval()


def grid(metrics, scale="model_scale"):
    """{site: {position: value}} (position None: every position)."""
    cols = [*metrics["positions"], None]
    return {site: dict(zip(cols, row)) for site, row in zip(metrics["sites"], metrics[scale])}


def one_head_circuit():
    """One layer whose head 0 attends uniformly (W_Q = W_K = 0) and copies; head 1 and the MLP write nothing.
    So the corrupted value at position 1 reaches the answer at position 4 through head 0's z at 4 only."""
    model = build("transformer")
    with torch.no_grad():
        attn = model.blocks[0].attn
        attn.W_Q.zero_()
        attn.W_K.zero_()
        attn.W_O[1].zero_()
        model.blocks[0].mlp.W_out.zero_()
        model.blocks[0].mlp.b_out.zero_()
    return model


def test_patching_finds_the_one_head_position_and_residual_that_carry_the_change():
    m = grid(analyses.run("activation-patching", one_head_circuit(), n=N).metrics)
    assert m["L0H0"][4] == pytest.approx(1, abs=1e-5)  # the right hook, position and sign
    for p in (0, 1, 2, 3):
        assert m["L0H0"][p] == pytest.approx(0, abs=1e-6)  # a wrong position restores nothing
    for p in (0, 1, 2, 3, 4, None):
        assert m["L0H1"][p] == pytest.approx(0, abs=1e-6)  # a wrong head neither
        assert m["L0 MLP"][p] == pytest.approx(0, abs=1e-6)
    assert m["resid before L0"][1] == pytest.approx(1, abs=1e-5)  # before the head: where the token changed
    assert m["resid after L0"][4] == pytest.approx(1, abs=1e-5)  # after it: where the answer is read
    for p in (0, 2, 3, 4):
        assert m["resid before L0"][p] == pytest.approx(0, abs=1e-6)
    for p in (0, 1, 2, 3):
        assert m["resid after L0"][p] == pytest.approx(0, abs=1e-6)


def current_tap_only(model):
    """Mamba's short convolution reads only the current position, so a token reaches later ones only through
    the state."""
    with torch.no_grad():
        for block in model.blocks:
            block.mixer.conv1d.weight[..., :-1].zero_()
    return model


@pytest.mark.parametrize("arch", ["mamba", "lstm"])
def test_patching_a_recurrent_state_at_any_step_between_change_and_query_restores_the_clean_answer(arch):
    model = build(arch)
    if arch == "mamba":
        current_tap_only(model)
    metrics = analyses.run("activation-patching", model, n=N).metrics
    state = grid(metrics)[[s for s in metrics["sites"] if "state" in s][0]]
    for p in (1, 2, 3, 4):  # the state at p holds everything the query needs from the change
        assert state[p] == pytest.approx(1, abs=1e-4)
    assert state[0] == pytest.approx(0, abs=1e-6)  # before the change it holds nothing of it
    mixer = grid(metrics)["L0 mixer"]
    assert mixer[4] == pytest.approx(1, abs=1e-4)
    for p in (1, 2, 3):  # a one-layer mixer's output elsewhere never reaches the query
        assert mixer[p] == pytest.approx(0, abs=1e-6)


def test_a_state_patch_is_carried_on_by_the_recurrence_not_only_read_out():
    """Patching hook_h at one step changes every later state by exactly the decay products (the Mamba
    recurrence is linear in h): reference by rerunning the sequential scan from the patched state."""
    model = current_tap_only(build("mamba"))
    tokens = SMALL.sample(4, generator=torch.Generator().manual_seed(0)).tokens
    _, cache = model.run_with_cache(tokens, names_filter=["blocks.0.mixer.hook_h", "blocks.0.mixer.hook_delta"])
    h, delta = cache["blocks.0.mixer.hook_h"], cache["blocks.0.mixer.hook_delta"]
    A = -torch.exp(model.blocks[0].mixer.A_log)
    bump = torch.randn_like(h[:, 1])

    def patch(act, hook):
        act = act.clone()
        act[:, 1] += bump
        return act

    with model.hooks(fwd_hooks=[("blocks.0.mixer.hook_h", patch)]):
        _, patched = model.run_with_cache(tokens, names_filter=["blocks.0.mixer.hook_h"])
    got = patched["blocks.0.mixer.hook_h"] - h
    carried = bump
    for t in range(2, tokens.shape[1]):
        carried = torch.exp(delta[:, t, :, None] * A) * carried
        torch.testing.assert_close(got[:, t], carried, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("arch", ["transformer", "mamba", "lstm", "mlp"])
@pytest.mark.parametrize("task_name", ["bijection", "regression"])
def test_patching_the_whole_residual_stream_restores_the_clean_answer_exactly(arch, task_name):
    task = SMALL if task_name == "bijection" else tasks.make("regression", d=3, n=5)
    model = build(arch, task)
    metrics = analyses.run("activation-patching", model, n=N, positions="all").metrics
    if arch == "mlp":  # a position-wise model never moves: the corruption is invisible at the query
        assert metrics["whole_residual"]["model"] is None
        assert metrics["whole_residual"]["bayes"] == pytest.approx(metrics["clean_on_bayes_scale"], abs=1e-9)
        assert metrics["clean_on_bayes_scale"] == pytest.approx(metrics["corrupted_on_bayes_scale"], abs=1e-9)
        return
    assert metrics["restores_clean_exactly"]
    assert metrics["whole_residual"]["model"] == pytest.approx(1, abs=1e-5)
    assert metrics["whole_residual"]["bayes"] == pytest.approx(metrics["clean_on_bayes_scale"], abs=1e-5)


def test_the_bayes_scale_puts_the_clean_posterior_at_one_and_the_corrupted_at_zero():
    for name in (name for name in tasks.NAMES if tasks.REGISTRY[name].corruptions):  # (RRXOR declares none)
        task = tasks.make(name, **({"N": 4, "n_keys": 8, "n_values": 8, "N_min": 4} if name == "recall" else {}))
        batch = task.sample(8, generator=torch.Generator().manual_seed(0))
        c = task.corrupt(batch, torch.Generator().manual_seed(1))
        get = (lambda b: b.posterior_mean[:, c.query, None].double()) if task.continuous else \
            (lambda b: b.posterior[:, c.query].double())
        clean, corrupted = get(c.clean), get(c.corrupted)
        assert P.between(clean, corrupted, clean, clean - corrupted) == pytest.approx(1)
        assert P.between(corrupted, corrupted, clean, clean - corrupted) == pytest.approx(0)
        differs = (c.clean.tokens != c.corrupted.tokens)
        differs = differs.any(-1) if differs.dim() == 3 else differs
        assert differs.any(0).nonzero().flatten().tolist() == list(c.changed)


@pytest.mark.parametrize("name", ["bijection", "hmm", "recall", "mess3"])
def test_a_corrupted_sequence_has_the_posterior_brute_force_enumeration_gives(name):
    rng = random.Random(0)
    checked = 0
    while checked < 6:
        config = tasks.REGISTRY[name].small_config(rng)
        if name == "bijection":
            config |= dict(replacement=False, paired=False, L=max(config["V"] - 1, 2))
        if name == "recall":
            config = dict(layout="paper", N=2, n_keys=3, n_values=3, p_unbound=0.0, fillers=1, gap=1, queries=2)
        if name == "hmm":
            config |= dict(K=max(config["K"], 2))
        task = tasks.make(name, **config)
        batch = task.sample(3, generator=torch.Generator().manual_seed(checked))
        for kind in task.corruptions:
            c = task.corrupt(batch, torch.Generator().manual_seed(checked), kind)
            queries = c.corrupted.query_mask[0].nonzero().flatten().tolist()
            for row in range(3):
                if name == "hmm":
                    c.corrupted.hypothesis["T"], c.corrupted.hypothesis["E"] = batch.hypothesis["T"], batch.hypothesis["E"]
                expected = task.brute_force(c.corrupted, row)
                got = c.corrupted.posterior[row, queries[-1]].double()
                torch.testing.assert_close(got, expected[-1], atol=1e-5, rtol=1e-4)
        checked += 1


def test_direct_logit_attribution_adds_up_and_matches_removing_a_head_with_the_norm_frozen():
    model = one_head_circuit()
    metrics = analyses.run("direct-logit-attribution", model, n=N).metrics
    assert metrics["sum_check"] < 1e-4
    parts = {r["component"]: r for r in metrics["components"]}
    assert parts["L0H1"]["clean"] == 0 and parts["L0H1"]["corrupted"] == 0  # no W_O, no write
    assert sum(r["share"] for r in metrics["components"]) == pytest.approx(1, abs=1e-6)
    # An independent route: the logit difference minus the same with head 0 zeroed at the query, the final
    # LayerNorm's scale frozen at the clean run's (TransformerLens's own hook_scale).
    pair = P.make_pair(model, dict(corrupt="", index=-1, n=N, seed=1234))
    d = decompose(pair, pair.clean)
    _, cache = model.run_with_cache(pair.clean, names_filter=["ln_final.hook_scale"])
    scale = cache["ln_final.hook_scale"]

    def zero_head(z, hook):
        z = z.clone()
        z[:, pair.query, 0] = 0
        return z
    hooks = [("blocks.0.attn.hook_z", zero_head), ("ln_final.hook_scale", lambda s, hook: scale)]
    from analyses.direct_logit_attribution import direction
    with torch.no_grad(), model.hooks(fwd_hooks=hooks):
        ablated = (SMALL.answer_logits(model(pair.clean)[:, pair.query]).double() * direction(pair)).sum(-1)
    torch.testing.assert_close(d["total"] - ablated, d["parts"]["L0H0"], atol=1e-4, rtol=1e-4)
    assert parts["L0H0"]["clean"] > parts["L0H0"]["corrupted"]  # the head pushes toward each input's own answer
    assert not any("bias" in label for label in parts)  # its attention bias is zero: no bar of zeros


def test_the_attribution_figure_shows_the_components_that_change_most_and_sums_the_rest():
    from analyses.direct_logit_attribution import SHOWN, figure

    rows = [dict(component=f"L{i}H0", clean=float(i), corrupted=0.0, share=i / 1770) for i in range(60)]
    fig = figure(dict(components=rows, subject="m", query=3, answer="class", logit_difference_clean=1.0,
                      logit_difference_corrupted=0.0, corruption="c"))
    clean = fig.data[0]
    assert len(clean.y) == SHOWN and clean.y[0] == "L59H0" and clean.y[-1] == f"the other {60 - SHOWN + 1} components"
    assert clean.x[-1] == sum(range(60 - SHOWN + 1)) and "logit" in fig.layout.xaxis.title.text


@pytest.mark.parametrize("arch", ["mamba", "lstm", "mlp"])
def test_direct_logit_attribution_adds_up_on_every_architecture(arch):
    for task in (SMALL, tasks.make("regression", d=3, n=5)):
        metrics = analyses.run("direct-logit-attribution", build(arch, task), n=N).metrics
        assert metrics["sum_check"] < 1e-4
        assert [r["component"] for r in metrics["components"]] == ["embeddings", "L0 mixer"]


def random_language_model():
    """A random-initialised TransformerLens model without a tokenizer (prompts of token ids): built in a moment."""
    from tests.tiny_language_models import native

    return LanguageModel(native(), "random")


@pytest.fixture(scope="module")
def language_model():
    """GPT-NeoX (Pythia's family: attention and MLP in parallel) converted from Hugging Face, with a tokenizer."""
    return LanguageModel(from_hugging_face(tiny("gpt-neox", vocab_size=len(word_tokenizer()))), "gpt-neox",
                         word_tokenizer())


@pytest.mark.parametrize("prompts", ["two-label", "coin"])
def test_patching_and_attribution_on_a_transformer_lens_model_with_the_prompt_tasks(prompts):
    lm = random_language_model()
    metrics = analyses.run("activation-patching", lm, prompts=prompts, per_shot=4, positions="all",
                           exact="all").metrics
    assert metrics["restores_clean_exactly"] and metrics["exact_cells"] == "all"
    m = grid(metrics)
    changed = metrics["changed"][0]
    assert m["resid before L0"][changed] == pytest.approx(1, abs=1e-5)
    assert all(m["resid before L0"][p] == pytest.approx(0, abs=1e-6) for p in metrics["positions"] if p != changed)
    assert analyses.run("direct-logit-attribution", lm, prompts=prompts, per_shot=4).metrics["sum_check"] < 1e-4
    paths = analyses.run("path-patching", lm, prompts=prompts, per_shot=4, receivers="all").metrics
    cell = {(s, r): v for s, row in zip(paths["senders"], paths["bayes_scale"]) for r, v in zip(paths["receivers"], row)}
    assert cell["L0H0", "L0 MLP"] is not None  # a sequential block: attention feeds its MLP
    assert analyses.run("attribution-patching", lm, prompts=prompts, per_shot=4, exact=True).metrics["mean_abs_gap"] is not None


def test_a_language_models_map_is_estimated_first_and_its_exact_cells_are_the_exhaustive_maps():
    """On a language model the default map estimates every cell and measures the largest: each measured cell is the
    exhaustive map's, the others are attribution patching's estimates, the strongest cells are measured ones, the
    figure rings exactly the measured cells; the residual stream patched everywhere still restores the clean run."""
    from analyses.activation_patching import EXACT_CELLS
    from analyses.attribution_patching import estimates

    lm = random_language_model()
    options = dict(prompts="two-label", per_shot=4)
    every = analyses.run("activation-patching", lm, exact="all", **options)
    quick = analyses.run("activation-patching", lm, **options)
    m, e = quick.metrics, every.metrics
    assert m["restores_clean_exactly"] and e["exact_cells"] == "all"
    columns = [*m["positions"], None]
    exact = {(site, p) for site, p in m["exact_cells"]}
    n_resid = sum(site.startswith("resid") for site in m["sites"])
    assert len(exact) == EXACT_CELLS + n_resid and {(s, None) for s in m["sites"] if s.startswith("resid")} <= exact
    pair = P.make_pair(lm, options | dict(seed=0, alpha=0.9, words="mixed", index=0))
    first_order = estimates(pair, P.sites(pair.model), m["positions"], P.Scorer(pair))
    for i, site in enumerate(m["sites"]):
        for j, p in enumerate(columns):
            for scale, key in (("model", "model_scale"), ("bayes", "bayes_scale")):
                want = e[key][i][j] if (site, p) in exact else first_order[scale][i][j]
                assert m[key][i][j] == pytest.approx(want, abs=1e-6), (site, p, scale)
    heads = {s for s in m["sites"] if re.fullmatch(r"L\d+H\d+", s)}
    size = {(s, p): abs(first_order["model"][i][j]) for i, s in enumerate(m["sites"]) for j, p in enumerate(columns)
            if first_order["model"][i][j] is not None and s not in heads}  # a head's cells stay estimates
    assert heads and not any(site in heads for site, _ in exact)
    assert min(size[c] for c in exact if c[1] is not None or not c[0].startswith("resid")) >= max(
        v for c, v in size.items() if c not in exact)
    assert all((b["site"], b["position"]) in exact for b in m["strongest"]) and m["intervals"]["strongest"]
    heat, ringed = quick.figures["sites-by-position"].data
    assert list(heat.y) == [s for s in m["sites"] if s not in heads]  # the heads' rows are in the JSON alone
    drawn = [row for s, row in zip(m["sites"], m["model_scale"]) if s not in heads]  # its own effect's share
    assert [[v for v in line if v == v] for line in heat.z] == [[v for v in row if v is not None] for row in drawn]
    assert len(ringed.x) == len(exact) and "ringed: the" in quick.figures["sites-by-position"].layout.title.text
    with pytest.raises(analyses.AnalysisError, match="--exact must be a number of cells or all"):
        analyses.run("activation-patching", lm, exact="some", **options)


def test_a_language_models_pair_unembeds_the_answer_position_alone_and_answers_as_the_whole_pass_does():
    """The pair's passes stop at the last block and unembed the last position alone: its answers, activations and
    first-order estimates are the whole forward pass's."""
    import dataclasses

    from analyses.attribution_patching import estimates

    lm = random_language_model()
    quick = P.make_pair(lm, dict(prompts="two-label", words="mixed", per_shot=4, alpha=0.9, seed=0, index=0))
    whole = dataclasses.replace(quick, last_only=False)
    assert quick.last_only and quick.output(quick.clean).shape[1] == 1
    assert torch.allclose(quick.answer(quick.corrupted), whole.answer(whole.corrupted), atol=1e-6, rtol=0)
    chosen, where = P.sites(quick.model), quick.positions("auto")
    names = P.cache_names(quick.model, chosen)
    ours, theirs = P.run_cache(quick, quick.clean, names), P.run_cache(whole, whole.clean, names)
    assert all(torch.equal(ours[name], theirs[name]) for name in names)
    a, b = estimates(quick, chosen, where, P.Scorer(quick)), estimates(whole, chosen, where, P.Scorer(whole))
    from analyses.path_patching import path_answers, receivers, senders, write
    readout, entry = receivers(quick.model)[-1]
    deltas = [write(quick, s, ours) - write(quick, s, P.run_cache(quick, quick.corrupted, names)) for s in
              senders(quick.model) if s.kind == "head"]
    fast = path_answers(quick, readout, entry, deltas, P.run_cache(quick, quick.corrupted, [entry]))
    assert all(torch.allclose(a, b, atol=1e-6, rtol=0) for a, b in zip(fast, path_answers(whole, readout, entry, deltas)))
    head, into = next((r, e) for r, e in receivers(quick.model) if r.kind == "head" and r.layer == 1)  # a pass cut short
    early = [d for d, s in zip(deltas, [s for s in senders(quick.model) if s.kind == "head"]) if s.layer == 0]
    assert all(torch.allclose(a, b, atol=1e-6, rtol=0) for a, b in zip(path_answers(quick, head, into, early),
                                                                       path_answers(whole, head, into, early)))
    flat = lambda grid: [v for row in grid["model"] for v in row]  # noqa: E731
    assert [v is None for v in flat(a)] == [v is None for v in flat(b)]
    assert [v for v in flat(a) if v is not None] == pytest.approx([v for v in flat(b) if v is not None], abs=1e-6)


def test_path_patching_on_a_language_model_reads_the_direct_effects_unless_asked():
    """A language model's default receiver is the read-out (each sender's direct effect, every sender a row); named
    receivers give their columns, equal to the same cells of every path; an unknown label is refused."""
    lm = random_language_model()
    options = dict(prompts="two-label", per_shot=4)
    direct = analyses.run("path-patching", lm, **options).metrics
    every = analyses.run("path-patching", lm, receivers="all", **options).metrics
    named = analyses.run("path-patching", lm, receivers="L1H0,logits", **options).metrics
    assert direct["receivers"] == ["logits"] and named["receivers"] == ["L1H0", "logits"]
    assert direct["senders"] == every["senders"] and direct["strongest"]["receiver"] == "logits"
    for got in (direct, named):
        for receiver in got["receivers"]:
            j, k = got["receivers"].index(receiver), every["receivers"].index(receiver)
            assert [row[j] for row in got["bayes_scale"]] == pytest.approx([row[k] for row in every["bayes_scale"]],
                                                                          abs=1e-9, nan_ok=True)
    with pytest.raises(analyses.AnalysisError, match="L9H9 is not a receiver of this model"):
        analyses.run("path-patching", lm, receivers="L9H9", **options)


def test_direct_logit_attribution_adds_up_on_a_bridged_grouped_query_llama():
    """The final RMSNorm read off the bridge's config (a bridge wraps every norm in one class), no output biases."""
    lm = LanguageModel(from_hugging_face(tiny("llama-gqa", vocab_size=len(word_tokenizer()))), "llama-gqa",
                       word_tokenizer())
    assert analyses.run("direct-logit-attribution", lm, prompts="two-label", per_shot=4).metrics["sum_check"] < 1e-4


@pytest.mark.slow
@pytest.mark.parametrize("prompts", ["two-label", "coin"])
def test_patching_and_attribution_run_on_a_hugging_face_language_model_with_the_prompt_tasks(prompts, language_model):
    lm = language_model
    metrics = analyses.run("activation-patching", lm, prompts=prompts, per_shot=6, positions="all",
                           exact="all").metrics
    assert metrics["restores_clean_exactly"]
    m = grid(metrics)
    changed = metrics["changed"][0]
    assert m["resid before L0"][changed] == pytest.approx(1, abs=1e-5)
    for p in metrics["positions"]:
        if p != changed:
            assert m["resid before L0"][p] == pytest.approx(0, abs=1e-6)
    dla = analyses.run("direct-logit-attribution", lm, prompts=prompts, per_shot=6).metrics
    assert dla["sum_check"] < 1e-4
    paths = analyses.run("path-patching", lm, prompts=prompts, per_shot=6, receivers="all").metrics
    assert paths["receivers"][-1] == "logits" and len(paths["senders"]) == 1 + 2 * (4 + 1)
    cell = {(s, r): v for s, row in zip(paths["senders"], paths["bayes_scale"]) for r, v in zip(paths["receivers"], row)}
    assert ("L0H0", "L0 MLP") not in {k for k, v in cell.items() if v is not None}  # parallel block: not a path


def test_a_task_without_a_corruption_is_refused_in_one_line(capsys):
    out = run_cli(capsys, "run", "activation-patching", "--ckpt", "bijection-transformer-cpu", "--corrupt", "nope")
    assert out.code != 0 and "unknown corruption 'nope'" in out.err and "Traceback" not in out.err


@pytest.mark.parametrize("name", ["direct-logit-attribution", *(pytest.param(name, marks=pytest.mark.slow) for name in (
    "activation-patching", "attribution-patching", "path-patching"))])
def test_the_cli_writes_patching_and_attribution_results(capsys, tmp_path, name):
    out = run_cli(capsys, "run", name, "--ckpt", "bijection-transformer-cpu", "--n", "8", "--index", "3",
                  "--format", "json", "--out", tmp_path)
    assert out.code == 0, out.err
    written = json.loads(next(tmp_path.rglob(f"{name}.json")).read_text())
    assert written["metrics"]["query"] == 36 and written["metrics"]["corruption"] == "pair 3 shows a value never revealed"


def test_attribution_patching_agrees_with_activation_patching_to_first_order_and_the_gap_is_second_order():
    """On a smooth model (random GELU transformer, Gaussian head) the estimate's error, on the model scale,
    halves when the corruption halves: exact to first order. The gaps are measured, not assumed."""
    from analyses.attribution_patching import estimates

    task = tasks.make("regression", d=3, n=5)
    model = build("transformer", task, n_layers=2)
    batch = task.sample(N, generator=torch.Generator().manual_seed(0))
    gaps = []
    for size in (0.2, 0.1, 0.05):
        pair = P.pair_of(model, task.corrupt(batch, None, size=size))
        scorer = P.Scorer(pair)
        chosen = P.sites(model, states=False)
        where = list(range(task.seq_len))
        est = estimates(pair, chosen, where, scorer)["model"]
        names = P.cache_names(model, chosen)
        clean, corrupted = P.run_cache(pair, pair.clean, names), P.run_cache(pair, pair.corrupted, names)
        gap = 0.0
        for site, row in zip(chosen, est):
            measured = [scorer.model(a) for a in P.patched_answers(pair, site, [*where, None], clean, corrupted)]
            gap = max(gap, max(abs(e - m) for e, m in zip(row, measured)))
        gaps.append(gap)
    assert gaps[0] < 0.2
    for big, small in zip(gaps, gaps[1:]):
        assert 1.6 < big / small < 2.5, gaps  # first-order error: proportional to the corruption's size


@pytest.mark.parametrize("arch", ["transformer", "mamba", "lstm", "mlp"])
def test_attribution_patching_runs_on_every_architecture(arch):
    metrics = analyses.run("attribution-patching", build(arch), n=N, exact=True).metrics
    states = [row for site, row in zip(metrics["sites"], metrics["model_scale"]) if "state" in site]
    assert bool(states) == (arch in ("mamba", "lstm")) and all(row[-1] is None for row in states)  # no "all" column
    assert (metrics["max_abs_gap"] is None) == (arch == "mlp")  # the MLP never moves: nothing to normalise by


def test_path_patching_finds_the_path_through_the_one_head_and_no_other():
    metrics = analyses.run("path-patching", one_head_circuit(), n=N).metrics
    cell = {(s, r): v for s, row in zip(metrics["senders"], metrics["model_scale"])
            for r, v in zip(metrics["receivers"], row)}
    assert cell["resid before L0", "L0H0"] == pytest.approx(1, abs=1e-5)  # embeddings -> the copying head
    assert cell["L0H0", "logits"] == pytest.approx(1, abs=1e-5)  # its direct effect is the whole effect
    for other in (("resid before L0", "L0H1"), ("resid before L0", "L0 MLP"), ("L0H0", "L0 MLP"),
                  ("L0H1", "logits"), ("resid before L0", "logits"), ("L0 MLP", "logits")):
        assert cell[other] == pytest.approx(0, abs=1e-6), other  # a wrong sender or receiver carries nothing
    assert cell["L0H1", "L0 MLP"] is not None and cell["L0 MLP", "L0H0"] is None  # only upstream pairs


def test_patching_finds_the_token_shift_tap_that_reaches_the_query():
    """Attention and MLP write nothing: the changed token (position 1) reaches the answer (position 4) only
    through the token shift's tap 3, at position 4."""
    model = build("transformer", shift=3)
    with torch.no_grad():
        model.blocks[0].attn.W_O.zero_()
        model.blocks[0].attn.b_O.zero_()
        model.blocks[0].mlp.W_out.zero_()
    m = grid(analyses.run("activation-patching", model, n=N).metrics)
    assert m["shift tap 3"][4] == pytest.approx(1, abs=1e-5)
    for tap, p in [(3, 1), (3, 2), (3, 3), (1, 2), (1, 4), (2, 3), (2, 4)]:
        assert m[f"shift tap {tap}"][p] == pytest.approx(0, abs=1e-6)
    paths = analyses.run("path-patching", model, n=N).metrics
    cell = {(s, r): v for s, row in zip(paths["senders"], paths["model_scale"]) for r, v in zip(paths["receivers"], row)}
    assert cell["shift tap 3", "logits"] == pytest.approx(1, abs=1e-5)
    assert cell["shift tap 2", "logits"] == pytest.approx(0, abs=1e-6)
    assert cell["shift tap 1", "logits"] == pytest.approx(0, abs=1e-6)


@pytest.mark.parametrize("arch", ["mamba", "lstm", "mlp"])
def test_path_patching_runs_on_every_architecture(arch):
    metrics = analyses.run("path-patching", build(arch, n_layers=2), n=N).metrics
    assert metrics["receivers"] == ["L0 mixer", "L1 mixer", "logits"]
    assert metrics["senders"] == ["resid before L0", "L0 mixer", "L1 mixer"]


def test_the_explorer_patches_the_sequence_shown_and_a_click_draws_that_intervention_beside_bayes():
    """Through the app's own request route (every request is checked first): the panel's heat map for the
    shown sequence, the clean and corrupted sequences side by side, and a clicked cell's answer."""
    from interp.catalog import locate
    from interp.explore import Explorer, build_app

    explorer = Explorer(locate("bijection-transformer-cpu"))
    app = build_app(explorer)
    client = app.server.test_client()
    sample = explorer.sample(0)

    def post(output, outputs, inputs, state):
        body = dict(output=output, outputs=outputs, inputs=inputs, state=state,
                    changedPropIds=[f"{inputs[0]['id']}.{inputs[0]['property']}"])
        answer = client.post("/_dash-update-component", json=body)
        assert answer.status_code == 200, answer.data
        return json.loads(answer.data)["response"]

    common = [dict(id="step", property="value", value=0), dict(id="sequence", property="data",
                                                               value=dict(tokens=sample, seed=0)),
              dict(id="patch-kind", property="value", value="value"), dict(id="patch-index", property="value",
                                                                            value=2)]
    outs = [dict(id="patch-map", property="figure"), dict(id="patch-pair", property="children"),
            dict(id="patch-message", property="children")]
    intact = [dict(id="ablate-heads", property="value", value=[]), dict(id="ablate-blocks", property="value", value=[]),
              dict(id="ablate-mode", property="value", value="zero")]
    response = post("..patch-map.figure...patch-pair.children...patch-message.children..", outs,
                    [dict(id="patch-run", property="n_clicks", value=1)] + intact, common)
    heat = response["patch-map"]["figure"]["data"][0]
    assert "L0H0" in heat["y"] and heat["x"][-1] == "all positions"
    title = " ".join(response["patch-map"]["figure"]["layout"]["title"]["text"].replace("<br>", " ").split())
    assert "effect restored" in title and "the model's clean answer scores 1.000 on the Bayes scale" in title
    # positions before the change hold the same activations in both inputs: patching them restores nothing
    import base64

    import numpy as np

    def z(figure):  # plotly sends arrays as base64 ("bdata") or as lists
        data = figure["data"][0]["z"]
        if isinstance(data, dict):
            shape = [int(n) for n in str(data["shape"]).split(",")]
            return np.frombuffer(base64.b64decode(data["bdata"]), dtype=data["dtype"]).reshape(shape).astype(float)
        return np.array([[np.nan if v is None else v for v in row] for row in data], dtype=float)
    before = [i for i, x in enumerate(heat["x"][:-1]) if int(x.split()[0]) < 5]
    grid = z(response["patch-map"]["figure"])
    assert before and np.nanmax(np.abs(grid[:, before])) < 1e-6
    # the map follows the ablations: block 0 skipped, the same press draws another map
    ablated = post("..patch-map.figure...patch-pair.children...patch-message.children..", outs,
                   [dict(id="patch-run", property="n_clicks", value=1), dict(intact[0]),
                    dict(id="ablate-blocks", property="value", value=["B0"]), dict(intact[2])], common)
    assert not np.allclose(z(ablated["patch-map"]["figure"]), grid, equal_nan=True)
    assert "pair 2 shows a value never revealed" in json.dumps(response["patch-pair"]["children"])
    changed = next(x for x in heat["x"] if x.startswith("5 "))  # position 5: pair 2's value, the change
    click = dict(points=[dict(x=changed, y="resid before L0")])
    response = post("patch-cell.figure", dict(id="patch-cell", property="figure"),
                    [dict(id="patch-map", property="clickData", value=click)], intact + common)
    figure = response["patch-cell"]["figure"]
    names = [trace["name"] for trace in figure["data"]]
    assert names[:2] == ["Bayes, clean input", "Bayes, corrupted input"] and "patched" in names[-1]
    assert "Bayes scale 1.000" in figure["layout"]["title"]["text"]  # the residual at the change: all restored
    bad = dict(body=dict(output="patch-cell.figure", outputs=dict(id="patch-cell", property="figure"),
                         inputs=[dict(id="patch-map", property="clickData", value={"points": "x"})], state=intact + common,
                         changedPropIds=["patch-map.clickData"]))
    assert client.post("/_dash-update-component", json=bad["body"]).status_code == 400


def test_a_title_number_that_rounds_to_zero_is_never_negative_zero_and_nan_is_a_dash():
    from analyses.interventions import short

    assert short(-0.0001) == "0.000" and short(-0.0) == "0.000" and short(0.0004) == "0.000"
    assert short(-10.4921) == "-10.492" and short(None) == "–" and short(float("nan")) == "–"
