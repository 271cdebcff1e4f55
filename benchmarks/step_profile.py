"""Where one training step's time goes, per architecture: sampling, forward, backward, optimizer,
evaluation and the hook points, and what deterministic kernels and bf16 autocast change.

    OMP_NUM_THREADS=1 python benchmarks/step_profile.py [--tasks recall] [--archs transformer,mamba,lstm,mlp]
                                                        [--steps 5] [--device auto] [--batch-size N]

Each architecture trains as ``interp train --task T --arch A --preset cpu`` would on the task itself
(the recipe's model, batch size, loss and learning rate; a curriculum's short first stage is left out):
a fresh batch per step drawn on the CPU and moved to the device, the loss under the recipe's autocast,
backward, gradient clipping and AdamW, all under ``interp.train.deterministic`` as training runs. Each
phase is the median over ``--steps`` steps after one warm-up (CUDA is synchronised at every boundary).

Columns: ``sample`` the batch drawn (and moved); ``fwd``, ``bwd``, ``opt`` the step's phases, ``step`` their
sum; ``eval`` one held-out evaluation of the recipe's eval_size (training does one every eval_every steps:
``eval/step`` is its share of a step); ``hooks`` a forward pass with an identity hook on every hook point
minus one without (what ``run_with_hooks`` adds; training attaches none) and ``points`` how many there are;
``nondet`` a step (fwd + bwd + opt) without deterministic algorithms over one with them, ``nofill`` with
them but without their NaN fill of every new tensor (torch.utils.deterministic.fill_uninitialized_memory);
``bf16`` a step under bf16 autocast over one in float32 (whatever the recipe says). Ratios below 1 are faster.
"""
from __future__ import annotations

import argparse
import re
import statistics
import time
from contextlib import contextmanager, nullcontext

import torch

import models
from analyses.base import held_out_batch
from analyses.calibration import measure
from interp import recipe
from interp.train import bf16_problem, denormals_flushed, deterministic, loss_fn, retain_freed_memory


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


class Clock:
    """Seconds per named phase, one list per phase; ``tick`` closes the phase that began at the last tick."""

    def __init__(self, device: str):
        self.device, self.times, self.last = device, {}, None

    def start(self) -> None:
        sync(self.device)
        self.last = time.perf_counter()

    def tick(self, phase: str) -> None:
        sync(self.device)
        now = time.perf_counter()
        self.times.setdefault(phase, []).append(now - self.last)
        self.last = now

    def median(self, phase: str) -> float:
        return statistics.median(self.times[phase][1:])  # the first is a warm-up


@contextmanager
def no_fill():
    """Deterministic algorithms without their NaN fill of uninitialised memory (restored afterwards)."""
    import torch.utils.deterministic as det

    before = det.fill_uninitialized_memory
    det.fill_uninitialized_memory = False
    try:
        yield
    finally:
        det.fill_uninitialized_memory = before


def train_steps(model, spec, device: str, steps: int, clock: Clock, kernels, bf16: bool, label: str = "") -> None:
    """``steps`` training steps as interp.train runs them, timed phase by phase into ``clock``."""
    s = spec.train
    opt = torch.optim.AdamW(model.parameters(), lr=s.lr, betas=s.betas, weight_decay=s.weight_decay)
    autocast = torch.autocast(torch.device(device).type, dtype=torch.bfloat16) if bf16 else nullcontext()
    model.train()
    for step in range(steps + 1):
        generator = torch.Generator().manual_seed(step)
        with kernels():
            clock.start()
            batch = spec.task.sample(s.batch_size, generator=generator).to(device)
            clock.tick(label + "sample")
            with autocast:
                loss = loss_fn(model, batch, s.loss)
            clock.tick(label + "fwd")
            loss.backward()
            clock.tick(label + "bwd")
            torch.nn.utils.clip_grad_norm_(model.parameters(), s.grad_clip)
            opt.step()
            opt.zero_grad(set_to_none=True)
            clock.tick(label + "opt")


