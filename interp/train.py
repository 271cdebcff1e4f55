"""The training loop: AdamW, linear warm-up then cosine to zero, gradient clipping, fresh batches.

Every step draws a fresh batch from a generator seeded by (seed, step), so a run is a pure function
of its settings and ``--resume`` continues exactly: no sampler state has to be saved, only the
weights, the optimizer moments and the step.

Determinism. On the CPU the same settings, seed and thread count give the same weights bit for bit
(tested for every architecture at 2 threads, and across a SIGKILL and ``--resume``): training runs
under ``torch.use_deterministic_algorithms``, which replaces the one racy CPU kernel these models
use, the accumulating index backward of the token embedding (threads added rows in whatever order
they finished). A different thread count splits reductions differently, so it gives weights that
agree only to float rounding; the run's record keeps the count and ``--resume`` says so when it changes.

Loss. ``loss="hard"`` is cross-entropy against the sampled answer (the paper's recipe);
``loss="soft"`` is cross-entropy against the exact Bayes posterior, which has the same expected
gradient but far less variance; both use the answer-class logits only. The ``cpu`` preset uses soft
targets: it is what makes 0.01 bits reachable in minutes on a CPU (see docs/results/training.md).
"""
from __future__ import annotations

import json
import math
import platform
import shlex
import time
import os
from contextlib import contextmanager, nullcontext
from dataclasses import asdict, replace
from pathlib import Path

import torch

import models
from models.base import training_loss as loss_fn  # the objective lives with the models (analyses use it)
import tasks
from analyses.base import held_out_batch
from tasks.base import curriculum_choice

from . import checkpoint, distributed
from .checkpoint import pick_device
from .errors import Diverged, UserError
from .files import RunFolder, append_regular, atomic_write_bytes, atomic_write_json, read_regular
from .recipe import Recipe, TrainSettings, bf16_on, recorded_train, stage_tasks


def checkpoint_steps(total: int, every: int = 0) -> list[int]:
    """0, 100, 200, ..., 900, 1000, 2000, ..., 9000, 10000, 20000, ... up to ``total``, plus ``total``;
    with ``every`` > 0 also every ``every`` steps (a dense series for training-dynamics analyses)."""
    steps = {0, total, *(range(every, total, every) if every else ())}
    scale = 100
    while scale <= total:
        steps.update(k * scale for k in range(1, 10) if k * scale <= total)
        scale *= 10
    return sorted(steps)


def anneal_start(s: TrainSettings) -> int:
    """The first step of the cosine anneal: the rate holds at its peak from the warm-up's end until here
    (``decay`` 1: no hold, the anneal starts where the warm-up ends)."""
    return s.steps - round(s.decay * (s.steps - s.warmup))


def lr_at(step: int, s: TrainSettings) -> float:
    """Linear warm-up to ``lr``, held there, then a cosine to zero over the last ``decay`` of the steps after
    the warm-up (binding's long runs found Mamba learns recall at a high constant rate and reads it back
    precisely once the rate anneals)."""
    if step < s.warmup:
        return s.lr * (step + 1) / s.warmup
    start = anneal_start(s)
    progress = (step - start) / max(1, s.steps - start)
    return s.lr * 0.5 * (1 + math.cos(math.pi * min(1.0, max(0.0, progress))))


def compiled(loss_of, without: str = "--no-compile"):
    """``loss_of`` through torch.compile, with a failure to build its kernels (no C++ compiler, say)
    turned into one line saying how to train without it (``without``: the command or flag that does)."""
    import torch._dynamo

    fast = torch.compile(loss_of)

    def run(batch):
        try:
            return fast(batch)
        except torch._dynamo.exc.BackendCompilerFailed as err:
            first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise UserError(f"torch.compile could not build the training step ({first[:200]}); install a C++ "
                            f"compiler, or train without it: {without}") from None

    return run


