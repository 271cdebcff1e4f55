"""One validation layer for every request the explorer's web page sends (``interp explore``).

A Dash app is driven by POSTs to ``/_dash-update-component``: a JSON body naming the callback (its
outputs) and the value of every input and state it reads. The page only sends well-formed values,
but anyone who can reach the port can send anything, and a value of the wrong type reaching a view
ends in a traceback and an HTTP 500. So every such request is checked before Dash sees it:

- the body: at most ``MAX_BODY`` bytes (413 beyond), strict JSON (no NaN, no integer of more than
  ``MAX_DIGITS`` digits, not nested beyond what Python parses), an object;
- the callback: an output the app has, with exactly the inputs and states it declares, in order;
- every value: by the rule of its (component, property), e.g. the step slider an integer within the
  checkpoints, tokens integers within the vocabulary (floats are refused, never truncated), the
  typed text a string of bounded length. A component without a rule of its own gets the generic
  checks only (a size bound). Each view of an explorer gives the rules of its own controls
  (``interp/explore/page.py``); a new control adds its rule to its view.

A refused request is answered 400 (or 413) with one line of text saying what was wrong; nothing
reaches the views. What is well-formed but not meaningful for the model (a sequence the task cannot
give a posterior for, say) is refused by the views themselves, with their own message.
"""
from __future__ import annotations

import json
import math
from typing import Callable

from tasks.base import SEED_LIMIT

MAX_BODY = 1 << 20  # bytes: the largest legitimate body (a long typed sequence and its store) is far smaller
MAX_DIGITS = 30  # an integer in a request never needs more (seeds are below 2^32)
MAX_TEXT = 20_000  # characters of typed tokens
MAX_CLICKS = 2 ** 53


class Refused(Exception):
    """A request the explorer answers with ``status`` and one line, without running a view."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


Rule = Callable[[object], None]  # raises Refused for a value it does not take


def _big_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_DIGITS:
        raise Refused(f"a number of {len(text.lstrip('-'))} digits; numbers in requests have at most {MAX_DIGITS}")
    return int(text)


def _no_constant(name: str):
    raise Refused(f"{name} is not a number the explorer takes")


def parse_body(raw: bytes) -> dict:
    """The JSON object of a request body, or Refused."""
    if len(raw) > MAX_BODY:
        raise Refused(f"request body of {len(raw):,} bytes; at most {MAX_BODY:,} are taken", 413)
    try:
        body = json.loads(raw, parse_int=_big_int, parse_constant=_no_constant)
    except Refused:
        raise
    except (ValueError, RecursionError) as err:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise Refused(f"request body is not JSON ({'nested too deeply' if isinstance(err, RecursionError) else err})")
    if not isinstance(body, dict):
        raise Refused(f"request body must be a JSON object, got {type(body).__name__}")
    return body


def _kind(value) -> str:
    return "null" if value is None else type(value).__name__


def is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def integer(low: int, high: int, optional: bool = False) -> Rule:
    """An integer in [low, high) (``optional``: or null); a float, even 2.0, is refused."""
    def check(value):
        if value is None and optional:
            return
        if not is_int(value) or not low <= value < high:
            raise Refused(f"expected an integer from {low} to {high - 1}, got {_short(value)}")
    return check


def one_of(*choices) -> Rule:
    def check(value):
        if not any(value == c and type(value) is type(c) for c in choices):
            raise Refused(f"expected one of {', '.join(map(repr, choices))}, got {_short(value)}")
    return check


def subset(choices) -> Rule:
    """A list of distinct strings from ``choices`` (or null, the empty selection)."""
    allowed = set(choices)

    def check(value):
        if value is None:
            return
        if not isinstance(value, list) or len(value) > len(allowed) or not all(
                isinstance(v, str) and v in allowed for v in value):
            raise Refused(f"expected a list of {', '.join(sorted(allowed)) or 'nothing'}, got {_short(value)}")
    return check


def text(max_chars: int = MAX_TEXT) -> Rule:
    def check(value):
        if value is not None and not isinstance(value, str):
            raise Refused(f"expected text, got {_kind(value)}")
        if value is not None and len(value) > max_chars:
            raise Refused(f"text of {len(value):,} characters; at most {max_chars:,} are taken")
    return check


def scalar(max_chars: int = 100) -> Rule:
    """A JSON scalar the view itself judges (a seed box: the view refuses 1.5 or "x" with its message)."""
    def check(value):
        if isinstance(value, (dict, list)) or (isinstance(value, str) and len(value) > max_chars) or (
                isinstance(value, float) and not math.isfinite(value)):
            raise Refused(f"expected a number, got {_short(value)}")
    return check


def _short(value) -> str:
    shown = json.dumps(value) if not isinstance(value, float) or math.isfinite(value) else str(value)
    return shown if len(shown) <= 40 else shown[:37] + "..."


def _pairs(specs) -> list[tuple[str, str]]:
    """(component id, property) of Dash's declared inputs/states or outputs."""
    specs = specs if isinstance(specs, (list, tuple)) else [specs]
    out = []
    for spec in specs:
        if isinstance(spec, dict):
            out.append((spec["id"], spec["property"]))
        else:
            out.append((spec.component_id, spec.component_property))
    return out


