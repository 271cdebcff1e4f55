"""Shipping reference models into ``models/pretrained/`` and writing their model cards.

A shipped model is a copy of a finished run folder (its record, its metrics log and its checkpoints: the
final one, or all of them for a checkpoint series) with a model card, README.md, written from its record.
Maintainers add one with

    python -m interp.pretrained runs/hmm-mamba-cpu [--name hmm-mamba-cpu] [--all-checkpoints]
"""
from __future__ import annotations

import argparse
import json
import shlex
import shutil
from pathlib import Path
from types import SimpleNamespace

import models
import tasks

from .catalog import PRETRAINED_DIR
from .errors import UserError
from .files import RunFolder
from .recipe import preset_recipe, recorded_settings, recorded_train, resolve
from .train import lr_at


def shown(value) -> str:
    """A setting as -T/-M read it back: JSON for true/false/null, the value itself otherwise."""
    return json.dumps(value) if isinstance(value, bool) or value is None else str(value)


def train_command(record: dict, preset: str) -> str:
    """The ``interp train`` command that reproduces the run: the preset plus whatever differs from it."""
    task_name, arch = record["task"]["name"], record["arch"]
    default_task = tasks.for_preset(task_name, preset).config()
    task, ran = tasks.from_config(record["task"]), recorded_train(record)
    try:
        recipe = preset_recipe(preset, task, arch)  # on the run's own task
    except UserError:  # the preset's stages do not fit the run's task (full tables only), so the run named its own
        recipe = resolve(task, arch, preset, train_options=dict(curriculum=[])).record()  # the run's written out
    flags = dict(steps="--steps", batch_size="--batch-size", lr="--lr", seed="--seed", loss="--loss",
                 warmup="--warmup", decay="--decay", eval_every="--eval-every", eval_size="--eval-size",
                 checkpoint_every="--checkpoint-every")
    return " ".join([f"interp train --task {task_name} --arch {arch} --preset {preset}"]
                    + [f"-T {k}={shown(v)}" for k, v in record["task"].items() if k != "name" and default_task.get(k) != v]
                    + [f"-M {k}={shown(v)}" for k, v in record["model"].items() if recipe["model"].get(k) != v]
                    + [f"{flag} {ran[k]}" for k, flag in flags.items() if ran[k] != recipe["train"][k]]
                    + [f"--{k}" if ran[k] else f"--no-{k}" for k in ("compile", "bf16")  # on/off switches
                       if ran[k] != recipe["train"][k]]
                    + ([f"--curriculum {curriculum_flag(task, ran)}"]
                       if list(map(list, ran["curriculum"] or ())) != list(map(list, recipe["train"]["curriculum"] or ()))
                       else [])
                    + ([f"--init {shlex.quote(ran['init'])}"] if ran.get("init") else []))


def curriculum_flag(task, ran: dict) -> str:
    """``--curriculum``'s value for a run's stages: the name of the task's curriculum that builds them, else JSON."""
    stages = list(map(list, ran["curriculum"]))
    for name in task.curricula:
        if list(map(list, task.curriculum(name, ran["steps"]))) == stages:
            return name
    return shlex.quote(json.dumps(ran["curriculum"], separators=(",", ":")))


def _fmt(value: float) -> str:
    return f"{value:.2e}" if abs(value) < 1e-3 and value != 0 else f"{value:.4f}"


def arch_label(arch: str) -> str:
    """How a model card names an architecture ("A transformer"), from its declaration."""
    cls = models.REGISTRY.get(arch)
    return cls.label if cls is not None and cls.label else f"A {arch}"


def curriculum_sentence(stages) -> str:
    """" It trained on the task with n=10 until step 2,000, then with n=20 until step 4,000 (curriculum
    stages); ..." for a run's curriculum, or "" without one."""
    if not stages:
        return ""
    said = lambda settings: ", ".join(f"{k}={v}" for k, v in settings.items()) or "its own settings"
    parts = [f"with {said(stage)} until step {end:,}" if isinstance(stage, dict) else
             f"on a mixture ({'; '.join(said(option) for option in stage)}, in turn) until step {end:,}"
             for end, stage in stages]
    kind = "curriculum stages" if len(parts) > 1 else "a curriculum stage"
    return (f" It trained on the task {', then '.join(parts)} ({kind}); from then on, and in every evaluation, "
            f"on the task itself.")


