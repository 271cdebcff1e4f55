"""Where a two-layer transformer without a token shift keeps each binding, read from its attention.

On the paper's recall format (STORE key SEP value per slot, then fillers, then the queries) the trained
transformer binds in two steps: every table slot s has a *carrier*, one later position (a STORE or SEP of a
later slot, or one of the fillers after the table) where one layer-0 head copies the slot's key and the other
its value; layer 1 then attends from the query key to the carrier holding that key and reads the value there.
This script finds each slot's carrier as the position layer 1 attends most from queries asking that slot
(the mode over sequences), measures how much layer-0 attention at the carrier lands on the slot's own key and
own value (the larger of the heads), and sets that beside the slot's accuracy; ``best_copy_anywhere`` says
whether any later position holds both (the smaller of its key and value copies, at the best position); ``weakest_slot`` is the slot with the least
of it, ``others`` the least copy and accuracy over the rest. ``slots_held`` counts the slots whose carrier
holds both (each copy at least 0.5), ``slots_answered`` those answered at least half the time, and
``held_is_answered`` the slots where the two agree. A slot whose carrier copies
its key but not its value is found and answered wrongly: that is a hole in the per-slot accuracy.

    python experiments/binding_carriers.py CHECKPOINT OUT_DIR [--n 1024]

writes ``carriers.json`` (the numbers per slot), ``carriers.pdf`` and ``carriers.png`` into OUT_DIR.
"""
import argparse
import sys
from collections import Counter
from pathlib import Path

import plotly.graph_objects as go
import torch

import interp
from analyses import style
from analyses.base import held_out_batch
from analyses.content_addressing import bound_accuracy
from tasks.recall import MARKERS
from interp.export import PNG_WIDTH, figure_image, figure_pdf
from interp.files import atomic_write_bytes, atomic_write_json


@torch.no_grad()
def carriers(model, n: int, seed: int = 0, chunk: int = 128) -> dict:
    task = model.task.judged_on()  # every table full: every slot asked about
    if task.name != "recall" or task.layout != "paper" or model.cfg.n_layers != 2:
        sys.exit(f"binding_carriers.py reads a two-layer transformer on the paper's recall format, not {task!r}")
    T, slots = task.seq_len, task.slots
    read = [Counter() for _ in range(slots)]  # per slot: layer-1 arg-max positions from queries asking it
    copy = torch.zeros(model.cfg.n_heads, T, T)  # layer-0 attention summed over sequences
    patterns = {}
    hooks = [(f"blocks.{layer}.attn.hook_pattern", lambda x, hook: patterns.__setitem__(hook.layer(), x)) for layer in (0, 1)]
    token = None
    for i, begin in enumerate(range(0, n, chunk)):
        batch = held_out_batch(task, min(chunk, n - begin), seed + i)
        model.run_with_hooks(batch.tokens, fwd_hooks=hooks)
        copy += patterns[0].sum(0)
        asked = batch.query_mask[0].nonzero().flatten()  # the query keys' positions, the same in every row
        target = patterns[1].mean(1)[:, asked].argmax(-1)  # [B, M]: where layer 1 reads, heads averaged
        for s, p in zip(batch.hypothesis["slot"].flatten().tolist(), target.flatten().tolist()):
            read[s][p] += 1
        token = batch.tokens[0]
    copy /= n
    def kind(t: int) -> str:  # a token's role: key, value or one of the markers
        return "key" if t < task.n_keys else "value" if t < task.n_keys + task.n_values else MARKERS[t - task.n_keys - task.n_values]
    right = bound_accuracy(model, task, n, seed)
    rows = []
    for s in range(slots):
        carrier, times = read[s].most_common(1)[0]
        key, value = 4 * s + 1, 4 * s + 3  # STORE key SEP value
        rows.append(dict(slot=s, carrier=carrier, carrier_token=kind(int(token[carrier])),
                         carrier_share=times / sum(read[s].values()), key_copy=float(copy[:, carrier, key].max()),
                         value_copy=float(copy[:, carrier, value].max()), accuracy=right["per_slot_right"][s] / right["per_slot_asked"][s], asked=right["per_slot_asked"][s],
                         # the best carrier layer 0 offers anywhere after the pair: both copied at one position
                         best_copy_anywhere=float(torch.minimum(copy[:, value + 1:, key].max(0).values,
                                                                copy[:, value + 1:, value].max(0).values).max())))
    held = [min(r["key_copy"], r["value_copy"]) >= 0.5 for r in rows]  # the carrier layer 1 reads holds the pair
    answered = [r["accuracy"] >= 0.5 for r in rows]
    weakest = min(rows, key=lambda r: r["best_copy_anywhere"])
    others = [r for r in rows if r is not weakest]
    return dict(n_sequences=n, seed=seed, accuracy_full_table=right["accuracy"], weakest_slot=weakest,
                others=dict(best_copy_anywhere_min=min(r["best_copy_anywhere"] for r in others),
                            accuracy_min=min(r["accuracy"] for r in others)),
                carrier_tokens=dict(Counter(r["carrier_token"] for r in rows)), slots_held=sum(held),
                slots_answered=sum(answered), held_is_answered=sum(h == a for h, a in zip(held, answered)), rows=rows)


def figure(result: dict, title: str) -> go.Figure:
    rows = result["rows"]
    x = [r["slot"] for r in rows]
    fig = go.Figure()
    for name, field, colour in (("layer 0 copies the key to the carrier", "key_copy", "#636efa"),
                                ("layer 0 copies the value to the carrier", "value_copy", "#ef553b"),
                                ("accuracy of queries asking the slot", "accuracy", "#00cc96")):
        fig.add_trace(go.Scatter(x=x, y=[r[field] for r in rows], name=name, mode="lines+markers", line_color=colour))
    fig.update_layout(title_text=title, xaxis_title="table slot", yaxis_title="attention weight / accuracy",
                      yaxis_range=[0, 1.05], legend=dict(orientation="h", y=-0.2))
    return style.apply(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint")
    parser.add_argument("out", type=Path)
    parser.add_argument("--n", type=int, default=1024, help="held-out sequences with full tables")
    args = parser.parse_args()
    model = interp.load(args.checkpoint)
    model.eval()
    result = carriers(model, args.n)
    result["command"] = " ".join(["python", "experiments/binding_carriers.py"] + sys.argv[1:])
    fig = figure(result, "where each binding is kept: layer-0 copies at the slot's carrier, and its accuracy")
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(args.out / "carriers.json", result)
    atomic_write_bytes(args.out / "carriers.pdf", figure_pdf(fig))
    fig.update_layout(width=PNG_WIDTH)
    atomic_write_bytes(args.out / "carriers.png", figure_image(fig, "png"))
    weak = [r for r in result["rows"] if min(r["key_copy"], r["value_copy"]) < 0.5]
    for r in weak:
        print(f"slot {r['slot']}: carrier {r['carrier']} ({r['carrier_token']}), key copy {r['key_copy']:.3f}, "
              f"value copy {r['value_copy']:.3f}, accuracy {r['accuracy']:.3f}")
    print(f"wrote {args.out}/carriers.json, .pdf, .png")


if __name__ == "__main__":
    main()
