"""Requests to ``interp explore``'s page endpoint that the page itself never sends (malformed, forged,
out of range), each with the refusal it must get: the catalogue the bad-input table and the fuzz test share."""
from __future__ import annotations

import json
from dataclasses import dataclass


@dataclass(frozen=True)
class Request:
    """A request to ``interp explore``'s page endpoint (/_dash-update-component) that the page itself never
    sends: the page's own request for ``view`` with ``values`` ("component.property": value) in place of
    what the page would send, or the body ``raw`` as it is. ``answer`` is the answer's one line (a 4xx's
    text), or for a 200 the view's own refusal, found in the views it returns."""

    what: str
    view: str  # the callback, named by its first output: sequence, posterior, code, download, attention, geometry
    values: dict
    status: int
    answer: str
    raw: str | None = None  # a Python expression for the body (bytes or str), shown in the doc as it is


TOKENS = "sequence.data"
REQUESTS = [
    Request("tokens as a string", "posterior", {TOKENS: {"tokens": "k1 v2", "seed": None}}, 400,
            'sequence.data: tokens must be a non-empty list, got "k1 v2"'),
    Request("nested tokens", "posterior", {TOKENS: {"tokens": [[1, 2]], "seed": None}}, 400,
            "sequence.data: tokens must be integers from 0 to 11, got [1, 2]"),
    Request("null tokens", "posterior", {TOKENS: {"tokens": None, "seed": None}}, 400,
            "sequence.data: tokens must be a non-empty list, got null"),
    Request("a token of 2^70", "attention", {TOKENS: {"tokens": [2 ** 70], "seed": None}}, 400,
            "sequence.data: tokens must be integers from 0 to 11, got 1180591620717411303424"),
    Request("float tokens (never truncated)", "posterior", {TOKENS: {"tokens": [0.5, 6.5], "seed": None}}, 400,
            "sequence.data: tokens must be integers from 0 to 11, got 0.5"),
    Request("a token beyond the vocabulary", "code", {TOKENS: {"tokens": [0, 99], "seed": None}}, 400,
            "sequence.data: tokens must be integers from 0 to 11, got 99"),
    Request("true as a token", "code", {TOKENS: {"tokens": [True], "seed": None}}, 400,
            "sequence.data: tokens must be integers from 0 to 11, got true"),
    Request("more tokens than the model's context", "posterior", {TOKENS: {"tokens": [0, 6] * 40, "seed": None}}, 400,
            "sequence.data: 80 tokens is longer than the model's context (9)"),
    Request("a sequence null", "posterior", {TOKENS: None}, 400,
            'sequence.data: expected {"tokens": [...], "seed": ...}, got null'),
    Request("a sequence string", "download", {TOKENS: "k1 v2"}, 400,
            'sequence.data: expected {"tokens": [...], "seed": ...}, got "k1 v2"'),
    Request("a sequence without tokens", "attention", {TOKENS: {}}, 400,
            'sequence.data: expected {"tokens": [...], "seed": ...}, got {}'),
    Request("a sequence whose seed is a word", "posterior", {TOKENS: {"tokens": "SAMPLE0", "seed": "x"}}, 400,
            'sequence.data: expected an integer from 0 to 4294967295, got "x"'),
    Request("a sequence whose seed is 1.5", "code", {TOKENS: {"tokens": "SAMPLE0", "seed": 1.5}}, 400,
            "sequence.data: expected an integer from 0 to 4294967295, got 1.5"),
    Request("a sequence whose tokens are not its seed's", "posterior", {TOKENS: {"tokens": [0, 6], "seed": 0}}, 400,
            "sequence.data: tokens are not the sequence of seed 0"),
    Request("the seed box at 1.5 (the view refuses it)", "sequence", {"seed.value": 1.5}, 200,
            "the seed must be an integer from 0 to 2^32 - 1, got 1.5"),
    Request("the seed box holding a word (the view refuses it)", "sequence", {"seed.value": "x"}, 200,
            "the seed must be an integer from 0 to 2^32 - 1, got 'x'"),
    Request("a 5000-digit number in the seed box", "sequence", {}, 400,
            "a number of 5000 digits; numbers in requests have at most 30", raw="BODY.replace('\"SEED\"', '9' * 5000)"),
    Request("a list in place of the typed text", "sequence", {"tokens-text.value": ["k1"]}, 400,
            "tokens-text.value: expected text, got list"),
    Request("the step slider beyond the checkpoints", "posterior", {"step.value": 99}, 400,
            "step.value: expected an integer from 0 to 1, got 99"),
    Request("the step slider as a string", "attention", {"step.value": "1"}, 400,
            'step.value: expected an integer from 0 to 1, got "1"'),
    Request("an ablation the model does not have", "posterior", {"ablate-heads.value": ["H9.0"]}, 400,
            'ablate-heads.value: expected a list of H0.0, H0.1, got ["H9.0"]'),
    Request("a layer the model does not have", "attention", {"layer.value": 7}, 400,
            "layer.value: expected an integer from 0 to 0, got 7"),
    Request("an unknown output id", "code", {}, 400, 'unknown output "nope.children"; this explorer has no such view',
            raw="BODY.replace('code.children', 'nope.children')"),
    Request("a JSON list as the body", "code", {}, 400, "request body must be a JSON object, got list", raw="'[1, 2]'"),
    Request("NaN in the body", "sequence", {}, 400, "NaN is not a number the explorer takes",
            raw="BODY.replace('\"SEED\"', 'NaN')"),
    Request("a body nested 100,000 deep", "code", {}, 400, "request body is not JSON (nested too deeply)",
            raw="'[' * 100000 + ']' * 100000"),
    Request("a body that is not UTF-8", "code", {}, 400,
            "request body is not JSON ('utf-8' codec can't decode byte 0xe9 in position 4: invalid continuation byte)",
            raw="b'\"caf\\xe9\"'"),
    Request("a 30 MB body", "code", {}, 413, "request body over 1,048,576 bytes", raw="'[' + ' ' * (30 << 20) + ']'"),
    Request("patching a typed sequence shorter than the task's (the view refuses it)", "patch-map",
            {TOKENS: {"tokens": [0, 6], "seed": None}}, 200,
            "the bijection corruption changes a whole sequence of 9 tokens, and this one has 2; patch a full sequence "
            "(sample one by seed, or type all of it)"),
    Request("a 5000-digit token typed (the view refuses it)", "sequence", {"tokens-text.value": "9" * 5000}, 200,
            "unknown token '99999999999999999999...(5,000 characters)'; write names such as k0 k1 k2 or ids 0..11",
            raw="BODY.replace('\"sample.n_clicks\"]', '\"apply.n_clicks\"]')"),
]


