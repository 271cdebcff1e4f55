"""``interp reproduce``: train every task x architecture reference model, run the diagnostics, and
write the paper's table with our numbers beside it.

The plan is a list of steps (train a run, run one analysis on it). Every step is skipped when its
output is already there and current: a finished run is reused, an interrupted one resumes from its
last resume state, and an analysis whose JSON was written for the run's final checkpoint is read
back instead of recomputed. So an interrupted ``interp reproduce`` picks up where it stopped.
"""
from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass
from pathlib import Path

from tqdm.auto import tqdm

import analyses
import models
import tasks

from . import results
from .checkpoint import load, pick_device, resolve
from .errors import UserError
from .files import RunFolder, atomic_write_json, atomic_write_text, check_writes
from .recipe import Recipe, record_problem
from .recipe import resolve as resolve_recipe
from .train import finish


@dataclass(frozen=True)
class Row:
    """One line of the table: a task's ``PaperRow`` for one architecture."""

    task: str
    arch: str
    row: tasks.PaperRow

    def __getattr__(self, name):  # experiment, analysis, metric, paper, paper_text, claim, options
        return getattr(self.row, name)


# Training settings that change what a run records about itself, never its weights (which checkpoints it kept, and
# how often and on how many held-out sequences it measured itself): a run that differs in them is the preset's.
MEASUREMENT_ONLY = ("checkpoint_every", "eval_every", "eval_size", "resume_every")


def paper_tasks() -> tuple[str, ...]:
    """The tasks with rows in the paper's table, what ``interp reproduce`` measures by default (a process such
    as Mess3 has none, and its shipped models were trained on their own search's rate, not the preset's)."""
    return tuple(name for name in tasks.NAMES if tasks.REGISTRY[name].paper_rows)


def rows(only: tuple[str, ...], archs: tuple[str, ...]) -> list[Row]:
    """The paper's table (each task's ``paper_rows``, in task order) for the cells reproduced; a row
    for every architecture (``arch`` None) is repeated once per architecture."""
    return [Row(task, arch, row) for task in only for row in tasks.REGISTRY[task].paper_rows
            for arch in (archs if row.arch is None else (row.arch,)) if arch in archs]


def analysis_options(task: str, arch: str, analysis: str) -> dict:
    """The options the table's rows give ``analysis`` on this cell (rows of one analysis agree)."""
    return next((r.options for r in rows((task,), (arch,)) if r.analysis == analysis), {})


def plan(only: tuple[str, ...], archs: tuple[str, ...]) -> list[tuple]:
    """The steps in order: ("train", task, arch) then ("analyse", task, arch, analysis) for its rows
    (calibration first; a cell without rows gets calibration alone)."""
    steps = []
    for task in only:
        for arch in archs:
            # only what the cell's rows read (recall's rows read content-addressing: its calibration on 2,000
            # sequences of 64 pairs took a third of `--runs shipped`'s time for no number of the table)
            wanted = {r.analysis for r in rows((task,), (arch,))} or {"calibration"}
            analyses_needed = sorted(wanted, key=lambda name: (name != "calibration", name))
            steps.append(("train", task, arch))
            steps.extend(("analyse", task, arch, name) for name in analyses_needed)
    return steps


def dig(metrics: dict, path: str):
    value = metrics
    for key in path.split("."):
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    return value


