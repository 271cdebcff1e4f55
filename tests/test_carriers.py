"""experiments/binding_carriers.py: where a two-layer transformer keeps each binding.

Checked on a transformer whose attention is set by hand through its hook points (a hook on hook_pattern
returns the constructed pattern): every slot's pair is copied to its own filler after the table and read from
there, except one slot whose value is not copied. The script must find each carrier and that slot."""
import runpy
from pathlib import Path

import torch

import models
import tasks

SCRIPT = Path(__file__).resolve().parent.parent / "experiments/binding_carriers.py"
UNCOPIED = 2  # the slot whose value no position gathers


def constructed_model():
    task = tasks.make("recall", N=4, n_keys=16, n_values=16, fillers=4, gap=2, queries=3)
    model = models.build("transformer", task, config=dict(d_model=16, n_layers=2, n_heads=2, shift=None), seed=0).eval()
    table = 4 * task.N  # STORE key SEP value per slot; fillers follow, one carrier per slot: filler s
    seen = {}
    model.embed.register_forward_pre_hook(lambda module, args: seen.__setitem__("tokens", args[0]))  # the ids

    def layer0(pattern, hook):
        pattern = torch.zeros_like(pattern)
        pattern[..., 0] = 1  # every other row attends to the first position
        for s in range(task.N):
            carrier = table + s
            pattern[:, :, carrier] = 0
            pattern[:, 1, carrier, 4 * s + 1] = 1  # head 1 copies the key
            pattern[:, 0, carrier, 4 * s + 3 if s != UNCOPIED else 0] = 1  # head 0 the value, but not slot 2's
        return pattern

    def layer1(pattern, hook):
        tokens = seen["tokens"]
        pattern = torch.zeros_like(pattern)
        pattern[..., 0] = 1
        keys = tokens[:, 1:table:4]  # [B, N]
        for q in range(table, tokens.shape[1]):
            asked = tokens[:, q : q + 1] == keys  # the query key at q, where it sits in the table
            rows = asked.any(1)
            pattern[rows, :, q] = 0
            pattern[rows, :, q, table + asked[rows].int().argmax(1)] = 1  # read the asked slot's carrier
        return pattern

    model.blocks[0].attn.hook_pattern.add_perma_hook(layer0)
    model.blocks[1].attn.hook_pattern.add_perma_hook(layer1)
    return model, table


def test_each_constructed_carrier_is_found_and_the_slot_without_its_value_is_the_weakest():
    model, table = constructed_model()
    result = runpy.run_path(str(SCRIPT), run_name="carriers")["carriers"](model, n=64)
    rows = result["rows"]
    assert [r["carrier"] for r in rows] == [table + s for s in range(4)]
    assert all(r["carrier_token"] == "FILL" and r["carrier_share"] == 1.0 for r in rows)
    assert all(abs(r["key_copy"] - 1) < 1e-6 for r in rows)
    assert [round(r["value_copy"], 6) for r in rows] == [1, 1, 0, 1]
    assert result["weakest_slot"]["slot"] == UNCOPIED and result["weakest_slot"]["best_copy_anywhere"] < 1e-6
    assert abs(result["others"]["best_copy_anywhere_min"] - 1) < 1e-6
    assert result["carrier_tokens"] == {"FILL": 4} and result["slots_held"] == 3