def hook_points(model) -> list:
    from transformer_lens.hook_points import HookPoint

    return [m for m in model.modules() if isinstance(m, HookPoint)]


def forward_time(model, tokens, device: str, repeats: int, hooked: bool) -> float:
    """Median seconds of a no-grad forward pass, with an identity hook on every hook point or none."""
    points = hook_points(model) if hooked else []
    for point in points:
        point.add_hook(lambda x, hook: x)
    try:
        times = []
        with torch.no_grad():
            for _ in range(repeats + 1):
                sync(device)
                start = time.perf_counter()
                model(tokens)
                sync(device)
                times.append(time.perf_counter() - start)
    finally:
        for point in points:
            point.remove_hooks()
    return statistics.median(times[1:])


def recipe_and_model(task_name: str, arch: str, device: str, batch_size: int | None):
    """The cpu preset's recipe for the task (no curriculum; ``batch_size`` if given) and a fresh model on ``device``."""
    spec = recipe.resolve(task_name, arch, "cpu", train_options={"curriculum": []} | (
        {"batch_size": batch_size} if batch_size else {}))
    return spec, models.build(arch, spec.task, spec.model, seed=0).to(device)


def profile(task_name: str, arch: str, device: str, steps: int, batch_size: int | None) -> dict:
    """One architecture's row (milliseconds and ratios)."""
    spec, model = recipe_and_model(task_name, arch, device, batch_size)
    s = spec.train
    # bf16 only where this machine runs the model in it (as interp train decides): a CPU without bf16 kernels
    # for an operator (oneDNN's LSTM without avx512_bf16) trains in float32, and has no bf16/fp32 ratio
    probe = spec.task.sample(1, generator=torch.Generator().manual_seed(0)).tokens.to(device)
    bf16_runs = bf16_problem(model, probe, device) is None
    bf16 = recipe.bf16_on(s.bf16, device) and bf16_runs  # the recipe's precision on this device
    clock = Clock(device)
    on = lambda: deterministic(device)
    variants = {"": (on, bf16), "nondet/": (nullcontext, bf16),
                "nofill/": (lambda: _both(on(), no_fill()), bf16), "fp32/": (on, False)}
    if bf16_runs:
        variants["bf16/"] = (on, True)
    for label, (kernels, autocast) in variants.items():
        train_steps(model, spec, device, steps, clock, kernels, autocast, label)
    step = lambda label: sum(clock.median(label + phase) for phase in ("fwd", "bwd", "opt"))
    eval_batch = held_out_batch(spec.task, s.eval_size, s.seed).to(device)
    model.eval()
    start = time.perf_counter()
    measure(model, eval_batch)
    sync(device)
    evaluation = time.perf_counter() - start
    tokens = spec.task.sample(s.batch_size, generator=torch.Generator().manual_seed(0)).tokens.to(device)
    plain = forward_time(model, tokens, device, steps, hooked=False)
    hooked = forward_time(model, tokens, device, steps, hooked=True)
    ms = lambda seconds: round(seconds * 1e3, 1)
    return dict(arch=arch, params=models.n_params(model), batch=s.batch_size, T=tokens.shape[1],
                sample=ms(clock.median("sample")), fwd=ms(clock.median("fwd")), bwd=ms(clock.median("bwd")),
                opt=ms(clock.median("opt")), step=ms(step("")), eval=ms(evaluation),
                eval_per_step=ms(evaluation / s.eval_every), hooks=ms(hooked - plain),
                points=len(hook_points(model)), nondet=round(step("nondet/") / step(""), 2),
                nofill=round(step("nofill/") / step(""), 2),
                bf16=round(step("bf16/") / step("fp32/"), 2) if bf16_runs else "n/a",
                steps_per_s=round(1 / (step("") + clock.median("sample") + evaluation / s.eval_every), 2))


