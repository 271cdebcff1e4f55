"""What the CLI says without importing torch: ``interp list``, ``interp run --help``, each analysis's
``--help`` and which shipped models it applies to.

All of it is a function of the plugin files (tasks/, models/, analyses/, interp/) and the shipped
runs, and building it imports torch and TransformerLens and builds every model (about 30 s). So it is
built once and kept, keyed by a fingerprint of those files' contents: the copy shipped beside this
module (``manifest.json``, current for the files as committed: a test checks it) answers a fresh
clone at once; any local change (a new plugin, an edited option) misses it, and the listing is
rebuilt from the registries and kept in the user's cache folder. A stale answer is impossible: a
manifest is used only when its fingerprint equals the files' own.

Regenerate the shipped copy with ``python -m interp.manifest`` after changing a plugin or a shipped run.
"""
from __future__ import annotations

import hashlib
import json
import os
import textwrap
from pathlib import Path

from ground.terminal import MODEL_SOURCES

from .errors import UserError
from .files import RunFolder

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = Path(__file__).resolve().parent / "manifest.json"
PACKAGES = ("tasks", "models", "analyses", "interp")
LIST_HEAD = "tasks (defaults):"


def fingerprint() -> str:
    """sha256 over every source and shipped-run file the listing depends on (contents; weights by name
    and size). Reads ~150 small files: a few milliseconds."""
    state = hashlib.sha256()
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*")):
            if not path.is_file() or path == SHIPPED or "__pycache__" in path.parts:
                continue
            rel = path.relative_to(ROOT).as_posix()
            if path.suffix in (".py", ".json", ".txt", ".cpp"):
                state.update(f"{rel}\0".encode() + hashlib.sha256(path.read_bytes()).digest())
            elif path.suffix == ".safetensors":
                state.update(f"{rel}\0{path.stat().st_size}".encode())
    return state.hexdigest()[:24]


def cache_base() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or (Path.home() / ".cache"))


def user_cache(fp: str) -> Path:
    return cache_base() / "interp" / f"manifest-{fp}.json"


def _read(path: Path, fp: str) -> dict | None:
    """The manifest in ``path`` if it is one for ``fp``; None when absent, cut short, binary or for other
    files (then it is rebuilt, never trusted). Something other than a regular file there (a folder, a
    link, a pipe) raises the UserError of interp.files, which says so."""
    from .files import read_regular

    try:
        data = json.loads(read_regular(path).decode())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return None
    return data if isinstance(data, dict) and data.get("fingerprint") == fp and "list" in data else None


def current(build_if_missing: bool = True) -> dict | None:
    """The manifest of the files as they are: the shipped copy, the user's cached one, or (when
    ``build_if_missing``) a new one, built and kept in the user's cache. A cache path that is not a
    regular file is left alone, said in one warning line, and the manifest built without it."""
    import click

    fp = fingerprint()
    try:
        found = _read(SHIPPED, fp)
    except UserError:
        found = None
    if found is not None:
        return found
    cache, writable = user_cache(fp), True
    try:
        found = _read(cache, fp)
    except UserError as err:
        click.echo(f"interp: warning: the listing is not cached: {err}", err=True)
        writable = False
    if found is not None or not build_if_missing:
        return found
    data = build(fp)
    if writable:
        try:
            from .files import atomic_write_json

            atomic_write_json(cache, data, cache_base())  # no link below the cache's base, e.g. at interp/
        except (OSError, UserError):  # a read-only home is no reason to fail a listing
            pass
    return data


