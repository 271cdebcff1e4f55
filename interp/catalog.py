"""The shipped reference models in ``models/pretrained/``, addressable by folder name.

Only the index (names, paths, the summary of each one's run record): it imports nothing heavy, so the
checkpoint loader and ``interp list`` can ask what is shipped. Shipping a run is interp.pretrained.
"""
from __future__ import annotations

from pathlib import Path

from .files import RunFolder

PRETRAINED_DIR = Path(__file__).resolve().parent.parent / "models" / "pretrained"


def shipped() -> dict[str, Path]:
    """Name -> run folder of every shipped reference model."""
    if not PRETRAINED_DIR.is_dir():
        return {}
    return {p.name: p for p in sorted(PRETRAINED_DIR.iterdir()) if RunFolder(p).record.exists()}


def locate(path) -> Path:
    """``path`` itself if it exists, else the shipped model of that name, else ``path`` (to fail later)."""
    candidate = Path(path)
    if candidate.exists():
        return candidate
    return shipped().get(str(path), candidate)


def not_found(path) -> str | None:
    """Why ``path`` names no checkpoint (with the shipped model it was probably meant to be), or None when it
    exists or is a shipped name. Reads folder names only, so a typo is answered before torch loads."""
    if Path(path).exists() or str(path) in shipped():
        return None
    import difflib

    names = list(shipped())
    close = difflib.get_close_matches(Path(path).name, names, n=3, cutoff=0.75)
    guess = f"; did you mean {' or '.join(close)}?" if close else ""
    return (f"checkpoint not found: {path}{guess} (pass a run folder, a .safetensors file or a shipped model: "
            f"{', '.join(names) or 'none'})")


def summary(run_dir: Path) -> dict:
    run = RunFolder(run_dir)
    record = run.read_record()
    final = record.get("final") or {}
    return dict(task=record["task"]["name"], arch=record["arch"], n_params=record.get("n_params"),
                entropy_mae_bits=final.get("entropy_mae_bits"), accuracy=final.get("accuracy"),
                # a run shipped as it stood at a checkpoint (``--at-step``) trained that many of its planned steps
                steps=record.get("stopped_at") or (record.get("train") or {}).get("steps"),
                planned=(record.get("train") or {}).get("steps"), stopped=record.get("status") == "stopped",
                minutes=record.get("wall_time_s", 0) / 60,
                n_checkpoints=len(run.saved()))