def retain_freed_memory() -> None:
    """Ask glibc to keep freed memory for reuse instead of returning it to the OS.

    A training step allocates and frees the same large activation buffers every step (the Mamba
    scan's states are 150 MB per layer at the paper size). By default glibc serves blocks that
    large with fresh mmaps, so every step page-faults them in again, which cost more than the scan
    itself here. Raising the mmap and trim thresholds makes the heap hold on to them. No-op where
    glibc is not the allocator.
    """
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 1 << 30)  # M_MMAP_THRESHOLD: blocks up to 1 GiB come from the heap
        libc.mallopt(-1, (1 << 31) - 1)  # M_TRIM_THRESHOLD: never give the heap's top back
    except (OSError, AttributeError):
        pass


@contextmanager
def deterministic(device: str):
    """Deterministic kernels while training; the caller's setting is restored afterwards.

    On the CPU every kernel these models use has a deterministic version (measured: the embedding's
    index backward is the only one that differed between two identical steps, and costs nothing
    measurable here: benchmarks/step_time.py --deterministic both). On CUDA, cuBLAS needs a fixed
    workspace (set here unless the user set one before CUDA started), and kernels without a
    deterministic version, mamba-ssm's atomic-add backward among them, only warn: a CUDA run is
    reproducible up to those, not bit for bit.
    """
    before = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    on_cuda = device.startswith("cuda")
    if on_cuda:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True, warn_only=on_cuda)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before[0], warn_only=before[1])


def versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    from . import __version__

    found = dict(interp=__version__, python=platform.python_version())
    for package in ("torch", "transformer-lens", "numpy", "safetensors"):
        try:
            found[package] = version(package)
        except PackageNotFoundError:
            found[package] = None
    return found


def optimizer_tensors(opt: torch.optim.Optimizer) -> dict[str, torch.Tensor]:
    state = opt.state_dict()["state"]
    return {f"optim.{i}.{k}": v.detach().cpu().reshape(-1) if k == "step" else v.detach().cpu()
            for i, moments in state.items() for k, v in moments.items()}


def load_optimizer(opt: torch.optim.Optimizer, tensors: dict[str, torch.Tensor]) -> None:
    state: dict[int, dict] = {}
    for key, value in tensors.items():
        if key.startswith("optim."):
            _, index, name = key.split(".", 2)
            state.setdefault(int(index), {})[name] = value.reshape(()) if name == "step" else value
    full = opt.state_dict()
    full["state"] = state
    opt.load_state_dict(full)


def check_optimizer(opt: torch.optim.Optimizer, moments: dict[str, torch.Tensor], step: int, where) -> None:
    """A resume state's optimizer tensors are AdamW's: a step and two moments shaped like each parameter."""
    params = [p for group in opt.param_groups for p in group["params"]]
    expected = {f"optim.{i}.{name}": shape for i, p in enumerate(params)
                for name, shape in (("step", (1,)), ("exp_avg", tuple(p.shape)), ("exp_avg_sq", tuple(p.shape)))}
    found = {k: tuple(v.shape) for k, v in moments.items()}
    if found == {} and step == 0:
        return
    wrong = next((k for k in sorted(expected.keys() | found.keys()) if expected.get(k) != found.get(k)), None)
    if wrong is not None:
        detail = (f"missing {wrong}" if wrong not in found else f"unexpected {wrong}" if wrong not in expected else
                  f"{wrong} has shape {found[wrong]}, expected {expected[wrong]}")
        raise UserError(f"{where}: malformed optimizer state ({detail}); it cannot be resumed")
    broken = next((k for k, v in moments.items() if not v.is_floating_point() or not torch.isfinite(v).all()), None)
    if broken:
        raise UserError(f"{where}: optimizer tensor {broken} is not finite floating point; it cannot be resumed")


