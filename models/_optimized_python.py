"""Let ``python -OO`` import TransformerLens.

-OO strips docstrings, and transformers (which TransformerLens imports) builds its models' docstrings
at import time with ``auto_docstring``, which raises when a docstring it parses is gone. Under -OO
there is no documentation to build, so the decorator is replaced by one that returns what it wraps.
Nothing changes without -OO. Imported by models/base.py before TransformerLens.
"""
from __future__ import annotations

import sys


def _identity_decorator(*args, **kwargs):
    if len(args) == 1 and callable(args[0]) and not kwargs:  # @auto_docstring
        return args[0]
    return lambda obj: obj  # @auto_docstring(custom_intro=...)


if sys.flags.optimize >= 2:
    import transformers.utils
    import transformers.utils.auto_docstring as _module

    _module.auto_docstring = _identity_decorator
    transformers.utils.auto_docstring = _identity_decorator
