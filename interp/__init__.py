"""interp: test whether sequence models do exact Bayesian inference, and see how inside.

    import interp
    model = interp.load("runs/bij")          # a run folder or one .safetensors checkpoint
    model.task, model.answer_probs(tokens), model.run_with_cache(tokens)
    lm = interp.load_language_model("EleutherAI/pythia-410m")   # weights from the local cache
"""
from __future__ import annotations

__version__ = "0.1.0"


def load(path, task: str | None = None, device: str | None = None):
    """Load a run folder (its last checkpoint), a checkpoint file or a shipped model name as a hooked model."""
    # Deferred: the loader imports torch and TransformerLens (~10 s), which `import interp` and the
    # CLI's start (``interp --help``, argument errors) should not pay for.
    from .catalog import locate
    from .checkpoint import load as _load

    return _load(locate(path), task=task, device=device)


def load_language_model(spec: str, device: str = "cpu"):
    """A language model for the Paper III diagnostics (``analyses.run(NAME, lm)``): a Hugging Face model folder,
    or a model name whose weights are in the local Hugging Face cache (nothing is downloaded)."""
    from models.language_model import open_language_model

    return open_language_model(spec, device=device)


__all__ = ["load", "load_language_model", "__version__"]