def check_request(body: dict, callback_map: dict, rules: dict[tuple[str, str], Rule]) -> None:
    """Refused unless ``body`` calls a callback of the app with values its rules take."""
    output = body.get("output")
    if not isinstance(output, str) or output not in callback_map:
        raise Refused(f"unknown output {_short(output)}; this explorer has no such view")
    callback = callback_map[output]
    declared = _pairs(callback.get("output", []))
    outputs = body.get("outputs")
    multi = isinstance(callback.get("output"), (list, tuple))  # the page sends a list only for several outputs
    given = outputs if isinstance(outputs, list) and multi else [outputs] if not multi else None
    if callback.get("no_output"):
        pass
    elif given is None or len(given) != len(declared) or not all(
            isinstance(o, dict) and isinstance(o.get("id"), str) and isinstance(o.get("property"), str)
            and (o["id"], o["property"].split("@")[0]) == d for o, d in zip(given, declared)):
        raise Refused(f"outputs do not match the view {output!r}")
    for key in ("inputs", "state"):
        expected = _pairs(callback.get(key, []))
        items = body.get(key, [])
        if not isinstance(items, list) or len(items) != len(expected):
            raise Refused(f"{key} must be a list of the {len(expected)} values the view {output!r} reads")
        for item, (component, prop) in zip(items, expected):
            if not isinstance(item, dict) or (item.get("id"), item.get("property")) != (component, prop):
                raise Refused(f"{key} must list {component}.{prop} here, got {_short(item)}")
            rule = rules.get((component, prop))
            if rule is not None:
                try:
                    rule(item.get("value"))
                except Refused as err:
                    raise Refused(f"{component}.{prop}: {err}", err.status) from None
    changed = body.get("changedPropIds", [])
    if not isinstance(changed, list) or not all(isinstance(c, str) and len(c) < 200 for c in changed):
        raise Refused("changedPropIds must be a list of component.property names")


def guard(app, rules: dict[tuple[str, str], Rule]) -> None:
    """Check every callback request of a Dash app (on Flask) before Dash runs it."""
    import flask

    server = app.server
    server.config["MAX_CONTENT_LENGTH"] = MAX_BODY  # a longer body is cut off with 413 before it is read
    update = app.config.routes_pathname_prefix + "_dash-update-component"

    @server.errorhandler(413)
    def too_large(_err):
        return flask.Response(f"request body over {MAX_BODY:,} bytes\n", status=413, mimetype="text/plain")

    @server.errorhandler(Exception)
    def unanswered(err):
        """Every route and asset, guarded: whatever a route raises is one line of text and never a 500. A path
        Dash has no file for (``..%2f`` climbing out of a package, an unregistered package) raises inside Dash;
        that is a 404 like any missing file."""
        from werkzeug.exceptions import HTTPException

        if isinstance(err, HTTPException):
            return flask.Response(f"{err.name.lower()}: {_short(flask.request.path)}\n", status=err.code,
                                  mimetype="text/plain")
        if flask.request.method in ("GET", "HEAD"):
            return flask.Response(f"no such file: {_short(flask.request.path)}\n", status=404, mimetype="text/plain")
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        return flask.Response(f"the explorer could not answer this request: {_short(reason)}\n", status=400,
                              mimetype="text/plain")

    @server.before_request
    def validate():
        if flask.request.path != update or flask.request.method != "POST":
            return None
        try:
            check_request(parse_body(flask.request.get_data(cache=True)), app.callback_map, rules)
        except Refused as err:
            return flask.Response(f"{err}\n", status=err.status, mimetype="text/plain")
        return None


def same_numbers(a, b) -> bool:
    """Whether two nested lists hold the same numbers (1 and 1.0 alike; a bool is never a number)."""
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_numbers(x, y) for x, y in zip(a, b))
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (a, b))
    return numbers and float(a) == float(b)


def sequence_rule(explorer) -> Rule:
    """The sequence store: ``{"tokens": [ids], "seed": int or null}``, as the page keeps it. Sampled
    (a seed): the tokens must be that seed's sequence; typed (null): token ids within the vocabulary,
    at most as many as the model takes, and a sequence the task gives a posterior for."""
    from .errors import UserError

    vocab = None if explorer.task.continuous else explorer.task.vocab_size

    def check(value):
        if not isinstance(value, dict) or set(value) != {"tokens", "seed"}:
            raise Refused(f'expected {{"tokens": [...], "seed": ...}}, got {_short(value)}')
        tokens, seed = value["tokens"], value["seed"]
        if not isinstance(tokens, list) or not tokens or len(tokens) > 100_000:
            raise Refused(f"tokens must be a non-empty list, got {_short(tokens)}")
        if seed is not None:
            integer(0, SEED_LIMIT)(seed)
            sampled = explorer.sample(seed)
            # token ids exactly (true is not 1); real-valued inputs as numbers, since the page's JSON
            # writes a float 1.0 as 1
            same = json.dumps(tokens) == json.dumps(sampled) if vocab is not None else same_numbers(tokens, sampled)
            if not same:
                raise Refused(f"tokens are not the sequence of seed {seed}")
            return
        if vocab is None:
            raise Refused(f"{explorer.task.name} sequences are sampled by seed, not typed")
        bad = next((t for t in tokens if not is_int(t) or not 0 <= t < vocab), None)
        if bad is not None or any(not is_int(t) for t in tokens):
            raise Refused(f"tokens must be integers from 0 to {vocab - 1}, got {_short(bad)}")
        model = explorer.model(len(explorer.checkpoints) - 1)
        if model.positions and len(tokens) > model.cfg.n_ctx:  # as Explorer.typed: a learned position table
            raise Refused(f"{len(tokens)} tokens is longer than the model's context ({model.cfg.n_ctx})")
        try:
            explorer.batch(tokens, None)  # a sequence the task gives no posterior for is refused
        except UserError as err:
            raise Refused(str(err)) from None
    return check
