"""The run/checkpoint format and loading a checkpoint back as a hooked model.

A checkpoint is one safetensors file whose header metadata carries, as JSON under ``interp``,
everything needed to rebuild the model: the task config, the architecture, the model config, the
seed and the training step. So a single file is a complete model, and nothing is ever unpickled.

A run folder's files (its record, its metrics log, its checkpoints and, while training may still be
resumed, its resume state: weights + optimizer) are ``interp.files.RunFolder``'s to name and find.
"""
from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load as load_bytes
from safetensors.torch import save as save_bytes

import models
import tasks
from tasks import ConfigError
from tasks.base import SEED_RANGE, is_seed

from .catalog import not_found
from .errors import UserError
from .files import RunFolder, atomic_write_bytes, checkpoint_name, sniff_weights

FORMAT_VERSION = 1


def pick_device(device: str | None) -> str:
    """A device torch can use: "auto" picks CUDA when present; unknown or absent devices are refused."""
    if device in (None, "auto"):
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        kind = torch.device(device).type
    except (RuntimeError, TypeError):
        raise UserError(f"unknown device {device!r}; use auto, cpu or cuda") from None
    if kind not in ("cpu", "cuda"):
        raise UserError(f"unknown device {device!r}; use auto, cpu or cuda")
    if kind == "cuda" and not torch.cuda.is_available():
        raise UserError("--device cuda was asked for, but no CUDA device is available")
    index = torch.device(device).index
    if kind == "cuda" and index is not None and index >= torch.cuda.device_count():
        raise UserError(f"--device {device}: this machine has {torch.cuda.device_count()} CUDA device(s), "
                        f"numbered from 0")
    return device


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
    return RunFolder(run_dir).saved()


def resolve(path: str | Path) -> Path:
    """A checkpoint file from a run folder (its last checkpoint) or a checkpoint file itself."""
    path = Path(path)
    if not path.exists():
        raise UserError(not_found(path) or f"checkpoint not found: {path}")
    if path.is_dir():
        latest = RunFolder(path).latest()
        if latest is None:
            raise UserError(f"{path} holds no {RunFolder.CHECKPOINTS}/{RunFolder.SERIES}; is it a run folder from "
                            f"`interp train`?")
        return latest
    return path


def read(path: str | Path, tensors: bool = True) -> tuple[dict, dict[str, torch.Tensor]]:
    """The metadata (checked by ``validate_meta``) and tensors of one checkpoint file, after checking it
    is really safetensors. ``tensors=False`` reads the header only (and returns no tensors)."""
    path = Path(path)
    sniff_weights(path)
    try:
        if tensors:
            data = path.read_bytes()
            loaded = load_bytes(data)
        else:
            with open(path, "rb") as handle:
                data = handle.read(8)
                data += handle.read(int.from_bytes(data, "little"))
            loaded = {}
        header_len = int.from_bytes(data[:8], "little")
        header = json.loads(data[8:8 + header_len])
    except (SafetensorError, ValueError, OSError, RecursionError, MemoryError) as err:
        raise UserError(f"{path} is not a readable safetensors checkpoint ({err})") from None
    raw = header.get("__metadata__", {}).get("interp") if isinstance(header, dict) else None
    if not isinstance(raw, str):
        raise UserError(f"{path} is a safetensors file without interp metadata; it was not written by `interp train`")
    try:
        meta = json.loads(raw)
    except (ValueError, RecursionError):
        raise UserError(f"{path} has malformed interp metadata (not JSON)") from None
    return validate_meta(meta, path), loaded


def validate_meta(meta, where) -> dict:
    """``meta`` if it has the shape ``describe`` writes (the task and model configs themselves are
    checked by their own classes when the model is built), else a UserError naming ``where``."""
    if not isinstance(meta, dict):
        raise UserError(f"{where} has malformed interp metadata (a JSON object is expected)")
    missing = [k for k in ("task", "arch", "model", "step") if k not in meta]
    if missing:
        raise UserError(f"{where} has incomplete interp metadata (missing {', '.join(missing)})")
    counts = lambda v, top: isinstance(v, int) and not isinstance(v, bool) and 0 <= v < top  # noqa: E731
    problem = ("task is not a config object with a name" if not isinstance(meta["task"], dict)
               or not isinstance(meta["task"].get("name"), str) else
               "arch is not a name" if not isinstance(meta["arch"], str) else
               "model is not a config object" if not isinstance(meta["model"], dict) else
               f"step must be a non-negative integer, got {meta['step']!r}" if not counts(meta["step"], 2 ** 63) else
               f"seed must be {SEED_RANGE}, got {meta.get('seed')!r}" if not is_seed(meta.get("seed", 0)) else
               f"elapsed_s must be a non-negative number, got {meta.get('elapsed_s')!r}"
               if not (isinstance(meta.get("elapsed_s", 0.0), (int, float)) and 0 <= meta.get("elapsed_s", 0.0) < math.inf)
               else None)
    if problem:
        raise UserError(f"{where} has invalid interp metadata ({problem})")
    return meta


