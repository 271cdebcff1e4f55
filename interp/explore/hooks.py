"""The wind-tunnel explorer's ablations as hooks on the model, which every view that runs the model applies: the
choices the ablation controls make (``CONTROLS``, ``chosen_ablations``), how a view names them (``ablation_text``),
their hooks (heads zeroed or set to their mean output at ``hook_z``, ``activations.ablation_hook``; blocks skipped,
``activations.part_hooks``) and the model with them on (``ablated``). The controls themselves and head-ablation's
map are the ablation view's (``ablation``).
"""
from __future__ import annotations

import re
from contextlib import contextmanager

from dash import Input

from analyses.activations import ablation_hook, mean_z, part_hooks, z_hook_name

from ..errors import UserError

# the ablation controls as a callback's inputs: every view follows them
CONTROLS = (Input("ablate-heads", "value"), Input("ablate-blocks", "value"), Input("ablate-mode", "value"))
CHOICE = r"([HM])(\d+)\.(\d+)|B(\d+)"  # "H1.2" (head 2 of layer 1 zeroed), "M1.2" (set to its mean), "B0" (skipped)


def chosen_ablations(heads: list[str], blocks: list[str], mode: str) -> list[str]:
    """The ablation choices of the controls: the ticked heads ("H<l>.<h>") zeroed or, in mean mode, set to
    their mean output ("M<l>.<h>"), and the ticked blocks."""
    return [("M" + h[1:]) if mode == "mean" else h for h in heads or []] + list(blocks or [])


def ablation_text(choices: list[str]) -> str:
    """How a view names the ablations it shows: ``["H0.2", "M1.0", "B1"]`` -> "L0H2 ablated, L1H0 mean-ablated,
    block 1 skipped" ("" for none)."""
    said = []
    for choice in sorted(choices or [], key=lambda c: (c.startswith("B"), c)):  # heads, then blocks
        match = re.fullmatch(CHOICE, choice)
        if match and match[4] is not None:
            said.append(f"block {match[4]} skipped")
        elif match:
            said.append(f"L{match[2]}H{match[3]} {'mean-ablated' if match[1] == 'M' else 'ablated'}")
    return ", ".join(said)


def ablation_hooks(choices: list[str], model, means=None) -> list:
    """Hooks for the chosen ablations: ``"H1.2"`` zeroes head 2 of layer 1, ``"M1.2"`` sets it to its mean
    output (``means()[layer][head]``, head-ablation's mean z), ``"B0"`` skips block 0; anything else, or a
    layer or head ``model`` lacks, is refused."""
    hooks = []
    for choice in sorted(choices or [], key=str):
        match = re.fullmatch(CHOICE, choice, re.ASCII) if isinstance(choice, str) else None
        layer, head = int(match[2] or match[4]) if match else 0, int(match[3] or 0) if match else 0
        heads = getattr(model.cfg, "n_heads", 0) if model.has_attention() else 0  # an LSTM or an MLP has none
        if match is None or layer >= model.cfg.n_layers or (match[3] is not None and head >= heads):
            raise UserError(f"unknown ablation {choice!r}; heads are H<layer>.<head> (zero) or M<layer>.<head> "
                            f"(mean), blocks B<layer>, within the model's {model.cfg.n_layers} layers of "
                            f"{heads} heads")
        if match[4] is not None:
            hooks += part_hooks("block", layer)
        elif match[1] == "M" and means is None:
            raise UserError("mean ablation needs the heads' mean outputs, which this view does not have")
        else:
            hooks.append((z_hook_name(layer), ablation_hook(head, means()[layer][head] if match[1] == "M" else None)))
    return hooks


@contextmanager
def ablated(state, index: int, choices: list[str], model=None):
    """The model at slider position ``index`` with ``choices`` ablated, while the context lasts. Given ``model``
    (a copy of that one, a background job's own), it is ablated instead, and the explorer's lock is held only
    while its hooks are made: the job runs on it while the other views are served."""
    with state.lock:
        own = model is None
        model = state.model(index) if own else model
        hooks = ablation_hooks(choices, model, means=lambda: mean_outputs(state, index))
        if any(name not in model.hook_dict for name, _ in hooks):
            raise UserError(f"ablations {sorted(choices)} name a part this model does not have")
        if own:
            with model.hooks(fwd_hooks=hooks):
                yield model
            return
    with model.hooks(fwd_hooks=hooks):
        yield model


def mean_outputs(state, index: int) -> list:
    """Per layer and head, the intact model's mean z over the held-out batch (for mean ablation)."""
    key = ("mean-z", index)
    if key not in state.cache:
        with state.lock, state.waits.on(f"mean head outputs on {state.n_calibration} held-out sequences"):
            # called under ``ablated`` before its hooks are on, so the model is intact
            state.cache[key] = mean_z(state.model(index), state.held_out().tokens)
    return state.cache[key]
