"""``interp reproduce``: train every task x architecture reference model, run the diagnostics, and
write the paper's table with our numbers beside it.

The plan is a list of steps (train a run, run one analysis on it). Every step is skipped when its
output is already there and current: a finished run is reused, an interrupted one resumes from its
last resume state, and an analysis whose JSON was written for the run's final checkpoint is read
back instead of recomputed. So an interrupted ``interp reproduce`` picks up where it stopped.
"""
from __future__ import annotations

import hashlib
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path

from .errors import UserError

TASKS = ("bijection", "hmm", "regression", "recall")


@dataclass(frozen=True)
class Row:
    experiment: str
    task: str
    arch: str
    analysis: str
    metric: str  # dotted path into the analysis's metrics
    paper: float | None  # None: the paper gives no number
    paper_text: str  # how the paper states it
    claim: str = "value"  # "value": compare ours/paper; "over": the paper claims ours > paper


# The paper's table (../shared/DESIGN.md), plus the task x architecture cells it leaves empty.
ROWS = [
    Row("bijection V=20, entropy MAE (bits)", "bijection", "transformer", "calibration", "entropy_mae_bits", 0.007, "0.007"),
    Row("bijection V=20, entropy MAE (bits)", "bijection", "mamba", "calibration", "entropy_mae_bits", 0.010, "0.010"),
    Row("bijection V=20, entropy MAE (bits)", "bijection", "lstm", "calibration", "entropy_mae_bits", 0.009, "0.009"),
    Row("bijection V=20, entropy MAE (bits)", "bijection", "mlp", "calibration", "entropy_mae_bits", 1.85, "1.85"),
    Row("HMM K=20, entropy MAE (bits)", "hmm", "transformer", "calibration", "entropy_mae_bits", 7.5e-5, "7.5e-5"),
    Row("HMM K=30 (trained at 20), entropy MAE (bits)", "hmm", "transformer", "length-generalization",
        "lengths.30.entropy_mae_bits", 0.012, "0.012"),
    Row("HMM K=50 (trained at 20), entropy MAE (bits)", "hmm", "transformer", "length-generalization",
        "lengths.50.entropy_mae_bits", 0.029, "0.029"),
    Row("HMM K=20, entropy MAE (bits)", "hmm", "mamba", "calibration", "entropy_mae_bits", 0.024, "0.024"),
    Row("HMM K=20, entropy MAE (bits)", "hmm", "lstm", "calibration", "entropy_mae_bits", 0.411, "0.411"),
    Row("HMM K=20, entropy MAE (bits)", "hmm", "mlp", "calibration", "entropy_mae_bits", 0.40, "0.40"),
    Row("associative recall, accuracy", "recall", "transformer", "calibration", "accuracy", 1.0, "100%"),
    Row("associative recall, accuracy", "recall", "mamba", "calibration", "accuracy", 0.978, "97.8%"),
    Row("associative recall, accuracy", "recall", "lstm", "calibration", "accuracy", 0.005, "0.5%"),
    Row("associative recall, accuracy", "recall", "mlp", "calibration", "accuracy", None, "–"),
    *(Row("Bayesian regression, differential-entropy MAE (bits)", "regression", arch, "calibration",
          "entropy_mae_bits", None, "–") for arch in ("transformer", "mamba", "lstm", "mlp")),
    Row("layer-0 key orthogonality, mean |off-diagonal cos|", "bijection", "transformer", "key-orthogonality",
        "layer0_trained", 0.052, "0.052 (0.082 random)"),
    Row("  the same for random Gaussian vectors", "bijection", "transformer", "key-orthogonality", "random",
        0.082, "0.082"),
    Row("hypothesis-frame head ablation, MAE ratio", "bijection", "transformer", "head-ablation",
        "hypothesis_frame_head.mae_ratio_to_intact", 10.0, ">10x", claim="over"),
    Row("single-layer ablation, smallest MAE ratio", "bijection", "transformer", "layer-ablation",
        "min_block_ratio", 10.0, ">10x", claim="over"),
    Row("Mamba final layer on HMM: k-means purity by hidden state", "hmm", "mamba", "belief-clusters", "purity",
        1.0, "5 clusters, one per hidden state"),
]
OPTIONS = {"length-generalization": {"lengths": "30,50"}}