def check_weights(model, weights: dict[str, torch.Tensor], where) -> None:
    """The tensors of a file against the model its metadata describes (built on the meta device, so
    no memory is spent on a model the file cannot fill): same names and shapes, and finite parameters
    (buffers such as an attention mask's -inf are what they are)."""
    expected = model.state_dict()
    mismatched = [k for k in expected if k in weights and weights[k].shape != expected[k].shape]
    missing = [k for k in expected if k not in weights]
    unexpected = [k for k in weights if k not in expected]
    if mismatched or missing or unexpected:
        detail = (f"shape of {mismatched[0]} is {tuple(weights[mismatched[0]].shape)}, config says "
                  f"{tuple(expected[mismatched[0]].shape)}" if mismatched else
                  f"missing {missing[0]}" if missing else f"unexpected {unexpected[0]}")
        raise UserError(f"{where}: weights do not match the config in its metadata ({detail})")
    # A parameter stored as integers (or booleans) would be cast to float on load and scored as if it
    # were a model: weights are floating point, or the file is not a model's.
    integral = next((k for k, _ in model.named_parameters() if not weights[k].is_floating_point()), None)
    if integral:
        raise UserError(f"{where}: tensor {integral} is {str(weights[integral].dtype).removeprefix('torch.')}; "
                        f"a model's weights are floating point, so these are not a trained model's")
    broken = next((k for k, _ in model.named_parameters() if not torch.isfinite(weights[k]).all()), None)
    if broken:
        raise UserError(f"{where}: tensor {broken} holds NaN or infinite values; the weights are broken (did training diverge?)")


def build_from_meta(meta: dict, where: Path, weights: dict[str, torch.Tensor] | None = None):
    """The model ``meta`` describes. With ``weights``: built on the meta device (shapes only, no memory, no random
    initialisation that the weights would overwrite), checked against them, then given them as they are, so a loaded
    model holds exactly the file's numbers; without, freshly initialised from its seed."""
    try:
        task = tasks.from_config(meta["task"])
        build = lambda: models.build(meta["arch"], task, config=meta["model"], seed=meta.get("seed", 0))  # noqa: E731
        if weights is None:
            return build()
        with models.on_meta():
            skeleton = build()
    except (ConfigError, TypeError, ValueError) as err:
        raise UserError(f"{where}: invalid config: {err}") from None
    check_weights(skeleton, weights, where)
    expected = skeleton.state_dict()
    skeleton.load_state_dict({k: w.to(expected[k].dtype) for k, w in weights.items()}, assign=True)
    if any(t.is_meta for t in tensors_of(skeleton)):  # something the file does not hold: build it for real
        model = build()
        model.load_state_dict(weights)
        return model
    return skeleton


def tensors_of(model):
    """Every tensor a model holds: its parameters and buffers (persistent or not) and plain tensor attributes."""
    for module in model.modules():
        yield from (v for v in vars(module).values() if isinstance(v, torch.Tensor))
        yield from (t for t in module._parameters.values() if t is not None)
        yield from (t for t in module._buffers.values() if t is not None)


def checkpoint_digest(file: Path) -> str:
    """The checkpoint's content hash: a result is reused only for the very weights it was computed on
    (a run retrained in place, or a re-shipped model, keeps its checkpoint's path and step)."""
    with open(file, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


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
    run = RunFolder.of_checkpoint(file)
    named = RunFolder.step_named(file) if run is not None else None
    if named is not None and named != meta["step"]:
        # The name is what orders a run's series (frame-precision's x axis, the explorer's slider, the last
        # checkpoint); the metadata is what the weights are. When they disagree neither can be trusted.
        raise UserError(f"{file} is named step {named}, but its metadata says step {meta['step']}; "
                        f"rename it to {checkpoint_name(meta['step'])} or move it out of the run")
    weights = {k: v for k, v in tensors.items() if not k.startswith("optim.")}
    model = build_from_meta(meta, file, weights)
    model.eval()
    model.provenance = models.Provenance(seed=meta.get("seed", 0), step=meta["step"], path=file,
                                         run_dir=run.root if run else None, checkpoints=tuple(run.saved()) if run else (),
                                         loader=load, budget=budget(run, meta["step"]))
    if device:
        model.to(pick_device(device))
    return model


def budget(run: RunFolder | None, step: int) -> dict | None:
    """What a checkpoint at ``step`` of ``run`` was trained on (``analyses.budget.training_budget`` of the run's
    record); None for a checkpoint file on its own. For a run started from another checkpoint whose record is from
    before the start's tokens were counted, that checkpoint's own run is asked (it may have had a start too)."""
    from analyses.budget import training_budget

    record = run.record_if_readable() if run is not None else None
    init = record.get("init") if record else None
    start = None
    if isinstance(init, dict) and init.get("tokens") is None and isinstance(init.get("path"), str):
        start = budget(RunFolder.of_checkpoint(init["path"]), init.get("step") or 0)
    return training_budget(record, step, start)

