"""Reference models shipped in ``models/pretrained/``, addressable by folder name."""
from __future__ import annotations

import json
from pathlib import Path

PRETRAINED_DIR = Path(__file__).resolve().parent.parent / "models" / "pretrained"


def shipped() -> dict[str, Path]:
    """Name -> run folder of every shipped reference model."""
    if not PRETRAINED_DIR.is_dir():
        return {}
    return {p.name: p for p in sorted(PRETRAINED_DIR.iterdir()) if (p / "run.json").exists()}


def locate(path) -> Path:
    """``path`` itself if it exists, else the shipped model of that name, else ``path`` (to fail later)."""
    candidate = Path(path)
    if candidate.exists():
        return candidate
    return shipped().get(str(path), candidate)


def summary(run_dir: Path) -> dict:
    record = json.loads((run_dir / "run.json").read_text())
    return dict(task=record["task"]["name"], arch=record["arch"], n_params=record.get("n_params"),
                entropy_mae_bits=(record.get("final") or {}).get("entropy_mae_bits"))