def plan(only: tuple[str, ...], archs: tuple[str, ...]) -> list[tuple]:
    """The steps in order: ("train", task, arch) then ("analyse", task, arch, analysis) for its rows."""
    steps = []
    for task in only:
        for arch in archs:
            analyses_needed = ["calibration"] + sorted({r.analysis for r in ROWS if (r.task, r.arch) == (task, arch)}
                                                       - {"calibration"})
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


def checkpoint_digest(file: Path) -> str:
    """The checkpoint's content hash: an analysis is reused only for the very weights it was computed
    on (a run retrained in place, or a re-shipped model, keeps its checkpoint's path and step)."""
    with open(file, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


class Reproduction:
    def __init__(self, preset: str, runs: Path, out: Path, only: tuple[str, ...], archs: tuple[str, ...],
                 device: str | None = None):
        import models

        bad = [t for t in only if t not in TASKS]
        if bad:
            raise UserError(f"unknown task(s) {', '.join(bad)} in --only; valid: {', '.join(TASKS)}")
        bad = [a for a in archs if a not in models.ARCHS]
        if bad:
            raise UserError(f"unknown architecture(s) {', '.join(bad)} in --archs; valid: {', '.join(models.ARCHS)}")
        from .checkpoint import pick_device

        self.preset, self.runs, self.out, self.device = preset, runs, out, pick_device(device)
        self.steps = plan(only, archs)

    def run_dir(self, task: str, arch: str) -> Path:
        return self.runs / f"{task}-{arch}-{self.preset}"

    def record(self, task: str, arch: str) -> dict | None:
        path = self.run_dir(task, arch) / "run.json"
        return json.loads(path.read_text()) if path.exists() else None

    def recipe(self, task: str, arch: str) -> dict:
        """What the preset trains for this cell: the task, model and training settings of its run.json."""
        from .train import preset_recipe

        return preset_recipe(self.preset, task, arch)

    def check_recipe(self, task: str, arch: str, record: dict) -> None:
        """Refuse to reuse (or resume) a run trained with other settings than the preset's: its numbers
        would silently stand in for the preset's in the table."""
        from .train import recorded_settings

        want = self.recipe(task, arch)
        have = dict(record, train=recorded_settings(record.get("train", {})))
        diff = [f"{part}.{k}: {have[part].get(k)!r} (preset {v!r})" for part in ("task", "model", "train")
                for k, v in want[part].items() if have.get(part, {}).get(k) != v]
        diff += [f"arch: {have.get('arch')!r} (preset {arch!r})"] if have.get("arch") != arch else []
        if diff:
            raise UserError(f"{self.run_dir(task, arch)} was not trained with the {self.preset} preset "
                            f"({'; '.join(diff[:3])}); move it away or pass --runs with another folder")

    def train(self, task: str, arch: str) -> None:
        from .train import Trainer, TrainSettings

        out = self.run_dir(task, arch)
        record = self.record(task, arch)
        if record:
            self.check_recipe(task, arch, record)
            if record.get("status") == "finished":
                return
            trainer = Trainer(out, resume=True, device=self.device)
        else:
            r = self.recipe(task, arch)
            trainer = Trainer(out, r["task"], arch, r["model"], TrainSettings(**r["train"]), device=self.device)
        trainer.run()

    def analyse(self, task: str, arch: str, name: str) -> dict:
        """The analysis's JSON for the run's final checkpoint, computed unless already written for it."""
        import analyses

        from .checkpoint import load, resolve
        from .export import write_result

        run_dir = self.run_dir(task, arch)
        file = resolve(run_dir)
        json_path = self.out / run_dir.name / f"{name}.json"
        digest = checkpoint_digest(file)
        if json_path.exists():
            saved = json.loads(json_path.read_text())
            if saved.get("checkpoint") == str(file) and saved.get("checkpoint_sha256") == digest:
                return saved
        started = time.perf_counter()
        model = load(file, device=self.device)
        result = analyses.run(name, model, **OPTIONS.get(name, {}))
        context = dict(run=run_dir.name, checkpoint=str(file), checkpoint_sha256=digest, step=model.step,
                       task=model.task.config(), arch=model.arch, options=OPTIONS.get(name, {}),
                       figures=list(result.figures),
                       seconds=round(time.perf_counter() - started, 1))
        write_result(result, self.out / run_dir.name, ("pdf", "png", "json"), context)
        return json.loads(json_path.read_text())

    def execute(self, progress: bool = True) -> dict:
        from tqdm.auto import tqdm

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
        bar.close()
        return self.write_table()

    def saved(self, task: str, arch: str, name: str) -> dict:
        return json.loads((self.out / self.run_dir(task, arch).name / f"{name}.json").read_text())

    def write_table(self) -> dict:
        from .files import atomic_write_json, atomic_write_text

        done = {(s[1], s[2]) for s in self.steps}
        rows = []
        for row in ROWS:
            if (row.task, row.arch) not in done:
                continue
            run_dir = self.run_dir(row.task, row.arch)
            record = self.record(row.task, row.arch) or {}
            saved = self.saved(row.task, row.arch, row.analysis)
            ours = dig(saved["metrics"], row.metric)
            ratio = ours / row.paper if isinstance(ours, (int, float)) and row.paper else None
            rows.append(dict(experiment=row.experiment, task=row.task, arch=row.arch, paper=row.paper,
                             paper_text=row.paper_text, ours=ours, ratio=ratio, claim=row.claim,
                             claim_holds=(ours > row.paper) if row.claim == "over" and ours is not None else None,
                             analysis=row.analysis, metric=row.metric, run=str(run_dir),
                             n_params=record.get("n_params"), train_minutes=record.get("wall_time_s", 0) / 60,
                             train_steps=(record.get("train") or {}).get("steps"),
                             figure=f"{run_dir.name}/{row.analysis}.pdf",
                             png=f"{run_dir.name}/{row.analysis}-{saved['figures'][0]}.png"
                             if saved.get("figures") else None))
        cells = sorted(done)
        train_s = sum((self.record(*cell) or {}).get("wall_time_s", 0) for cell in cells)
        analyse_s = sum(self.saved(*s[1:]).get("seconds", 0) for s in self.steps if s[0] == "analyse")
        table = dict(preset=self.preset, rows=rows, runs=len(cells), train_minutes=train_s / 60,
                     analysis_minutes=analyse_s / 60)
        atomic_write_json(self.out / "reproduction.json", table)
        atomic_write_text(self.out / "reproduction.md", markdown(table))
        return table


def fmt(value) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return f"{value:.3g}" if abs(value) >= 1e-3 or value == 0 else f"{value:.2e}"


def markdown(table: dict) -> str:
    lines = [f"# Reproduction (`{table['preset']}` preset)", "",
             "| experiment | arch | paper | ours | ours / paper | params | training | figure |",
             "|---|---|---|---|---|---|---|---|"]
    for r in table["rows"]:
        ratio = fmt(r["ratio"]) + "x" if r["ratio"] is not None else "–"
        if r["claim"] == "over" and r["claim_holds"] is not None:
            ratio += " (claim holds)" if r["claim_holds"] else " (claim fails)"
        params = f"{r['n_params']:,}" if r["n_params"] else "–"
        training = f"{r['train_minutes']:.1f} min, {r['train_steps']:,} steps" if r["train_steps"] else "–"
        experiment = r["experiment"].replace("|", "\\|")  # a literal | would end the table cell
        figures = f"[pdf]({r['figure']})" + (f" · [png]({r['png']})" if r.get("png") else "")
        lines.append(f"| {experiment} | {r['arch']} | {r['paper_text']} | {fmt(r['ours'])} | {ratio} | {params} | "
                     f"{training} | {figures} |")
    lines += ["", f"Training: {table.get('train_minutes', 0):.0f} min for {table.get('runs', 0)} runs (the sum of "
              f"each run's recorded wall time); analyses: {table.get('analysis_minutes', 0):.0f} min.",
              "", "Numbers: `reproduction.json` (each row names the analysis and metric it reads). "
              "Definitions: each analysis's JSON."]
    return "\n".join(lines) + "\n"
