"""Where results live: one module names their folders, records where each came from, writes them
and reads them back.

    folder = results.output_folder(Path("figures"), "bijection-transformer-cpu", source)
    results.write(result, folder, ("pdf", "json"), results.provenance(checkpoint_file, run=...))
    saved = results.reusable(folder, "calibration", checkpoint_file)   # None unless computed on these weights

A result's JSON (``analyses.base.Result.record``) is the record: the analysis, where it came from
(``provenance``: the checkpoint and its SHA-256, the ``interp`` command when one made it, the
package versions) and the numbers.
It is written last, so a JSON on disk means every file of the result was written. ``interp run``,
``interp reproduce`` and ``interp sweep`` write through here; ``compare`` reads sweeps back with
``analyses.base.read_result``, the reader of the same format.
"""
from __future__ import annotations

import hashlib
import os
import shlex
import sys
from pathlib import Path

import click

from analyses.base import read_result

from .checkpoint import checkpoint_digest
from .errors import UserError
from .export import write_result
from .files import RunFolder, atomic_write_text, read_regular

SOURCE_MARK = ".interp-source"  # in each output folder: which checkpoint(s) its results are of


def run_label(source: Path, file: Path) -> str:
    """The run folder's name, with the step appended when one particular checkpoint was chosen."""
    if source.is_dir():
        return source.resolve().name
    if (run := RunFolder.of_checkpoint(file)) is not None:
        return f"{run.root.resolve().name}-{file.stem}"
    return file.stem


def output_folder(out: Path, run_name: str, source: str) -> Path:
    """``out/run_name``, unless it holds the results of another checkpoint: then ``out/run_name-HASH`` (HASH
    of this source's path), so two runs that share a folder name never overwrite each other. A folder
    without a mark (written before marks existed) is taken as it is."""
    folder = out / run_name
    mark = folder / SOURCE_MARK
    try:  # never through a link, nor from a pipe: such a mark is no mark (and ``claim`` says so)
        held = read_regular(mark).decode() if os.path.lexists(mark) else None
    except (OSError, UnicodeDecodeError, UserError):
        held = None
    if held is None or held == source:
        return folder
    other = out / f"{run_name}-{hashlib.sha256(source.encode()).hexdigest()[:8]}"
    click.echo(f"note: {folder} holds the results of {held.splitlines()[0]}; writing to {other}", err=True)
    return other


def claim(folder: Path, source: str, root: Path | None = None) -> None:
    """Mark ``folder`` as holding the results of ``source`` (after they are written; no level below ``root``,
    the folder the user named, may be a link)."""
    try:
        atomic_write_text(folder / SOURCE_MARK, source, root)
    except OSError:  # the results are written; a folder that takes no mark is only unprotected
        pass
    except UserError as err:  # e.g. a link planted at the mark: never written through, and said
        click.echo(f"interp: warning: the results are written, but their folder is not marked: {err}", err=True)


def provenance(checkpoint: Path | None = None, **context) -> dict:
    """Where a result comes from, for its JSON: ``context`` (run, task, options, ...), the checkpoint
    and its SHA-256 (when there is one), the command that made it and the package versions."""
    from .train import versions

    where = dict(context)
    if checkpoint is not None:
        where.update(checkpoint=str(checkpoint), checkpoint_sha256=checkpoint_digest(Path(checkpoint)))
    return where | dict(command=command_line(), versions=versions())


def command_line() -> str | None:
    """The ``interp ...`` command this process runs (as ``interp`` or ``python -m interp``); None when the
    result is made from Python (a notebook, a script, a test), where no command line made it."""
    program = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    if program is None or not (program.name == "interp" or program.parts[-2:] == ("interp", "__main__.py")):
        return None
    return shlex.join(["interp", *sys.argv[1:]])


def write(result, folder: Path, formats, context: dict, source: str | None = None, root: Path | None = None
          ) -> list[Path]:
    """Write ``result`` into ``folder`` in ``formats`` (its JSON last, with ``context``); mark the folder
    as ``source``'s when given. The paths written. HTML pages load plotly.js from ``root``, the output
    root (default: the folder above ``folder``, as ``output_folder`` names them): one copy for all the
    models' folders there."""
    root = folder.parent if root is None else root
    paths = write_result(result, folder, formats, context, bundle_dir=root)
    if source is not None:
        claim(folder, source, root)
    return paths


def complete(folder: Path, name: str, saved: dict) -> bool:
    """Whether every file of a saved result is there: its JSON lists its figures, and the PDF and each
    figure's PNG must exist as non-empty regular files (a rerun after a full disk recomputes a result
    whose figures were never written, instead of linking to missing files)."""
    figures = saved.get("figures")
    if not isinstance(figures, list) or not all(isinstance(f, str) for f in figures):
        return False
    wanted = [f"{name}.pdf"] + [f"{name}-{figure}.png" for figure in figures]
    return all((folder / file).is_file() and not (folder / file).is_symlink() and (folder / file).stat().st_size
               for file in wanted)


def reusable(folder: Path, name: str, checkpoint: Path) -> dict | None:
    """The saved result ``name`` in ``folder`` if it was computed on exactly these weights and every
    file of it is there; else None (a corrupt or partial one is computed again)."""
    path = folder / f"{name}.json"
    if not path.exists():
        return None
    try:
        saved = read_result(path, name)
    except ValueError:
        return None
    same = saved.get("checkpoint") == str(checkpoint) and saved.get("checkpoint_sha256") == checkpoint_digest(checkpoint)
    return saved if same and complete(folder, name, saved) else None


def read(path: Path, analysis: str | None = None) -> dict:
    """A result's JSON, checked to be one (of ``analysis`` when given); a UserError says what it is not."""
    try:
        return read_result(Path(path), analysis)
    except ValueError as err:
        raise UserError(str(err)) from None


def headline(metrics: dict) -> list[tuple[str, float]]:
    """The scalar numbers of a result (one level of nesting flattened), without counts and seeds."""
    flat = []
    for key, value in metrics.items():
        items = value.items() if isinstance(value, dict) else [(None, value)]
        for sub, v in items:
            name = key if sub is None else f"{key}.{sub}"
            if isinstance(v, (int, float)) and not isinstance(v, bool) and not (
                    name.split(".")[-1].startswith("n_") or name.endswith("seed")):
                flat.append((name, v))
    return flat


__all__ = ["SOURCE_MARK", "checkpoint_digest", "claim", "command_line", "complete", "headline", "output_folder",
           "provenance", "read", "reusable", "run_label", "write"]
