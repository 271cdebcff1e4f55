"""The run/checkpoint format and loading a checkpoint back as a hooked model.

A checkpoint is one safetensors file whose header metadata carries, as JSON under ``interp``,
everything needed to rebuild the model: the task config, the architecture, the model config, the
seed and the training step. So a single file is a complete model, and nothing is ever unpickled.

A run folder holds ``run.json``, ``metrics.jsonl``, ``checkpoints/step-XXXXXXXX.safetensors`` and,
while training may still be resumed, ``resume.safetensors`` (weights + optimizer state).
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load as load_bytes
from safetensors.torch import save as save_bytes

import models
import tasks
from tasks import ConfigError

from .catalog import shipped
from .errors import UserError
from .files import atomic_write_bytes, sniff_weights

FORMAT_VERSION = 1
STEP_FILE = re.compile(r"step-(\d{8})\.safetensors$")


def pick_device(device: str | None) -> str:
    """A device torch can use: "auto" picks CUDA when present; unknown or absent devices are refused."""
    if device in (None, "auto"):
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        kind = torch.device(device).type
    except (RuntimeError, TypeError):
        raise UserError(f"unknown device {device!r}; use auto, cpu or cuda") from None
    if kind == "cuda" and not torch.cuda.is_available():
        raise UserError("--device cuda was asked for, but no CUDA device is available")
    return device


def checkpoint_name(step: int) -> str:
    return f"step-{step:08d}.safetensors"


def describe(model, step: int, seed: int) -> dict:
    return dict(format=FORMAT_VERSION, task=model.task.config(), arch=model.arch,
                model=model.config.to_dict(), seed=seed, step=step)


def save(path: str | Path, model, step: int, seed: int, extra: dict[str, torch.Tensor] | None = None,
         extra_meta: dict | None = None) -> Path:
    """Write the model's weights (and optional extra tensors, e.g. optimizer state) atomically."""
    tensors = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    tensors.update(extra or {})
    meta = describe(model, step, seed) | (extra_meta or {})
    return atomic_write_bytes(path, save_bytes(tensors, metadata={"interp": json.dumps(meta)}))


def list_checkpoints(run_dir: str | Path) -> list[tuple[int, Path]]:
    """(step, path) of every checkpoint of a run, in step order."""
    folder = Path(run_dir) / "checkpoints"
    found = [(int(m.group(1)), p) for p in folder.glob("step-*.safetensors") if (m := STEP_FILE.search(p.name))]
    return sorted(found)


def resolve(path: str | Path) -> Path:
    """A checkpoint file from a run folder (its last checkpoint) or a checkpoint file itself."""
    path = Path(path)
    if not path.exists():
        names = ", ".join(shipped()) or "none"
        raise UserError(f"checkpoint not found: {path} (pass a run folder, a .safetensors file or a shipped "
                        f"model: {names})")
    if path.is_dir():
        found = list_checkpoints(path)
        if not found:
            raise UserError(f"{path} holds no checkpoints/step-*.safetensors; is it a run folder from `interp train`?")
        return found[-1][1]
    return path


def read(path: str | Path) -> tuple[dict, dict[str, torch.Tensor]]:
    """The metadata and tensors of one checkpoint file, after checking it is really safetensors."""
    path = Path(path)
    sniff_weights(path)
    try:
        data = path.read_bytes()
        tensors = load_bytes(data)
        header_len = int.from_bytes(data[:8], "little")
        header = json.loads(data[8:8 + header_len])
    except (SafetensorError, ValueError, OSError) as err:
        raise UserError(f"{path} is not a readable safetensors checkpoint ({err})") from None
    raw = header.get("__metadata__", {}).get("interp")
    if raw is None:
        raise UserError(f"{path} is a safetensors file without interp metadata; it was not written by `interp train`")
    try:
        meta = json.loads(raw)
    except json.JSONDecodeError:
        raise UserError(f"{path} has malformed interp metadata (not JSON)") from None
    missing = [k for k in ("task", "arch", "model", "step") if k not in meta]
    if missing or not isinstance(meta.get("task"), dict) or not isinstance(meta.get("model"), dict):
        raise UserError(f"{path} has incomplete interp metadata (missing {', '.join(missing) or 'task/model dicts'})")
    return meta, tensors


def build_from_meta(meta: dict, where: Path):
    try:
        task = tasks.from_config(meta["task"])
        return models.build(meta["arch"], task, config=meta["model"], seed=int(meta.get("seed", 0)))
    except (ConfigError, TypeError) as err:
        raise UserError(f"{where}: invalid config: {err}") from None


def load(path: str | Path, task: str | None = None, device: str | None = None):
    """Load a run folder (its last checkpoint) or one checkpoint file as a hooked model.

    The model carries ``.task`` and ``.provenance`` (seed, step, checkpoint file, run folder and the
    run's checkpoint series, which ``.seed``, ``.step``, ``.checkpoint_path`` and ``.run_dir`` read).
    Pass ``task`` to insist on a task name (a checkpoint of another task is refused).
    """
    file = resolve(path)
    meta, tensors = read(file)
    if task is not None and meta["task"].get("name") != task:
        raise UserError(f"{file} is a {meta['task'].get('name')!r} checkpoint, but this needs a {task!r} one")
    model = build_from_meta(meta, file)
    weights = {k: v for k, v in tensors.items() if not k.startswith("optim.")}
    expected = model.state_dict()
    mismatched = [k for k in expected if k in weights and weights[k].shape != expected[k].shape]
    missing = [k for k in expected if k not in weights]
    unexpected = [k for k in weights if k not in expected]
    if mismatched or missing or unexpected:
        detail = (f"shape of {mismatched[0]} is {tuple(weights[mismatched[0]].shape)}, config says "
                  f"{tuple(expected[mismatched[0]].shape)}" if mismatched else
                  f"missing {missing[0]}" if missing else f"unexpected {unexpected[0]}")
        raise UserError(f"{file}: weights do not match the config in its metadata ({detail})")
    model.load_state_dict(weights)
    model.eval()
    run_dir = file.parent.parent if file.parent.name == "checkpoints" else None
    series = tuple(list_checkpoints(run_dir)) if run_dir is not None else ()
    model.provenance = models.Provenance(seed=int(meta.get("seed", 0)), step=int(meta["step"]), path=file,
                                         run_dir=run_dir, checkpoints=series, loader=load)
    if device:
        model.to(pick_device(device))
    return model