def backward_ops(task_name: str, arch: str, device: str, batch_size: int | None, top: int = 6) -> list[tuple[str, float]]:
    """The ``top`` operators of one training step's backward pass by their own time on the device (the CPU's time on
    a CPU), in milliseconds, from torch.profiler (after a warm-up step): what the backward's time is made of."""
    from torch.profiler import ProfilerActivity, profile as torch_profile

    spec, model = recipe_and_model(task_name, arch, device, batch_size)
    probe = spec.task.sample(1, generator=torch.Generator().manual_seed(0)).tokens.to(device)
    autocast = (torch.autocast(torch.device(device).type, dtype=torch.bfloat16)
                if recipe.bf16_on(spec.train.bf16, device) and bf16_problem(model, probe, device) is None
                else nullcontext())
    batch = spec.task.sample(spec.train.batch_size, generator=torch.Generator().manual_seed(0)).to(device)
    cuda = device.startswith("cuda")
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with deterministic(device):
        for warm in (True, False):
            with autocast:
                loss = loss_fn(model, batch, spec.train.loss)
            sync(device)
            if warm:
                loss.backward()
                continue
            with torch_profile(activities=activities) as prof:
                loss.backward()
                sync(device)
    own = lambda e: (getattr(e, "self_device_time_total", None) or getattr(e, "self_cuda_time_total", 0)) if cuda \
        else e.self_cpu_time_total
    events = sorted(prof.key_averages(), key=own, reverse=True)[:top]
    return [(kernel_name(e.key), round(own(e) / 1e3, 2)) for e in events if own(e) > 0]


def kernel_name(key: str) -> str:
    """A profiler key without its return type, anonymous namespace, template arguments and signature:
    ``void (anonymous namespace)::indexing_backward_kernel<float, 4>(long const*, ...)`` reads
    ``indexing_backward_kernel`` (a CUDA kernel's full key runs to hundreds of characters)."""
    name = re.sub(r"^void ", "", key).replace("(anonymous namespace)::", "")
    return re.split(r"[<(]", name, maxsplit=1)[0] or key


@contextmanager
def _both(first, second):
    with first, second:
        yield


COLUMNS = ["arch", "params", "batch", "T", "sample", "fwd", "bwd", "opt", "step", "eval", "eval_per_step", "hooks",
           "points", "nondet", "nofill", "bf16", "steps_per_s"]


def table(rows: list[dict]) -> str:
    """A Markdown table of the rows (milliseconds unless a ratio or a count)."""
    lines = ["| task | " + " | ".join(COLUMNS) + " |", "|" + "---|" * (len(COLUMNS) + 1)]
    lines += [f"| {row['task']} | " + " | ".join(f"{row[c]:,}" if isinstance(row[c], int) else str(row[c])
                                                  for c in COLUMNS) + " |" for row in rows]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", default="recall", help="comma-separated task names")
    parser.add_argument("--archs", default=",".join(models.ARCHS))
    parser.add_argument("--steps", type=int, default=5, help="timed steps per variant (after one warm-up)")
    parser.add_argument("--device", default="auto", help="auto: cuda when present, else cpu")
    parser.add_argument("--batch-size", type=int, help="instead of the recipe's")
    args = parser.parse_args()
    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    retain_freed_memory()  # as `interp train` does
    print(f"one training step per architecture on {device}, {torch.get_num_threads()} thread(s), median of "
          f"{args.steps} steps; milliseconds unless a ratio", flush=True)
    rows = []
    with denormals_flushed(device == "cpu"):  # as `interp train` runs on the CPU
        for task_name in args.tasks.split(","):
            for arch in args.archs.split(","):
                rows.append(dict(task=task_name, **profile(task_name, arch, device, args.steps, args.batch_size)))
                print(f"  {task_name} {arch}: {rows[-1]['step']} ms a step", flush=True)
    print(table(rows))


if __name__ == "__main__":
    main()