def explorer_request(app, explorer, request: Request) -> bytes:
    """The body of ``request``: the page's own request for its view, with its values changed."""
    last = len(explorer.checkpoints) - 1
    sample = explorer.sample(0)
    page = {"sample.n_clicks": 1, "apply.n_clicks": 0, "download-button.n_clicks": 1, "seed.value": 0,
            "tokens-text.value": " ".join(explorer.task.token_names(__import__("torch").tensor(sample))),
            "step.value": last, TOKENS: {"tokens": sample, "seed": 0}, "ablate-heads.value": [],
            "ablate-blocks.value": [], "ablate-mode.value": "zero", "layer.value": 0, "head.value": 0,
            "stream.value": "residual", "colour.value": "entropy", "scale.value": "linear", "tick.n_intervals": 0,
            "ablation-map-run.n_clicks": 0, "heads.clickData": None, "ablation-map.clickData": None,
            "patch-run.n_clicks": 1, "patch-kind.value": (list(explorer.task.corruptions) or [None])[0],
            "patch-index.value": None}
    values = {k: (dict(v, tokens=sample) if isinstance(v, dict) and v.get("tokens") == "SAMPLE0" else v)
              for k, v in request.values.items()}
    if request.raw is not None and "SEED" in request.raw:
        values["seed.value"] = "SEED"
    key = next(k for k, cb in app.callback_map.items()
               if (cb["output"][0] if isinstance(cb["output"], list) else cb["output"]).component_id == request.view)
    callback = app.callback_map[key]
    outputs = callback["output"] if isinstance(callback["output"], list) else [callback["output"]]
    item = lambda spec: dict(id=spec["id"], property=spec["property"],  # noqa: E731
                             value=(page | values)[f"{spec['id']}.{spec['property']}"])
    declared = [dict(id=o.component_id, property=o.component_property) for o in outputs]
    body = json.dumps(dict(output=key, outputs=declared if isinstance(callback["output"], list) else declared[0],
                           inputs=[item(i) for i in callback["inputs"]], state=[item(s) for s in callback["state"]],
                           changedPropIds=[f"{callback['inputs'][0]['id']}.{callback['inputs'][0]['property']}"]))
    if request.raw is not None:
        body = eval(request.raw, dict(BODY=body))
    return body if isinstance(body, bytes) else body.encode()


def callback_request(app, view: str, values: dict, trigger: str | None = None) -> dict:
    """The body the page sends for the callback whose first output is ``view`` (``"patch-progress"``; where two
    callbacks write it, ``"patch-progress<-patch-cancel"`` names the one whose first input is patch-cancel), every
    input and state taken from ``values`` ("component.property": value; missing ones are null); ``trigger`` names
    the input that changed (default: the first)."""
    view, _, by = view.partition("<-")
    key = next(k for k, cb in app.callback_map.items()
               if (cb["output"][0] if isinstance(cb["output"], list) else cb["output"]).component_id == view
               and (not by or cb["inputs"][0]["id"] == by))
    callback = app.callback_map[key]
    outputs = callback["output"] if isinstance(callback["output"], list) else [callback["output"]]
    declared = [dict(id=o.component_id, property=o.component_property) for o in outputs]
    item = lambda spec: dict(id=spec["id"], property=spec["property"],  # noqa: E731
                             value=values.get(f"{spec['id']}.{spec['property']}"))
    first = callback["inputs"][0]
    return dict(output=key, outputs=declared if isinstance(callback["output"], list) else declared[0],
                inputs=[item(i) for i in callback["inputs"]], state=[item(s) for s in callback["state"]],
                changedPropIds=[trigger or f"{first['id']}.{first['property']}"])


def answer(client, app, view: str, values: dict, trigger: str | None = None) -> dict:
    """What the explorer answers to that request (its "response"), asserting it is a 200; {} for a 204 (nothing
    to update)."""
    reply = client.post("/_dash-update-component", json=callback_request(app, view, values, trigger))
    assert reply.status_code in (200, 204), reply.data
    return json.loads(reply.data)["response"] if reply.status_code == 200 else {}


def controls_read(app) -> set[tuple[str, str]]:
    """Every (component, property) whose value a request to ``app`` sends: the inputs and states of its callbacks
    that run on the server (a clientside one sends no request)."""
    return {(item["id"], item["property"]) for callback in app.callback_map.values() if "callback" in callback
            for item in callback["inputs"] + callback["state"]}