def init_sentence(init: dict | None) -> str:
    """" It started from the weights of X (step N, ...)" for a run trained on from a checkpoint."""
    if not init:
        return ""
    seen = f", after {init['sequences']:,} training sequences" if init.get("sequences") else ""
    return (f" It started from the weights of `{init['path']}` (step {init['step']:,}{seen}; SHA-256 "
            f"{init['sha256'][:12]}...), not from a fresh init.")


def soft_loss_words(task) -> str:
    """What the soft loss is on this task: the Bayes predictive is a distribution over classes, or a Gaussian."""
    return (" (the expected Gaussian NLL under the exact Bayes predictive)" if task.continuous
            else " (cross-entropy against the exact Bayes posterior)")


def schedule_words(s: dict) -> str:
    """The rate after the warm-up: a cosine to zero over the whole run, or held and then annealed (``decay``)."""
    decay = s.get("decay", 1.0)
    return "cosine to 0" if decay >= 1 else f"held, then a cosine to 0 over the last {decay:.0%} of the steps after it"


def stopped_words(record: dict) -> str:
    """"Stopped at step N of the planned ..." for a run shipped as it stood at a checkpoint."""
    if record.get("stopped_at") is None:
        return ""
    s = record["train"]
    return (f"Stopped at step {record['stopped_at']:,} ({record['stopped_at'] * s['batch_size']:,} sequences, "
            f"lr {lr_at(record['stopped_at'], SimpleNamespace(**recorded_settings(s))):.2e} then) of the planned ")


def model_card(name: str, record: dict, preset: str, checkpoints: list[Path], note: str = "") -> str:
    s, final = record["train"], record.get("final") or {}
    config = ", ".join(f"{k} {v}" for k, v in record["model"].items() if v is not None)
    threads = f", {record['threads']} thread(s)" if record.get("threads") else ""
    versions = ", ".join(f"{k} {v}" for k, v in (record.get("versions") or {}).items())
    metrics = "; ".join(f"{k.replace('_', ' ')} {_fmt(v)}" for k, v in final.items() if isinstance(v, (int, float)))
    size = sum(p.stat().st_size for p in checkpoints) / 1e6
    shipped_ckpts = (f"All {len(checkpoints)} checkpoints are shipped (steps "
                     f"{', '.join(str(int(p.stem.split('-')[1])) for p in checkpoints)}; {size:.1f} MB), "
                     "a checkpoint series for training-dynamics analyses such as frame-precision."
                     if len(checkpoints) > 1 else f"Only the final checkpoint is shipped ({size:.1f} MB).")
    task = tasks.from_config(record['task'])
    when = ("the end" if record.get("stopped_at") is None else
            f"step {record['stopped_at']:,}, measured on the CPU when shipped")
    lines = [
        f"# {name}", "",
        f"{arch_label(record['arch'])} ({record.get('n_params', 0):,} parameters; {config}) "
        f"trained on `{task!r}` by", "",
        f"    {train_command(record, preset)}", "",
        f"{stopped_words(record)}"
        f"{s['steps']:,} steps of {s['batch_size']} fresh sequences, AdamW lr {s['lr']} ({s['warmup']} warm-up "
        f"steps, {schedule_words(s)}), weight decay {s['weight_decay']}, grad clip {s['grad_clip']}, "
        f"{s['loss']} targets"
        f"{soft_loss_words(task) if s['loss'] == 'soft' else ''}, seed {s['seed']}."
        + curriculum_sentence(s.get("curriculum") or ())
        + init_sentence(record.get("init"))
        + (" The training step ran through torch.compile." if s.get("compile") else "")
        + (" Its forward pass ran under bf16 autocast on the CPU." if s.get("bf16") and record.get("device") == "cpu"
           else ""),
        f"Training took {record.get('wall_time_s', 0) / 60:.1f} minutes on {record.get('device', 'cpu')}{threads} "
        f"({versions}).", "",
        f"Held-out metrics at {when} ({s['eval_size']:,} sequences): {metrics}.", "",
        f"{shipped_ckpts} `{RunFolder.RECORD}` has every setting; `{RunFolder.METRICS}` the whole training curve.", "",
    ]
    return "\n".join(lines + ([note, ""] if note else []))