def build(fp: str | None = None) -> dict:
    """Everything the fast CLI paths print, from the registries (imports torch; builds every model once)."""
    import analyses
    import models
    import tasks

    from .catalog import shipped, summary
    from .checkpoint import load
    from .recipe import PRESETS

    loaded = {name: load(path) for name, path in shipped().items()}
    applies = {name: {model: (analysis.unmet(m) or [None])[0] for model, m in loaded.items()}
               for name, analysis in analyses.REGISTRY.items()}

    lines = [LIST_HEAD]
    lines += [f"  {name:<22} {tasks.make(name)!r}" for name in tasks.NAMES]
    lines.append(f"architectures (parameters of each preset on each task's defaults; presets: {', '.join(PRESETS)}):")
    for arch in models.ARCHS:
        for name in tasks.NAMES:
            task = tasks.make(name)
            counts = ", ".join(f"{p}={models.count_params(arch, task, models.model_config(arch, p, task)):,}"
                               for p in models.presets(arch))
            lines.append(f"  {arch:<12} {name:<11} {counts}")
    lines.append("analyses (what each measures; the shipped models it applies to; `interp run NAME --help` for options):")
    for name, analysis in analyses.REGISTRY.items():
        lines.append(f"  {name:<24} {analysis.summary}")
        lines.append(f"  {'':<24} {applies_to(applies[name], analysis.on_language_model is not None)}")
    # which numbers these are: the run's own last evaluation, not the paper's metrics of `interp reproduce`
    import textwrap

    lines += textwrap.wrap("shipped models (eval: each run's last held-out evaluation while training, on the task as it "
                           f"was trained ({RunFolder.RECORD}): calibration's entropy_mae_bits and, where the task is "
                           "judged by it, its sampled accuracy; not the metrics of `interp reproduce`: recall's runs "
                           "train on tables of 1-64 pairs, its table reads content-addressing's accuracy_full_table on "
                           "full 64-pair tables):", 110, subsequent_indent="    ", break_on_hyphens=False)
    for name, path in shipped().items():
        info = summary(path)
        mae = f"{info['entropy_mae_bits']:.4f} bits" if info["entropy_mae_bits"] is not None else "n/a"
        primitive = getattr(tasks.REGISTRY.get(info["task"]), "primitive", None)
        judged_by_accuracy = primitive is not None and primitive.metric == "accuracy" and info["accuracy"] is not None
        accuracy = f", eval accuracy {info['accuracy']:.1%}" if judged_by_accuracy else ""
        series = f", {info['n_checkpoints']} checkpoints" if info["n_checkpoints"] > 1 else ""
        stopped = f" (stopped; {info['planned']:,} planned)" if info["stopped"] else ""
        lines.append(f"  {name:<30} {info['task'] + '/' + info['arch']:<22} {info['n_params']:>8,} params, "
                     f"eval MAE {mae}{accuracy}; {info['steps']:,} steps{stopped} in {info['minutes']:.0f} min{series}")
    if not shipped():
        lines.append("  (none)")
    return dict(fingerprint=fp or fingerprint(), list="".join(line + "\n" for line in lines),
                analyses={name: dict(summary=a.summary, help=analysis_help(a), shipped=applies[name])
                          for name, a in analyses.REGISTRY.items()})


def analysis_help(analysis) -> str:
    """``interp run NAME --help``, from the analysis's declaration."""
    width = max([len(o.flag) for o in analysis.options] + [8])
    source = "--model MODEL" if analysis.run is None else f"--ckpt CKPT{' [--ckpt CKPT ...]' if analysis.multi_model else ''}"
    lines = [f"Usage: interp run {analysis.name} {source} "
             f"[--out DIR] [--format pdf,html,json] [--device cpu] [OPTIONS]", "",
             f"  {analysis.summary}.", ""]
    if analysis.requires:
        lines += [f"  Requires: {', '.join(analysis.requires)}.", ""]
    if analysis.run is not None:
        lines += ["Options:"] + [f"  {o.flag:<{width}}  {o.describe()}" for o in analysis.options]
        lines += ["", "Definition:", *textwrap.wrap(analysis.definition, 100, initial_indent="  ",
                                                     subsequent_indent="  ")]
    if analysis.on_language_model is not None:
        width = max([len(o.flag) for o in analysis.language_options] + [8])
        lines += ["", f"On a language model: interp run {analysis.name} --model MODEL [OPTIONS], MODEL {MODEL_SOURCES}.",
                  "Options:"]
        lines += [f"  {o.flag:<{width}}  {o.describe()}" for o in analysis.language_options]
        if analysis.language_definition != analysis.definition or analysis.run is not None:
            lines += ["", "Definition on a language model:", *textwrap.wrap(
                analysis.language_definition, 100, initial_indent="  ", subsequent_indent="  ")]
    return "\n".join(lines)


def applies_to(reasons: dict[str, str | None], language: bool) -> str:
    """'shipped: all 17' / 'shipped: a, b' / 'shipped: none', and whether language models take it."""
    fits = [model for model, why in reasons.items() if why is None]
    shown = (f"all {len(fits)}" if fits and len(fits) == len(reasons) else ", ".join(fits) or "none")
    return f"-> shipped: {shown}" + ("; also --model (language models)" if language else "")


def unknown_analysis(name: str, names) -> str:
    """"unknown analysis 'head-ablaton'; did you mean head-ablation? ..." with every name, sorted."""
    import difflib

    close = difflib.get_close_matches(name, list(names), n=3, cutoff=0.6)
    guess = f" (did you mean {' or '.join(close)}?)" if close else ""
    return f"unknown analysis {name!r}{guess}; valid analyses: {', '.join(sorted(names))}"


def refusal(known: dict, analysis: str, ckpt: str) -> str | None:
    """Why ``analysis`` cannot run on the shipped model ``ckpt``, from the manifest ``known``, without
    loading anything; None when it can, or when the manifest does not say (the real check then runs)."""
    why = known["analyses"].get(analysis, {}).get("shipped", {}).get(ckpt)
    return f"{analysis} {why}" if why else None


if __name__ == "__main__":
    from .files import atomic_write_text

    data = build()
    atomic_write_text(SHIPPED, json.dumps(data, indent=1, sort_keys=True) + "\n")
    print(f"wrote {SHIPPED.relative_to(ROOT)} ({len(data['analyses'])} analyses, fingerprint {data['fingerprint']})")
