"""Atomic file output and safe reading of weight files.

Every file the toolkit writes goes to a temporary file in the same folder, is fsynced, and is then
renamed over the target, so a crash or a full disk never leaves a half-written file behind, and an
existing file is only replaced by a complete new one.
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from .errors import UserError


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as err:
        blocker = next((p for p in (path.parent, *path.parent.parents) if p.exists() and not p.is_dir()), None)
        reason = f"{blocker} is a file, not a folder" if blocker else err.strerror or str(err)
        raise UserError(f"cannot write to {path.parent}: {reason}; choose another folder with --out") from None
    try:
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600 files; give the usual permissions
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except OSError as err:
        Path(tmp).unlink(missing_ok=True)
        raise UserError(f"could not write {path}: {err.strerror or err}; it was left as it was "
                        f"(free some space, or write elsewhere with --out)") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def remove_stale_temps(folder: str | Path) -> None:
    """Delete the temp files of writes a crash cut short (only call when nothing writes there)."""
    for temp in Path(folder).glob(".*.tmp"):
        temp.unlink(missing_ok=True)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_text(path: str | Path, text: str) -> Path:
    return atomic_write_bytes(path, text.encode())


def atomic_write_json(path: str | Path, obj) -> Path:
    return atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False) + "\n")


def sniff_weights(path: Path) -> None:
    """Refuse anything that is not a safetensors file, before any byte of it is deserialised.

    A safetensors file starts with an 8-byte little-endian header length followed by a JSON
    object. Pickles start with the protocol opcode 0x80; torch ``.pt`` files are zip archives.
    """
    if not path.exists():
        raise UserError(f"checkpoint not found: {path}")
    if path.is_dir():
        raise UserError(f"{path} is a folder without checkpoints; pass a run folder or a .safetensors file")
    try:
        with open(path, "rb") as handle:
            head = handle.read(9)
            size = path.stat().st_size
    except OSError as err:
        raise UserError(f"cannot read checkpoint {path}: {err.strerror or err}") from None
    header_len = int.from_bytes(head[:8], "little")
    if len(head) == 9 and head[8:9] == b"{" and header_len + 8 <= size:
        return  # a safetensors header; safetensors itself never unpickles, so this is safe to parse
    # Checked only after the header test: a safetensors header length can itself begin with 0x80
    # (any length = 128 mod 256) or spell "PK".
    if head[:2] == b"PK" or head[:1] == b"\x80" or path.suffix in (".pt", ".pth", ".pkl", ".pickle", ".bin"):
        raise UserError(f"{path} looks like a pickle/torch.save file; pickles can run arbitrary code when "
                        f"loaded, so only .safetensors checkpoints are accepted (re-save with safetensors)")
    if len(head) < 9:
        raise UserError(f"{path} is empty or truncated; it is not a safetensors checkpoint")
    raise UserError(f"{path} is not a valid safetensors file (corrupt or truncated header)")