class Reproduction:
    def __init__(self, preset: str, runs: Path, out: Path, only: tuple[str, ...], archs: tuple[str, ...],
                 device: str | None = None):
        bad = [t for t in only if t not in tasks.NAMES]
        if bad:
            raise UserError(f"unknown task(s) {', '.join(bad)} in --only; valid: {', '.join(tasks.NAMES)}")
        bad = [a for a in archs if a not in models.ARCHS]
        if bad:
            raise UserError(f"unknown architecture(s) {', '.join(bad)} in --archs; valid: {', '.join(models.ARCHS)}")
        self.preset, self.runs, self.out, self.device = preset, runs, out, pick_device(device)
        self.steps = plan(only, archs)
        self.variants = self.find_variants()

    def find_variants(self) -> dict[tuple[str, str], list[Path]]:
        """(task, arch) -> the other shipped models of the cell, for rows that ask for them (``PaperRow.variants``):
        only with ``--runs shipped``, where every model is finished and its budget is in its record."""
        from .catalog import PRETRAINED_DIR

        if Path(self.runs).resolve() != PRETRAINED_DIR.resolve():
            return {}
        found = {}
        for task, arch in dict.fromkeys(tuple(s[1:3]) for s in self.steps):
            if any(r.variants for r in rows((task,), (arch,))):
                found[(task, arch)] = sorted(folder for folder in self.runs.glob(f"{task}-{arch}-*")
                                             if folder != self.run_dir(task, arch) and RunFolder(folder).has_record())
        return found

    def run_dir(self, task: str, arch: str) -> Path:
        return self.runs / f"{task}-{arch}-{self.preset}"

    def record(self, task: str, arch: str) -> dict | None:
        run = RunFolder(self.run_dir(task, arch))
        if not run.record.exists():
            return None
        record = run.read_record()
        if problem := record_problem(record):
            raise UserError(f"{run.record} is not a valid run record ({problem}); move the run away or pass --runs "
                            f"with another folder")
        return record

    def recipe(self, task: str, arch: str) -> Recipe:
        """What the preset trains for this cell."""
        return resolve_recipe(task, arch, self.preset)

    def check_recipe(self, task: str, arch: str, record: dict) -> None:
        """Refuse to reuse (or resume) a run trained with other settings than the preset's: its numbers
        would silently stand in for the preset's in the table."""
        if differences := self.recipe(task, arch).differences(record, MEASUREMENT_ONLY):
            raise UserError(self.refusal(task, arch, differences))

    def refusal(self, task: str, arch: str, differences: list) -> str:
        diff = [f"{setting}: {held!r} (preset {wanted!r})" for setting, held, wanted in differences]
        return (f"{self.run_dir(task, arch)} was not trained with the {self.preset} preset "
                f"({'; '.join(diff[:3])}); move it away or pass --runs with another folder")

    def train(self, task: str, arch: str) -> None:
        self.record(task, arch)  # a record there is one (said in this command's words)
        finish(self.run_dir(task, arch), self.recipe(task, arch),
               lambda differences: self.refusal(task, arch, differences), ignore=MEASUREMENT_ONLY,
               device=self.device, root=self.runs)

    def analyse(self, task: str, arch: str, name: str, run_dir: Path | None = None) -> dict:
        """The analysis's JSON for the run's final checkpoint, computed unless already written for it."""
        run_dir = run_dir or self.run_dir(task, arch)
        file = resolve(run_dir)
        folder = self.out / run_dir.name
        saved = results.reusable(folder, name, file)
        if saved is not None:
            return saved
        started = time.perf_counter()
        model = load(file, device=self.device)
        options = analysis_options(task, arch, name)
        result = analyses.run(name, model, **options)
        context = results.provenance(file, run=run_dir.name, step=model.step, task=model.task.config(),
                                     arch=model.arch, options=options, figures=list(result.figures),
                                     seconds=round(time.perf_counter() - started, 1))
        results.write(result, folder, self.FORMATS, context)
        return results.read(folder / f"{name}.json", name)

    FORMATS = ("pdf", "png", "json")

    def execute(self, progress: bool = True) -> dict:
        # the folders it writes, checked before hours of training: no link at any level below --runs (the runs it
        # trains; finished ones, the shipped models among them, are only read) or --out
        cells = sorted({tuple(step[1:3]) for step in self.steps})
        training = [self.run_dir(*c).name for c in cells if (self.record(*c) or {}).get("status") != "finished"]
        if training:
            check_writes(self.runs, folders=training)
        check_writes(self.out, folders=[self.run_dir(*c).name for c in cells]
                     + [folder.name for folders in self.variants.values() for folder in folders])
        for step in self.steps:  # before hours of training: every run there to reuse must fit the preset
            if step[0] == "train" and (record := self.record(step[1], step[2])):
                self.check_recipe(step[1], step[2], record)
        bar = tqdm(self.steps, desc="reproduce", unit="step", disable=not progress, position=0)
        for step in bar:
            bar.set_postfix_str(" ".join(step[1:]) + (" (train)" if step[0] == "train" else ""))
            if step[0] == "train":
                self.train(step[1], step[2])
            else:
                self.analyse(*step[1:])
                for folder in self.variants.get(tuple(step[1:3]), ()):
                    if any(r.variants and r.analysis == step[3] for r in rows(tuple(step[1:2]), tuple(step[2:3]))):
                        bar.set_postfix_str(f"{folder.name} {step[3]}")
                        self.analyse(*step[1:], run_dir=folder)
        bar.close()
        table = self.write_table()
        if progress:
            tqdm.write(text(table), end="")
        return table

    def saved(self, task: str, arch: str, name: str, run_dir: Path | None = None) -> dict:
        return results.read(self.out / (run_dir or self.run_dir(task, arch)).name / f"{name}.json", name)

    def write_table(self) -> dict:
        done = {(s[1], s[2]) for s in self.steps}
        table_rows = []
        in_order = [s[1:3] for s in self.steps if s[0] == "train"]
        table = rows(tuple(dict.fromkeys(t for t, _ in in_order)), tuple(dict.fromkeys(a for _, a in in_order)))
        # an analysis's rows are shown in percent when the paper gives any of them in percent (recall's accuracy)
        percent = {(r.task, r.analysis) for r in table if r.paper_text.strip().endswith("%")}
        cells = [(row, self.run_dir(row.task, row.arch), False) for row in table if (row.task, row.arch) in done]
        for row, run_dir, _ in list(cells):  # each other shipped model of the cell below the preset's row
            if row.variants:
                at = next(i for i, cell in enumerate(cells) if cell[:2] == (row, run_dir)) + 1
                cells[at:at] = [(row, folder, True) for folder in self.variants.get((row.task, row.arch), ())]
        for row, run_dir, variant in cells:
            record = (RunFolder(run_dir).read_record() if variant else self.record(row.task, row.arch)) or {}
            saved = self.saved(row.task, row.arch, row.analysis, run_dir)
            ours = dig(saved["metrics"], row.metric)
            # a ratio only beside a number the paper states ("5 clusters, one per hidden state" is none), and
            # none for a claim (">10x": it holds or fails)
            ratio = ours / row.paper if isinstance(ours, (int, float)) and row.paper and row.claim == "value" \
                and numeric(row.paper_text) else None
            train = record.get("train") or {}
            table_rows.append(dict(experiment=f"  the same, {run_dir.name}" if variant else row.experiment,
                             task=row.task, arch=row.arch, paper=row.paper, variant=variant,
                             train_batch_size=train.get("batch_size"), continued=bool(train.get("init")),
                             sequences_before=(record.get("init") or {}).get("sequences"),
                             paper_text=row.paper_text, ours=ours, ratio=ratio, claim=row.claim,
                             unit="percent" if (row.task, row.analysis) in percent else None,
                             claim_holds=(ours > row.paper) if row.claim == "over" and ours is not None else None,
                             analysis=row.analysis, metric=row.metric, run=str(run_dir),
                             n_params=record.get("n_params"), train_minutes=record.get("wall_time_s", 0) / 60,
                             # a run shipped as it stood at a checkpoint trained that many of its planned steps
                             train_steps=record.get("stopped_at") or train.get("steps"),
                             figure=f"{run_dir.name}/{row.analysis}.pdf",
                             png=f"{run_dir.name}/{row.analysis}-{saved['figures'][0]}.png"
                             if saved.get("figures") else None))
        cells = sorted(done)  # the table's training time: the preset's runs (a variant's is on its own row)
        train_s = sum((self.record(*cell) or {}).get("wall_time_s", 0) for cell in cells)
        analyse_s = sum(self.saved(*s[1:]).get("seconds", 0) for s in self.steps if s[0] == "analyse")
        table = dict(preset=self.preset, rows=table_rows, runs=len(cells), train_minutes=train_s / 60,
                     analysis_minutes=analyse_s / 60)
        atomic_write_json(self.out / "reproduction.json", table)
        atomic_write_text(self.out / "reproduction.md", markdown(table))
        return table


