"""One line on the terminal's error stream, as every part of the toolkit says things outside a command's output, and
the phrases several packages' messages share."""
from __future__ import annotations

import sys


def say(text: str) -> None:
    """``interp: TEXT`` on stderr, at once (flushed: it reports waits and progress as they happen)."""
    print(f"interp: {text}", file=sys.stderr, flush=True)


# what --model takes, in the CLI's help and in every refusal that asks for it (interp.load_language_model reads each)
MODEL_SOURCES = ("a Hugging Face model folder, a model name whose weights are in the local cache, a GGUF file, or a "
                 "packaged model such as smollm2-135m (interp list)")