def _step_of(line: bytes | str) -> float:
    """The step of a metrics line; a line cut short by a crash (or not UTF-8, or not a record) counts as
    after any resume point, so it is dropped."""
    try:
        step = json.loads(line)["step"]
    except (ValueError, KeyError, TypeError, IndexError, RecursionError):  # UnicodeDecodeError is a ValueError
        return math.inf
    return step if isinstance(step, (int, float)) and not isinstance(step, bool) else math.inf


def denormals_are_flushed() -> bool:
    """Whether this process flushes denormal floats to zero now (a denormal times 2 comes out 0)."""
    return float((torch.tensor(1e-40) * 2.0).item()) == 0.0


@contextmanager
def denormals_flushed(active: bool = True):
    """Denormal floats flushed to zero while a CPU run trains, as it was before afterwards.

    A diverging run fills the scans and softmaxes with denormal floats, which make a CPU step about
    3x slower (measured on Mamba); flushed, a healthy run is unchanged. The setting is the
    processor's, for the whole process, so it is put back: other code (hypothesis, numerics
    tests) relies on IEEE denormals."""
    was = active and denormals_are_flushed()  # already flushed by the caller
    if active and not was:
        torch.set_flush_denormal(True)
    try:
        yield
    finally:
        if active and not was:
            torch.set_flush_denormal(False)


def held_out_metrics(model, batch) -> dict:
    """The numbers a run records at each evaluation and at its end (its record's ``final``)."""
    from analyses.calibration import measure

    return {k: v for k, v in measure(model, batch).items()
            if k in ("entropy_mae_bits", "kl_bits", "accuracy", "infeasible_mass", "relative_mean_error")}


def bf16_problem(model, tokens: torch.Tensor, device: str) -> str | None:
    """Why this machine cannot train ``model`` under bf16 autocast, or None when it can: one forward and backward
    pass on ``tokens`` (a sequence or two), its gradients and random state left as they were. A CPU without bf16
    kernels for an operator (oneDNN's LSTM on a CPU without avx512_bf16) fails only inside a step, so this is
    asked before training, by the trainer and the benchmarks alike."""
    kind = torch.device(device).type
    try:
        with torch.random.fork_rng(devices=[]), torch.autocast(kind, dtype=torch.bfloat16):
            out = model(tokens).float().sum()
            if out.requires_grad:  # (a model with nothing to train has no backward to ask about)
                out.backward()
    except RuntimeError as err:
        return str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    finally:
        model.zero_grad(set_to_none=True)
    return None