NUMBER = re.compile(r"[<>≈~]?\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*(%|x|×)?(\s*\(.*\))?")


def numeric(paper_text: str) -> bool:
    """Whether the paper's entry is a number ("0.007", "97.8%", "0.052 (0.082 random)", ">10x"), not words."""
    return bool(NUMBER.fullmatch(paper_text.strip()))


def fmt(value, unit: str | None = None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if unit == "percent":
        value = 100 * value
        return (f"{value:.3g}" if abs(value) >= 1e-3 or value == 0 else f"{value:.2e}") + "%"
    return f"{value:.3g}" if abs(value) >= 1e-3 or value == 0 else f"{value:.2e}"


def comparison(r: dict) -> str:
    """The ours-versus-paper cell: the ratio to the paper's number, or whether the paper's claim holds."""
    if r["claim"] == "over":
        if r.get("claim_holds") is None:
            return "–"
        return f"claim {'holds' if r['claim_holds'] else 'fails'} ({fmt(r['ours'])} {'>' if r['claim_holds'] else '<='} " \
               f"{fmt(r['paper'])})"
    return fmt(r["ratio"]) + "x" if r["ratio"] is not None else "–"


def metric_name(r: dict) -> str:
    return f"{r['analysis']}: {r['metric']}"


def training_text(r: dict) -> str:
    """A row's budget: its steps and batch, and whether it went on from another run's weights (a lineage)."""
    if not r["train_steps"]:
        return "–"
    batch = f" x {r['train_batch_size']}" if r.get("train_batch_size") else ""
    before = f" (which had seen {r['sequences_before']:,} sequences)" if r.get("sequences_before") else ""
    return (f"{r['train_minutes']:.1f} min, {r['train_steps']:,} steps{batch}"
            + (f", continued from another run's weights{before}" if r.get("continued") else ""))


def markdown(table: dict) -> str:
    lines = [f"# Reproduction (`{table['preset']}` preset)", "",
             "| experiment | arch | paper | ours | ours / paper | metric (analysis: key) | params | training | figure |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in table["rows"]:
        params = f"{r['n_params']:,}" if r["n_params"] else "–"
        training = training_text(r)
        experiment = r["experiment"].replace("|", "\\|")  # a literal | would end the table cell
        figures = f"[pdf]({r['figure']})" + (f" · [png]({r['png']})" if r.get("png") else "")
        lines.append(f"| {experiment} | {r['arch']} | {r['paper_text']} | {fmt(r['ours'], r.get('unit'))} | "
                     f"{comparison(r)} | `{metric_name(r)}` | {params} | {training} | {figures} |")
    lines += ["", f"Training: {table.get('train_minutes', 0):.0f} min for {table.get('runs', 0)} runs (the sum of "
              f"each run's recorded wall time); analyses: {table.get('analysis_minutes', 0):.0f} min.",
              "", "Numbers: `reproduction.json` (each row names the analysis and metric it reads; percentages are "
              "stored as fractions there). Definitions: each analysis's JSON."]
    return "\n".join(lines) + "\n"


EXPERIMENT_WIDTH = 50  # the terminal table's first column wraps here


def text(table: dict) -> str:
    """The table as the terminal shows it: experiment (wrapped), architecture, the paper's entry, ours in the same
    unit, the comparison and the metric read."""
    import textwrap

    head = ("experiment", "arch", "paper", "ours", "ours / paper", "training", "metric (analysis: key)")
    body = [(r["experiment"], r["arch"], r["paper_text"], fmt(r["ours"], r.get("unit")), comparison(r),
             training_text(r).partition(" min, ")[2] or "–", metric_name(r)) for r in table["rows"]]
    widths = [EXPERIMENT_WIDTH] + [max(len(line[i]) for line in [head, *body]) for i in range(1, len(head) - 1)]
    out = []
    for line in [head, *body]:
        indent = line[0][:len(line[0]) - len(line[0].lstrip())]
        first, *rest = textwrap.wrap(line[0].strip(), EXPERIMENT_WIDTH, initial_indent=indent,
                                     subsequent_indent=indent + "  ") or [""]
        out.append("  ".join(cell.ljust(w) for cell, w in zip((first, *line[1:-1]), widths)) + "  " + line[-1])
        out += rest
    return "\n".join(out) + "\n"
