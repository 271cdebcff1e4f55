"""``interp explore``: the explorers, a local web app on one model (``app`` on a wind tunnel, ``lm_app`` on a
language model, which ``lm_opening`` serves at once, before torch and Dash are loaded).

Importing this package imports nothing heavy: the wind-tunnel explorer's names (``Explorer``, ``build_app``,
``serve``, ...) are loaded from their modules when first asked for.
"""
from __future__ import annotations

PUBLIC = {"Explorer": "app", "build_app": "app", "parse_tokens": "app", "print_numbers": "app",
          "prepare_in_background": "app", "serve": "app", "ablation_hooks": "app", "chosen_ablations": "app"}


def __getattr__(name: str):
    """A public name, imported from its module only when asked for (not to serve the language model's page)."""
    if name in PUBLIC:
        from importlib import import_module

        return getattr(import_module(f"{__name__}.{PUBLIC[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
