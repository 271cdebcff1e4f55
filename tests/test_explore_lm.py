"""The explorer on a language model (`interp explore --model`): its views on a tiny grouped-query Llama with a
word-level tokenizer, checked against the model's own hooks and logits, and its one-line refusals."""
import pytest
import torch

from interp.explore_lm import LanguageExplorer, build_app, rules, token_text
from interp.errors import UserError
from interp.requests import Refused, check_request
from models.language_model import LanguageModel, from_hugging_face
from tests.cli import run_cli
from tests.tiny_language_models import tiny, word_tokenizer

TEXT = "cat -> blue river -> green bread ->"


@pytest.fixture(scope="module")
def explorer():
    tokenizer = word_tokenizer()
    return LanguageExplorer(LanguageModel(from_hugging_face(tiny("llama-gqa", vocab_size=len(tokenizer))), "tiny",
                                          tokenizer))


def test_attention_is_the_models_pattern_with_the_tokens_text_on_its_axes(explorer):
    ids = explorer.encode(TEXT)
    fig = explorer.attention_view(ids, 1, 3)
    _, cache = explorer.lm.model.run_with_cache(torch.tensor([ids]))
    assert torch.allclose(torch.tensor(fig.data[0].z).double(), cache["blocks.1.attn.hook_pattern"][0, 3].double(), atol=1e-6)
    assert list(fig.data[0].x) == ["cat ·0", "-> ·1", "blue ·2", "river ·3", "-> ·4", "green ·5", "bread ·6", "-> ·7"]
    assert "key/value head 1" in fig.layout.title.text  # 4 query heads share 2 key/value heads
    grid = explorer.grid_view(ids, 0)
    assert len(grid.data) == explorer.lm.model.cfg.n_heads
    assert torch.allclose(torch.tensor(grid.data[2].z).double(), cache["blocks.0.attn.hook_pattern"][0, 2].double(), atol=1e-6)


def test_the_last_layers_lens_is_the_models_own_next_token_distribution(explorer):
    ids = explorer.encode(TEXT)
    fig = explorer.lens_view(ids)
    with torch.no_grad():
        probs = torch.softmax(explorer.lm.model(torch.tensor([ids]))[0, -1].double(), -1)
    top = probs.topk(8)
    assert torch.allclose(torch.tensor(fig.data[0].z[-1]).double(), top.values, atol=1e-6)
    assert list(fig.data[0].text[-1]) == [token_text(explorer.lm.tokenizer.decode([t])) for t in top.indices]


def test_a_drawn_prompt_shows_the_bayes_predictive_beside_the_model(explorer):
    sampled = explorer.sample("coin", 3)
    assert sampled["text"].startswith("Coin flips")
    ids = explorer.encode(sampled["text"])
    summary = explorer.answer_summary(ids, sampled)
    assert "Bayes predictive heads" in summary and "model (renormalised over the answers) heads" in summary


def test_bad_inputs_are_one_line(explorer, capsys):
    with pytest.raises(UserError, match="empty"):
        explorer.encode("")
    with pytest.raises(UserError, match="at most"):
        explorer.encode("cat " * 300)
    with pytest.raises(UserError, match="out of range"):
        explorer.attention_view(explorer.encode(TEXT), 2, 0)
    with pytest.raises(UserError, match="seed"):
        explorer.sample("coin", -1)
    for args, message in ((["explore"], "one of them"), (["explore", "--ckpt", "x", "--model", "y"], "one of them")):
        shown = run_cli(capsys, *args)
        assert shown.code == 1 and message in shown.err and "Traceback" not in shown.err


def test_a_forged_request_is_refused_before_a_view_runs(explorer):
    app = build_app(explorer, TEXT)
    output = next(k for k in app.callback_map if "attention.figure" in k)
    good = [dict(id="prompt", property="data", value=dict(text=TEXT, task=None, seed=None)),
            dict(id="layer", property="value", value=1), dict(id="head", property="value", value=0),
            dict(id="scale", property="value", value="linear")]
    outputs = [dict(id=i, property=p) for i, p in (("attention", "figure"), ("grid", "figure"), ("lens", "figure"),
                                                   ("answer", "children"))]
    body = dict(output=output, outputs=outputs, inputs=good, state=[], changedPropIds=[])
    check_request(body, app.callback_map, rules(explorer))
    for i, bad in ((1, 7), (2, 1.0), (0, dict(text=TEXT, task="coin", seed=None)), (0, dict(text=3, task=None, seed=None)),
                   (3, "logarithmic")):
        forged = [dict(item) for item in good]
        forged[i]["value"] = bad
        with pytest.raises(Refused):
            check_request(dict(body, inputs=forged), app.callback_map, rules(explorer))


def test_the_patching_panel_patches_drawn_prompts_and_a_click_draws_that_intervention(explorer):
    """The wind-tunnel explorer's patching panel on a language model, through the app's request route: drawn
    two-label prompts, one shown observation flipped, the heat map of every site and position, a clicked cell."""
    import json

    app = build_app(explorer, TEXT)
    client = app.server.test_client()
    state = [dict(id="seed", property="value", value=3), dict(id="patch-kind", property="value", value="two-label"),
             dict(id="patch-index", property="value", value=1)]

    def post(output, outputs, inputs):
        body = dict(output=output, outputs=outputs, inputs=inputs, state=state,
                    changedPropIds=[f"{inputs[0]['id']}.{inputs[0]['property']}"])
        answer = client.post("/_dash-update-component", json=body)
        assert answer.status_code == 200, answer.data
        return json.loads(answer.data)["response"]

    outs = [dict(id=i, property=p) for i, p in (("patch-map", "figure"), ("patch-pair", "children"),
                                                 ("patch-message", "children"))]
    shown = post("..patch-map.figure...patch-pair.children...patch-message.children..", outs,
                 [dict(id="patch-run", property="n_clicks", value=1)])
    heat = shown["patch-map"]["figure"]["data"][0]
    assert heat["y"][0] == "resid before L0" and "L0H0" in heat["y"] and heat["x"][-1] == "all positions"
    assert "shown observation 1 flipped" in json.dumps(shown["patch-pair"]["children"])
    click = dict(points=[dict(x=heat["x"][-1], y="resid before L0")])  # the whole residual: the clean answer back
    cell = post("patch-cell.figure", dict(id="patch-cell", property="figure"),
                [dict(id="patch-map", property="clickData", value=click)])["patch-cell"]["figure"]
    assert [t["name"] for t in cell["data"]][:2] == ["Bayes, clean input", "Bayes, corrupted input"]
    clean, patched = cell["data"][2]["y"], cell["data"][4]["y"]
    assert patched == pytest.approx(clean, abs=1e-5) and "model scale 1.000" in cell["layout"]["title"]["text"]