class Trainer:
    """One training run in ``out``: build or restore, then step, evaluate and checkpoint.

        Trainer.start(out, recipe).run()     # a new run of a recipe (interp.recipe: resolve, stated)
        Trainer.resume(out).run()            # the run there, on the recipe its record holds

    The recipe comes checked (``Recipe.checked``); the trainer checks only what is the machine's or the folder's:
    the device, the processes, bf16 on this CPU, the files. Under torchrun (see ``distributed``) every process
    builds the same trainer: a mistake found by any of them stops all of them, each trains on its share of every
    batch, and only rank 0 writes.
    """

    @classmethod
    def start(cls, out: str | Path, recipe: Recipe, **options) -> "Trainer":
        """A new run of ``recipe`` in ``out`` (which must hold no run). ``options``: device, progress, on_eval,
        root, stop (see ``__init__``)."""
        return cls(out, recipe, **options)

    @classmethod
    def resume(cls, out: str | Path, compile: bool | None = None, **options) -> "Trainer":
        """The run in ``out``, continued where it stopped on the recipe its record holds; ``compile`` switches
        torch.compile on or off (rounding only). ``options`` as for ``start``."""
        return cls(out, None, compile=compile, **options)

    def __init__(self, out: str | Path, recipe: Recipe | None, *, device: str | None = None, progress: bool = True,
                 on_eval=None, compile: bool | None = None, root: str | Path | None = None, stop=None):
        """Through ``start`` (a ``recipe``) or ``resume`` (None: the run's own)."""
        resume = recipe is None
        self.out = Path(out)
        # every file the run writes, its lock among them; ``root``: the folder the user named, when the run is
        # one of many below it (a search's trial, a sweep's point)
        self.folder = RunFolder(self.out, root)
        self.progress = progress
        # on_eval(step, metrics) after every held-out evaluation (and the step's saves): a tuner
        # reports it to its pruner, and stops the run by raising (the run stays resumable)
        self.on_eval = on_eval
        # stop(step, metrics) after every held-out evaluation: a reason (str) ends the run there as finished,
        # its checkpoint saved and the reason in the record's ``stopped`` (a sweep's point that reached its
        # threshold spends no more of its budget); None trains on
        self.stop = stop
        self.fresh, self.progress_saved = not resume, False
        self.notes: list[str] = []  # what a user resuming should know (the CLI prints them as warnings)
        retain_freed_memory()
        self.dist, self.device = distributed.start(pick_device(device))
        if stop is not None and self.dist.world_size > 1:  # only rank 0 evaluates, so only it could stop
            self.dist.close()
            raise UserError("a run that stops at a threshold (a sweep's --threshold) trains in one process; "
                            "drop torchrun, or drop the threshold")
        # Held by rank 0 from before the first check to the end of run(): a second trainer on this
        # folder is refused (naming this one), never interleaved with it.
        self.lock = self.folder.lock
        try:
            with self.dist.together():  # every process checks and builds before rank 0 writes anything
                if self.dist.is_main:
                    self.lock.acquire()
                self._build(recipe)
                if resume and compile is not None:
                    self._switch_compile(compile)
                self._check_precision()
            with self.dist.together():
                if resume:
                    self._restore()
                elif self.dist.is_main:
                    atomic_write_json(self.folder.record, self.record)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Let go of the run folder and the process group (run() does this when it ends)."""
        self.lock.release()
        self.dist.close()

    def __del__(self):  # a trainer built and dropped without run() (e.g. to read .step) frees its folder
        if getattr(self, "lock", None) is not None:
            self.lock.release()

    def _build(self, recipe: Recipe | None) -> None:
        """The run's recipe (a resumed run's: its record's), then what trains it: the model (with the weights it
        starts from), the curriculum's tasks, the optimizer, the held-out batch and, for a new run, its record."""
        resume, run_file = recipe is None, self.folder.record
        self.folder.check()  # before anything is read or written through its files
        if resume:
            if not run_file.exists():
                raise UserError(f"nothing to resume: {run_file} does not exist (start the run without --resume)")
            try:
                self.record = self.folder.read_record()
            except UserError as err:
                raise UserError(f"{err}; it cannot be resumed, start a new run with another --out") from None
            if self.record.get("status") == "finished":
                raise UserError(f"{self.out} has already finished; nothing to resume")
            recipe = Recipe.of_run(self.record, run_file)
            self._note_changed_machine()
        elif run_file.exists() or self.folder.saved():
            raise UserError(f"{self.out} already holds a run; pass --resume to continue it or choose another --out")
        self.settings = replace(recipe.train)  # the trainer's own (a resume may switch its compile)
        if self.settings.batch_size % self.dist.world_size:
            raise UserError(f"batch-size {self.settings.batch_size} is not divisible by the {self.dist.world_size} "
                            f"training processes; each takes an equal share of every batch")
        self.task = recipe.task
        try:
            self.model = models.build(recipe.arch, self.task, config=recipe.model, seed=self.settings.seed)
        except tasks.ConfigError as err:
            raise UserError(f"{run_file}: {err}; it cannot be resumed" if resume else str(err)) from None
        # The start's weights, unless a resume state will replace them (then the start is not read again)
        if self.settings.init and not (resume and self.folder.resume.exists()):
            init = self._start_from(self.settings.init, recipe.arch)
        self.model.to(self.device)
        s = self.settings
        self.stages = stage_tasks(self.task, s.curriculum, getattr(self.model.cfg, "n_ctx", None))
        exempt = getattr(self.model, "no_weight_decay", set)()  # e.g. Mamba's A_log, as mamba-ssm trains it
        decay = [p for n, p in self.model.named_parameters() if p.dim() >= 2 and n not in exempt]
        no_decay = [p for n, p in self.model.named_parameters() if p.dim() < 2 or n in exempt]
        self.opt = torch.optim.AdamW([{"params": decay, "weight_decay": s.weight_decay},
                                      {"params": no_decay, "weight_decay": 0.0}], lr=s.lr, betas=s.betas)
        self.step, self.elapsed = 0, 0.0
        self.eval_batch = held_out_batch(self.task, s.eval_size, s.seed).to(self.device)
        if not resume:
            self.record = dict(task=self.task.config(), arch=recipe.arch, model=self.model.config.to_dict(),
                               train=asdict(s), n_params=models.n_params(self.model), device=self.device,
                               bf16=bf16_on(s.bf16, self.device),  # the precision it trains in (a resume keeps it)
                               threads=torch.get_num_threads(), world_size=self.dist.world_size,
                               versions=versions(), status="running",
                               started=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
            if s.init:
                self.record["init"] = init

    def _note_changed_machine(self) -> None:
        """A resume on another thread count or device continues correctly but not bit for bit."""
        was = dict(threads=self.record.get("threads"), device=self.record.get("device"))
        now = dict(threads=torch.get_num_threads(), device=self.device)
        changed = [f"{k} {was[k]} -> {now[k]}" for k in was if was[k] is not None and was[k] != now[k]]
        if changed:
            self.notes.append(f"{'; '.join(changed)} since this run started: it resumes correctly, but its weights will "
                              f"not be bit-identical to an uninterrupted run's" +
                              (f" (OMP_NUM_THREADS={was['threads']} gives that)" if now["threads"] != was["threads"] else ""))
        self.record.setdefault("resumes", [])  # each resume's machine, for whoever reads the record later
        self.record["resumes"].append(now)

    def _check_precision(self) -> None:
        """bf16 autocast as recorded when the run started (a record from before "auto": as it then ran), unless this
        machine cannot run the model in it: then float32, with a note, before the first step (not a traceback
        inside it). A resume on such a machine continues in float32 too, which changes rounding only."""
        bf16 = self.record.setdefault("bf16", bf16_on(recorded_train(self.record)["bf16"], self.device))
        if bf16 and (problem := bf16_problem(self.model, self.eval_batch.tokens[:1], self.device)):
            self.record["bf16"] = False
            self.notes.append(f"this machine cannot train a {self.record.get('arch')} under bf16 autocast ({problem}); "
                              f"it trains in float32 instead ({self.folder.RECORD} records bf16 false)")

    def _switch_compile(self, compile: bool) -> None:
        """``--resume --no-compile`` (or ``--compile``): torch.compile changes how the step's kernels round,
        not what it computes, so a run may continue with it switched. The record keeps the setting the run
        was started with (its recipe) and records the switch among its resumes."""
        if not isinstance(compile, bool):
            raise UserError(f"compile must be true or false, got {compile!r}")
        if compile == self.settings.compile:
            return
        self.settings.compile = compile
        self.record["resumes"][-1]["compile"] = compile
        self.notes.append(f"this run {'continues with' if compile else 'was started with'} torch.compile"
                          f"{'' if compile else ' and continues without it'}: it resumes correctly, but its weights "
                          f"will not be bit-identical to an uninterrupted run's")

    def task_at(self, step: int):
        """What step ``step`` trains on: the first curriculum stage not yet over (a mixture's options in
        turn), else the task itself."""
        choice = curriculum_choice(self.settings.curriculum, step)
        return self.task if choice is None else self.stages[choice[0]][choice[1]]

    # -- persistence -------------------------------------------------------------------------
    def _restore(self) -> None:
        resume_file = self.folder.resume
        self._check_checkpoints()
        state = None
        if resume_file.exists():  # everything is checked before anything is loaded or written
            meta, tensors = checkpoint.read(resume_file)
            if not self._same_run(meta):
                raise UserError(f"{resume_file} is the state of another run than {self.folder.record} (their task, "
                                f"architecture or model differ); it cannot be resumed")
            if meta["step"] > self.settings.steps:
                raise UserError(f"{resume_file} is at step {meta['step']}, beyond the run's {self.settings.steps} "
                                f"steps; it cannot be resumed")
            weights = {k: v for k, v in tensors.items() if not k.startswith("optim.")}
            checkpoint.check_weights(self.model, weights, resume_file)
            moments = {k: v for k, v in tensors.items() if k.startswith("optim.")}
            check_optimizer(self.opt, moments, meta["step"], resume_file)
            state = meta, weights, moments
        if self.dist.is_main:
            self.folder.clear_temps()
        # Without a resume state the run was interrupted before its first one: it starts over,
        # which gives the same result because every batch is a function of (seed, step).
        if state:
            meta, weights, moments = state
            self.model.load_state_dict(weights)
            load_optimizer(self.opt, {k: v.to(self.device) for k, v in moments.items()})
            self.step, self.elapsed = meta["step"], float(meta.get("elapsed_s", 0.0))
        # Drop metric lines written after the resume point, so the log reads as one clean run.
        metrics = self.folder.metrics
        if os.path.lexists(metrics) and self.dist.is_main:
            try:
                lines = read_regular(metrics).splitlines()
            except OSError as err:
                raise UserError(f"cannot read {metrics}: {err.strerror or err}; move it away to resume without "
                                f"the log of the steps so far") from None
            kept = [line for line in lines if _step_of(line) <= self.step]  # bytes: a non-UTF-8 line is dropped
            atomic_write_bytes(metrics, b"".join(line + b"\n" for line in kept))

    def _start_from(self, path: str, arch: str) -> dict:
        """Load a checkpoint's weights as the starting point; what it was, for the run's record."""
        path = checkpoint.resolve(path)  # a run folder means its last checkpoint
        meta, tensors = checkpoint.read(path)
        if meta["arch"] != arch:
            raise UserError(f"--init {path} is a {meta['arch']} checkpoint; this run trains a {arch}")
        if meta["task"].get("name") != self.task.name:
            raise UserError(f"--init {path} was trained on {meta['task'].get('name')}; this run trains "
                            f"{self.task.name}")
        weights = {k: v for k, v in tensors.items() if not k.startswith("optim.")}
        checkpoint.check_weights(self.model, weights, f"--init {path}")
        self.model.load_state_dict(weights)
        before = checkpoint.budget(RunFolder.of_checkpoint(path), meta["step"])  # what these weights had already seen
        return dict(path=str(path), sha256=checkpoint.checkpoint_digest(path), step=meta["step"],
                    sequences=before["sequences"] if before else None, tokens=before["tokens"] if before else None,
                    task=meta["task"], model=meta["model"])

    def _same_run(self, meta: dict) -> bool:
        """Whether a checkpoint's metadata describes this run's task, architecture, model and seed."""
        try:  # as this version writes them: a setting added since the file was written is at its default
            task, model = tasks.from_config(meta["task"]).config(), type(self.model.config).from_dict(meta["model"]).to_dict()
        except (tasks.ConfigError, TypeError, ValueError):
            return False
        return ([task, meta["arch"], model, meta.get("seed", 0)] ==
                [self.task.config(), self.model.arch, self.model.config.to_dict(), self.settings.seed])

    def _check_checkpoints(self) -> None:
        """Every checkpoint already on disk belongs to the run in its record, at a step within it: resuming
        rewrites them, which only loses nothing when they are the ones this run writes."""
        for step, path in self.folder.saved():
            meta, _ = checkpoint.read(path, tensors=False)
            if not self._same_run(meta) or meta["step"] != step or step > self.settings.steps:
                why = (f"its step is {meta['step']}" if meta["step"] != step else
                       f"step {step} is beyond the run's {self.settings.steps} steps" if self._same_run(meta) else
                       f"its task, architecture, model or seed differ from {self.folder.RECORD}")
                raise UserError(f"{path} does not belong to the run in {self.folder.record} ({why}); it cannot "
                                f"be resumed without overwriting it")

    def _save_resume(self) -> None:
        self.progress_saved = True
        checkpoint.save(self.folder.resume, self.model, self.step, self.settings.seed,
                        extra=optimizer_tensors(self.opt), extra_meta={"elapsed_s": self.elapsed})

    def _log(self, record: dict) -> None:
        try:
            append_regular(self.folder.metrics, (json.dumps(record) + "\n").encode())
        except OSError as err:  # e.g. a full disk: the last resume state is intact
            raise UserError(f"could not write {self.folder.metrics}: {err.strerror or err}; free some "
                            f"space, then continue with --resume") from None

    # -- the loop ----------------------------------------------------------------------------
    def evaluate(self) -> dict:
        self.model.eval()
        numbers = held_out_metrics(self.model, self.eval_batch)
        self.model.train()
        return numbers

    def run(self) -> dict:
        try:
            with denormals_flushed(torch.device(self.device).type == "cpu"):
                return self._run()
        except Exception:
            if self.fresh and not self.progress_saved and self.dist.is_main:
                self.folder.undo_fresh()  # a run refused at its first steps leaves nothing to block the next
            raise
        finally:
            self.close()

    def _run(self) -> dict:
        from tqdm.auto import tqdm

        s = self.settings
        main = self.dist.is_main  # only rank 0 writes files and shows progress
        loss_of = self.dist.wrap(self.model, lambda model, batch: loss_fn(model, batch, s.loss))
        if s.compile:  # the advice must work: a resumed run can only drop compile with --resume --no-compile
            loss_of = compiled(loss_of, f"interp train --resume --out {shlex.quote(str(self.out))} --no-compile"
                               if not self.fresh else "--no-compile")
        saves = set(checkpoint_steps(s.steps, s.checkpoint_every))
        # bf16 autocast as recorded when the run started (a record from before "auto": as it then ran)
        bf16 = self.record["bf16"]  # see _check_precision
        autocast = torch.autocast(torch.device(self.device).type, dtype=torch.bfloat16) if bf16 else nullcontext()
        if self.step == 0 and main:
            checkpoint.save(self.folder.checkpoint(0), self.model, 0, s.seed)
        bar = tqdm(total=s.steps, initial=self.step, desc=f"train {self.out.name}", unit="step",
                   disable=not (self.progress and main), dynamic_ncols=True)
        last_eval = {}
        self.model.train()
        started = time.perf_counter() - self.elapsed
        # the bar is closed however the loop ends, so an error's line starts a line of its own
        with deterministic(self.device), bar:  # same seed and thread count, same weights
            while self.step < s.steps:
                lr = lr_at(self.step, s)
                for group in self.opt.param_groups:
                    group["lr"] = lr
                generator = torch.Generator().manual_seed(s.seed * 1_000_003 + self.step)
                torch.manual_seed(s.seed * 1_000_003 + self.step)  # any draw inside the model, e.g. position offsets
                # Every process draws the same full batch and trains on its own rows of it.
                batch = self.dist.shard(self.task_at(self.step).sample(s.batch_size, generator=generator)).to(self.device)
                with autocast:
                    loss = loss_of(batch)
                # The whole batch's loss (the mean of the processes' means: they have equally many
                # query positions), so every process sees the same value and stops together.
                loss_value = self.dist.mean(loss.detach())
                if not torch.isfinite(loss_value):
                    bar.close()
                    kept = ("the last good checkpoint is kept" if self.progress_saved or not self.fresh else
                            "the run was removed")
                    retry = ("Try a lower --lr" if self.fresh and not self.progress_saved else  # the run is gone
                             "Try a lower --lr in a new run (--resume keeps a run's settings): another --out")
                    raise Diverged(f"loss became {loss_value.item()} at step {self.step}; stopped without saving it "
                                    f"({kept}). {retry}")
                self.opt.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), s.grad_clip)
                self.opt.step()
                self.step += 1
                self.elapsed = time.perf_counter() - started
                record = dict(step=self.step, loss=round(loss_value.item(), 6), lr=lr, elapsed_s=round(self.elapsed, 2))
                if not main:
                    continue
                if self.step % s.eval_every == 0 or self.step == s.steps or self.step in saves:
                    last_eval = self.evaluate()
                    record.update({f"eval_{k}": v for k, v in last_eval.items()})
                    self._log(record)
                elif self.step % 50 == 0:
                    self._log(record)
                if self.step in saves:
                    checkpoint.save(self.folder.checkpoint(self.step),
                                    self.model, self.step, s.seed)
                if self.step in saves or self.step % s.resume_every == 0:
                    self._save_resume()
                bar.update(1)
                postfix = {"loss": f"{loss_value.item():.4f}"}
                if last_eval:
                    postfix["MAE"] = f"{last_eval['entropy_mae_bits']:.4f}b"
                bar.set_postfix(postfix, refresh=False)
                evaluated = any(k.startswith("eval_") for k in record)
                if self.on_eval is not None and evaluated:
                    self.on_eval(self.step, last_eval)
                if self.stop is not None and evaluated and (reason := self.stop(self.step, last_eval)):
                    stopped = dict(step=self.step, reason=reason)
                    if self.step not in saves:
                        checkpoint.save(self.folder.checkpoint(self.step), self.model, self.step, s.seed)
                    break
            else:
                stopped = None
        bar.close()
        final = last_eval if stopped else self.evaluate()  # on every process (the weights are the same)
        if main:
            self.record.update(status="finished", final=final, wall_time_s=round(self.elapsed, 1),
                               finished=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
            if stopped:
                self.record["stopped"] = stopped
            atomic_write_json(self.folder.record, self.record)
            self.folder.resume.unlink(missing_ok=True)
        return final


def finish(out: str | Path, recipe: Recipe, refused, ignore=(), replay=None, **options) -> dict:
    """The record of a finished run of ``recipe`` in ``out``, however far a run there got before: none is started,
    one stopped is resumed, one finished is taken as it is. This is how a search's trials, a sweep's points and a
    reproduction's cells are trained; they differ only in the recipes they give.

    A run there of another recipe (``Recipe.differences``, less the training settings named in ``ignore``) is
    refused: ``refused(differences)`` is the refusal, in the caller's words. ``replay(step, metrics)`` is given every
    evaluation a run already there logged, before it goes on (a search's pruner sees the whole curve);
    ``options`` go to the trainer (device, progress, on_eval, root, stop).
    """
    folder = RunFolder(out)
    if not folder.has_record():
        Trainer.start(out, recipe, **options).run()
        return folder.read_record()
    record = folder.read_record()
    if differences := recipe.differences(record, ignore):
        raise UserError(refused(differences))
    for logged in folder.logged_lines() if replay is not None else ():
        if evaluated := {key.removeprefix("eval_"): v for key, v in logged.items() if key.startswith("eval_")}:
            replay(logged["step"], evaluated)
    if record.get("status") != "finished":
        Trainer.resume(out, **options).run()
        record = folder.read_record()
    return record


__all__ = ["Trainer", "checkpoint_steps", "finish", "held_out_metrics", "lr_at"]
