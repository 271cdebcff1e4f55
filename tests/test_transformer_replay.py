"""The wind-tunnel transformer on TransformerLens 4 replays what it computed on TransformerLens 3.9: every
shipped transformer's outputs on fixed sequences, every hook's name and shape, and the seeded initial weights of
a model no shipped one covers (RMSNorm, gelu_new, rotary), recorded by tests/record_transformer_outputs.py."""
import json

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file

from interp import load
from tests.record_transformer_outputs import FIXTURE, RANDOM, outputs, random_rms, transformers

RECORDED = load_file(FIXTURE)
with safe_open(FIXTURE, "pt") as handle:
    HOOKS = json.loads(handle.metadata()["hooks"])


def replay(name: str, model) -> None:
    tokens = RECORDED[f"{name}.tokens"]
    _, cache = model.run_with_cache(tokens)
    assert {hook: list(value.shape) for hook, value in cache.items()} == HOOKS[name]
    batch_mask = model.task.sample(len(tokens), generator=torch.Generator().manual_seed(0)).query_mask
    # a few float32 roundings apart at most: another CPU's matmul kernels sum in another order (an AMD EPYC
    # put a regression output of 20.7 1.5e-5 away, 8 of its float32 spacings), hence a relative term too
    torch.testing.assert_close(outputs(model, tokens)[batch_mask], RECORDED[f"{name}.outputs"], rtol=1e-6, atol=1e-5)


@pytest.mark.parametrize("name", transformers())
def test_shipped_transformer_gives_the_recorded_outputs_and_hooks(name):
    with torch.no_grad():
        replay(name, load(name))


def test_seeded_initialisation_and_the_other_options_replay():
    model = random_rms()
    weights = {k.removeprefix(f"{RANDOM}.weights."): v for k, v in RECORDED.items() if k.startswith(f"{RANDOM}.weights.")}
    assert weights.keys() == model.state_dict().keys()
    for key, value in model.state_dict().items():
        torch.testing.assert_close(value, weights[key], rtol=0, atol=0, msg=key)
    with torch.no_grad():
        replay(RANDOM, model)
