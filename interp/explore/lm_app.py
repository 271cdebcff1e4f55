"""The explorer on a language model (``interp explore --model MODEL``): a local Dash app on typed prompts
(``lm_opening`` serves it, and answers while the model opens). Every view receives the state
``lm_state.LanguageExplorer``; ``VIEWS`` is their table, from which the page, its routes and their request rules
are built (``page``):

- ``lm_prompt``: typed text, or a prompt of a prompt task (two-label, coin) drawn with a seed, whose exact Bayes
  predictive over the answer tokens is shown beside the model's;
- ``lm_attention``: one layer and query head's pattern, tokens' text on both axes, and a grid of every head of the
  layer;
- ``lm_lens``: each layer's residual stream at the last position decoded through the model's own final norm and
  unembedding, its top tokens and their probabilities;
- ``patching``: activation patching on drawn prompts of a prompt task, one shown observation flipped (the
  wind-tunnel explorer's view, with ``pairs.LanguagePairs``);
- ``status``: what a slow view waits for.

The wind-tunnel explorer (``app``) is the same idea on a model whose task gives an exact posterior at every
position; a language model has one only at a prompt task's answer position.
"""
from __future__ import annotations

from dash import Dash, html

from . import lm_attention, lm_lens, lm_prompt, page, patching, status
from .lm_state import LanguageExplorer
from .pairs import LanguagePairs

VIEWS = (status.VIEW, lm_prompt.VIEW, lm_attention.VIEW, lm_lens.VIEW, patching.view(LanguagePairs))


def skeleton(state: LanguageExplorer, at) -> html.Div:
    """The page: the status line, the prompt and the layer and head on top ("top"), the attention and the lens side
    by side ("pair"), every head of the layer and the patching below ("main")."""
    cfg = state.lm.model.cfg
    return html.Div([
        *at("status"),
        html.H2(f"{state.lm.name}: {cfg.n_layers} layers, {cfg.n_heads} query heads "
                f"({getattr(cfg, 'n_key_value_heads', None) or cfg.n_heads} key/value heads), d_model {cfg.d_model}",
                style=dict(margin="4px 6px")),
        *at("top"),
        html.Div(at("pair"), style=dict(display="grid", gridTemplateColumns="minmax(0, 3fr) minmax(0, 2fr)",
                                        alignItems="start")),
        *at("main"),
    ], style=dict(fontFamily="sans-serif", fontSize="14px"))


def build_app(state: LanguageExplorer) -> Dash:
    return page.build(state, VIEWS, skeleton, f"interp explore: {state.lm.name}")
