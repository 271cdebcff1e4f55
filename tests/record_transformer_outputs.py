"""Records every shipped transformer's outputs on a few fixed sequences into tests/data/transformer_outputs.safetensors,
the reference tests/test_transformer_replay.py holds the transformer to. Recorded once with the TransformerLens 3
``HookedTransformer`` the shipped checkpoints were trained on; rerun only when a shipped transformer is retrained:

    python -m tests.record_transformer_outputs          # every shipped transformer again
    python -m tests.record_transformer_outputs --add    # only those not recorded yet, the others kept

A transformer shipped later (trained on TransformerLens 4) is added with ``--add``: its entry then holds the
wind-tunnel transformer to what it computed when it was shipped, and the fixture's metadata says which
TransformerLens recorded each entry.
"""
import json
from pathlib import Path

import torch
from safetensors.torch import save_file

from interp import load
from interp.catalog import shipped, summary

FIXTURE = Path(__file__).parent / "data" / "transformer_outputs.safetensors"
BATCH = 4
RANDOM = "random-rms-rotary"  # a model built from a seed, not shipped


def transformers() -> dict:
    return {name: path for name, path in shipped().items() if summary(path)["arch"] == "transformer"}


@torch.no_grad()
def outputs(model, tokens: torch.Tensor) -> torch.Tensor:
    """What the toolkit reads off the model: answer probabilities (a discrete task) or the Gaussian predictive."""
    if model.task.continuous:
        return torch.stack(model.predictive(tokens), -1)
    return model.answer_probs(tokens)


def random_rms():
    """A transformer no shipped model covers (RMSNorm, gelu_new, rotary): its initial weights are recorded too."""
    import models
    import tasks
    config = dict(d_model=32, n_layers=2, n_heads=4, normalization="RMS", act_fn="gelu_new", positional="rotary")
    return models.build("transformer", tasks.make("bijection", V=8, L=7), config, seed=3).eval()


def record(add: bool = False) -> None:
    tensors, hooks, recorded_with = {}, {}, {}
    if add:  # keep every entry there is; record only the shipped transformers it lacks
        from safetensors import safe_open
        from safetensors.torch import load_file

        tensors = load_file(FIXTURE)
        with safe_open(FIXTURE, "pt") as handle:
            metadata = handle.metadata()
        hooks = json.loads(metadata["hooks"])
        recorded_with = json.loads(metadata.get("recorded_with", "{}")) or {name: "3.9" for name in hooks}
    from importlib.metadata import version
    for name in [*transformers(), RANDOM]:
        if name in hooks:
            continue
        recorded_with[name] = version("transformer-lens")
        model = random_rms() if name == RANDOM else load(name).eval()
        if name == RANDOM:
            tensors |= {f"{name}.weights.{k}": v.contiguous() for k, v in model.state_dict().items()}
        batch = model.task.sample(BATCH, generator=torch.Generator().manual_seed(0))
        tensors[f"{name}.tokens"] = batch.tokens.contiguous()
        tensors[f"{name}.outputs"] = outputs(model, batch.tokens)[batch.query_mask].contiguous()
        with torch.no_grad():
            _, cache = model.run_with_cache(batch.tokens)
        hooks[name] = {hook: list(value.shape) for hook, value in cache.items()}
    save_file(tensors, FIXTURE, metadata={"hooks": json.dumps(hooks), "recorded_with": json.dumps(recorded_with)})


if __name__ == "__main__":
    import sys

    record(add="--add" in sys.argv[1:])
