"""``interp explore``: the explorers, local web apps on one model. On a wind tunnel (``app``) every view receives
the state ``state.Explorer``; on a language model (``lm_app``, which ``lm_opening`` serves at once, before torch and
Dash are loaded) the state ``lm_state.LanguageExplorer``. Each explorer's page, routes and request rules are built
from its table of views (``page``).

Importing this package imports nothing heavy: the wind-tunnel explorer's public names (``Explorer``, ``build_app``,
``serve``, ``ablation_hooks``, ...) are loaded from their modules when first asked for.
"""
from __future__ import annotations

PUBLIC = {"Explorer": "state", "parse_tokens": "state", "build_app": "app", "print_numbers": "app",
          "prepare_in_background": "app", "serve": "app", "ablation_hooks": "hooks", "chosen_ablations": "hooks"}


def __getattr__(name: str):
    """A public name, imported from its module only when asked for (not to serve the language model's page)."""
    if name in PUBLIC:
        from importlib import import_module

        return getattr(import_module(f"{__name__}.{PUBLIC[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