def stopped_at(run: RunFolder, record: dict, step: int, path: Path) -> tuple[dict, list[dict]]:
    """The record and the logged lines of a run as they stood at checkpoint ``step`` (``path``), where it is shipped
    from: status "stopped", ``final`` measured now on the CPU from that checkpoint on the run's own
    held-out batch (a GPU run evaluated under bf16; a shipped model's numbers must be the CPU's), and
    the curve up to that step."""
    from analyses.base import held_out_batch

    from .checkpoint import load
    from .train import held_out_metrics

    lines = [line for line in run.logged_lines() if line["step"] <= step]
    model = load(path, device="cpu")
    s = record["train"]
    final = held_out_metrics(model.eval(), held_out_batch(model.task, s["eval_size"], s["seed"]))
    elapsed = lines[-1].get("elapsed_s", 0) if lines else 0
    record = dict(record, status="stopped", stopped_at=step, final=final, wall_time_s=elapsed,
                  final_measured_on="cpu")
    return record, lines


def ship(run_dir: Path, name: str | None = None, all_checkpoints: bool = False, preset: str = "cpu",
         note: str = "", dest_root: Path = PRETRAINED_DIR, at_step: int | None = None) -> Path:
    """Copy a finished run into ``dest_root/name`` with its model card; replaces an older copy whole.
    ``at_step``: ship a run that was stopped (or is still running) as it stood at that checkpoint."""
    run_dir = Path(run_dir)
    run = RunFolder(run_dir)
    if not run.record.exists():
        raise UserError(f"{run_dir} is not a run folder (no {RunFolder.RECORD})")
    record = run.read_record()
    saved = run.saved()
    if at_step is None and record.get("status") != "finished":
        raise UserError(f"{run_dir} has not finished training; finish it with `interp train --out {run_dir} "
                        f"--resume`, or ship it as it stood at one of its checkpoints with --at-step N")
    if at_step is not None and at_step not in [step for step, _ in saved]:
        raise UserError(f"{run_dir} has no checkpoint at step {at_step}; it has steps "
                        f"{', '.join(str(step) for step, _ in saved) or 'none'}")
    lines = None
    if at_step is not None:
        saved = [(step, path) for step, path in saved if step <= at_step]
        record, lines = stopped_at(run, record, at_step, saved[-1][1])
    checkpoints = [path for _, path in saved]
    checkpoints = checkpoints if all_checkpoints else checkpoints[-1:]
    name = name or run_dir.resolve().name
    dest, staging = dest_root / name, dest_root / f".{name}.tmp"
    shutil.rmtree(staging, ignore_errors=True)
    copy = RunFolder(staging)
    copy.checkpoints.mkdir(parents=True)
    for path in checkpoints:
        shutil.copy2(path, copy.checkpoints / path.name)
    if lines is None:
        shutil.copy2(run.record, copy.record)
        shutil.copy2(run.metrics, copy.metrics)
    else:
        copy.record.write_text(json.dumps(record, indent=2) + "\n")
        copy.metrics.write_text("".join(json.dumps(line) + "\n" for line in lines))  # as the trainer wrote them
    (staging / "README.md").write_text(model_card(name, record, preset, checkpoints, note))
    shutil.rmtree(dest, ignore_errors=True)
    staging.rename(dest)
    return dest


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Ship a finished run as a reference model (maintainers).")
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--name")
    parser.add_argument("--all-checkpoints", action="store_true")
    parser.add_argument("--preset", default="cpu")
    parser.add_argument("--note", default="")
    parser.add_argument("--at-step", type=int, help="ship a stopped run as it stood at this checkpoint")
    args = parser.parse_args()
    print(ship(args.run_dir, args.name, args.all_checkpoints, args.preset, args.note, at_step=args.at_step))
