"""The workspace the bad-input tests run in: shipped-looking runs, broken files, hostile pickles and
resume folders that disagree with themselves, built once per module and copied for each case; and a
snapshot of every file's hash, to prove a bad input changed nothing."""
from __future__ import annotations

import hashlib
import json
import os
import pickle
import shutil
from pathlib import Path

MARKER = "PWNED"  # the file a hostile pickle creates if it is ever unpickled


class Exploit:
    """Unpickling this creates MARKER in the current folder: proof that a pickle was loaded."""

    def __reduce__(self):
        return (os.system, (f"touch {MARKER}",))



def build_workspace(root: Path) -> None:
    """The files the catalogue refers to: one tiny finished run, and every kind of broken file."""
    import torch
    from safetensors.torch import save as save_bytes

    from interp import checkpoint
    from interp.recipe import stated
    from interp.train import TrainSettings, Trainer

    settings = TrainSettings(steps=20, batch_size=8, warmup=2, eval_every=20, eval_size=20)
    Trainer.start(root / "tiny",
                  stated(dict(name="bijection", V=6, L=5), "transformer", dict(d_model=16, n_layers=1, n_heads=2),
                         settings), device="cpu", progress=False).run()
    good = root / "tiny" / "checkpoints" / checkpoint.checkpoint_name(20)
    meta, tensors = checkpoint.read(good)
    record = json.loads((root / "tiny" / "run.json").read_text())

    def with_meta(name: str, change) -> None:
        edited = json.loads(json.dumps(meta))
        change(edited)
        (root / name).write_bytes(save_bytes(tensors, metadata={"interp": json.dumps(edited)}))

    with_meta("odd-task.safetensors", lambda m: m["task"].update(colour=3))
    with_meta("nan-task.safetensors", lambda m: m["task"].update(V=float("nan")))
    with_meta("odd-arch.safetensors", lambda m: m.update(arch="rnn9000"))
    with_meta("odd-model.safetensors", lambda m: m["model"].update(colour="red"))
    with_meta("reshaped.safetensors", lambda m: m["model"].update(d_model=32))
    (root / "plain.safetensors").write_bytes(save_bytes(tensors))
    shutil.copytree(root / "tiny", root / "old-runs" / "bijection-transformer-cpu")
    (root / "bad-json.safetensors").write_bytes(save_bytes(tensors, metadata={"interp": "{task: bijection"}))
    (root / "truncated.safetensors").write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    (root / "empty.safetensors").write_bytes(b"")
    (root / "notes.safetensors").write_text("these are not weights\n")
    (root / "notes.txt").write_text("a file where a folder is expected\n")
    evil = pickle.dumps(Exploit())
    for name in ("evil.pt", "evil.safetensors", "evil-run/checkpoints/step-00000100.safetensors",
                 "evil-resume/resume.safetensors"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(evil)
    torch.save(tensors, root / "torch-save.safetensors")
    running = dict(record, status="running")
    for folder, content in [
        ("evil-resume", json.dumps(running)),
        ("corrupt-record", '{"task": {"name": "bijection"'),
        ("nan-record", json.dumps(dict(running, train=dict(record["train"], lr=float("nan"))))),
        ("odd-record", json.dumps(dict(running, train=dict(record["train"], stepz=3)))),
    ]:
        (root / folder).mkdir(exist_ok=True)
        (root / folder / "run.json").write_text(content)
    # A run whose latest checkpoint is fine but an earlier one (read by frame-precision) is a pickle.
    shutil.copytree(root / "tiny", root / "half-evil")
    (root / "half-evil" / "checkpoints" / checkpoint.checkpoint_name(10)).write_bytes(evil)
    # A resume state whose run.json describes another task.
    (root / "mixed-run").mkdir()
    (root / "mixed-run" / "run.json").write_text(json.dumps(dict(running, task=dict(record["task"], V=8, L=7))))
    shutil.copy(good, root / "mixed-run" / "resume.safetensors")
    (root / "empty-folder").mkdir()
    (root / "read-only").mkdir()
    build_hardening_workspace(root, meta, tensors, record, with_meta)
    build_round_three_workspace(root, tensors)
    build_round_four_workspace(root)


def build_round_four_workspace(root: Path) -> None:
    """Broken search folders (a study of random bytes, one cut to its header, one a folder; a trial's record that
    is not JSON, a trial's metrics log that is a folder), GGUF files cut short or with an absurd header, and an
    output folder whose result JSON is a folder beside an earlier page."""
    import random

    import gguf
    import numpy as np

    for folder, name, content in [("search-garbage", "study.db", random.Random(0).randbytes(4096)),
                                  ("search-truncated", "study.db", b"SQLite format 3\x00" + bytes(84)),
                                  ("search-folder", "study.db/keep", b"a folder where the study is expected\n"),
                                  ("search-record", "trials/lr=1e-3/run.json", b"not json"),
                                  ("search-metrics", "trials/lr=1e-3/run.json", b"{}"),
                                  ("search-metrics", "trials/lr=1e-3/metrics.jsonl/keep", b"a folder\n"),
                                  ("calib-out", "tiny/calibration.html", b"an earlier page\n"),
                                  ("calib-out", "tiny/calibration.json/keep", b"a folder\n")]:
        (root / folder / name).parent.mkdir(parents=True, exist_ok=True)
        (root / folder / name).write_bytes(content)
    writer = gguf.GGUFWriter(str(root / "whole.gguf"), "llama")  # one 1 MB tensor: a whole file, not a model
    writer.add_tensor("token_embd.weight", np.zeros((256, 1024), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    whole = (root / "whole.gguf").read_bytes()
    (root / "short.gguf").write_bytes(whole[:len(whole) // 2])
    (root / "stub.gguf").write_bytes(whole[:100])
    (root / "many-tensors.gguf").write_bytes(whole[:8] + (2 ** 62).to_bytes(8, "little") + whole[16:])


def build_round_three_workspace(root: Path, tensors: dict) -> None:
    """The file links are planted to, a metrics log that is a folder, integer weights, a misnamed checkpoint."""
    import torch
    from safetensors.torch import save as save_bytes

    from interp import checkpoint, load

    (root / "victim.txt").write_text("a file outside any run, which a planted link points to\n")
    shutil.copytree(root / "paused", root / "metrics-folder")
    (root / "metrics-folder" / "metrics.jsonl").mkdir()
    (root / "metrics-folder" / "metrics.jsonl" / "keep").write_text("a folder is copied only with a file in it\n")
    meta = checkpoint.read(root / "tiny" / "checkpoints" / checkpoint.checkpoint_name(20), tensors=False)[0]
    integral = {k: v.to(torch.int64) if k == "embed.W_E" else v for k, v in tensors.items()}
    (root / "int-weights.safetensors").write_bytes(save_bytes(integral, metadata={"interp": json.dumps(meta)}))
    shutil.copytree(root / "tiny", root / "misnamed")
    last = root / "misnamed" / "checkpoints" / checkpoint.checkpoint_name(20)
    checkpoint.save(last.with_name(checkpoint.checkpoint_name(10)), load(last), 15, 0)  # named 10, says 15


def build_hardening_workspace(root: Path, meta: dict, tensors: dict, record: dict, with_meta) -> None:
    """Documents of the wrong shape, broken weights, and resume folders that disagree with themselves."""
    import torch
    from safetensors.torch import save as save_bytes

    from interp import checkpoint
    from interp.recipe import stated
    from interp.train import Trainer, TrainSettings, loss_fn

    # -- checkpoint metadata and weights
    with_meta("number-task.safetensors", lambda m: m.update(task=3))
    with_meta("string-step.safetensors", lambda m: m.update(step="20"))
    with_meta("big-seed.safetensors", lambda m: m.update(seed=2 ** 40))
    with_meta("huge-model.safetensors", lambda m: m["model"].update(d_model=8192, n_layers=48, n_heads=8))
    (root / "deep.safetensors").write_bytes(save_bytes(tensors, metadata={"interp": "[" * 100_000 + "]" * 100_000}))
    (root / "list-meta.safetensors").write_bytes(save_bytes(tensors, metadata={"interp": "[1, 2]"}))
    name = next(k for k in tensors if k.endswith("W_Q"))
    for file, value in (("nan.safetensors", float("nan")), ("inf.safetensors", float("inf"))):
        broken = dict(tensors, **{name: tensors[name].clone().fill_(value)})
        (root / file).write_bytes(save_bytes(broken, metadata={"interp": json.dumps(meta)}))
    # -- run records (resumed)
    running = dict(record, status="running")
    for folder, content in [
        ("number-record", json.dumps(dict(running, task=3)).encode()),
        ("string-record", json.dumps(dict(running, train=dict(record["train"], steps="many"))).encode()),
        ("seed-record", json.dumps(dict(running, train=dict(record["train"], seed=-1))).encode()),
        ("betas-record", json.dumps(dict(running, train=dict(record["train"], betas=[2, 0.9]))).encode()),
        ("list-record", b"[1, 2]"),
        ("deep-record", b"[" * 100_000 + b"]" * 100_000),
        ("latin1-record", b'{"status": "r\xe9sum\xe9"}'),  # Latin-1, not UTF-8
    ]:
        (root / folder).mkdir()
        (root / folder / "run.json").write_bytes(content)
    # run.json changed to another task setting, no resume state: resuming would overwrite the checkpoints
    shutil.copytree(root / "tiny", root / "changed-run")
    (root / "changed-run" / "run.json").write_text(json.dumps(dict(running, task=dict(record["task"], V=8, L=7))))
    # -- a run paused after one step (a real resume state), and resume states broken in each way
    settings = TrainSettings(steps=20, batch_size=8, warmup=2, eval_every=20, eval_size=20)
    paused = Trainer.start(root / "paused",
                           stated(dict(name="bijection", V=6, L=5), "transformer",
                                  dict(d_model=16, n_layers=1, n_heads=2), settings), device="cpu", progress=False)
    loss_fn(paused.model, paused.task.sample(8, generator=torch.Generator().manual_seed(0)), "soft").backward()
    paused.opt.step()
    paused.step = 1
    paused._save_resume()
    paused.close()
    state_meta, state = checkpoint.read(root / "paused" / "resume.safetensors")
    moment = "optim.0.exp_avg"
    for folder, meta_change, tensor_change in [
        ("negative-step", dict(step=-5), {}),
        ("future-step", dict(step=10 ** 6), {}),
        ("short-state", {}, {name: None}),
        ("bad-optimizer", {}, {moment: torch.zeros(3)}),
        ("nan-state", {}, {name: state[name].clone().fill_(float("nan"))}),
    ]:
        shutil.copytree(root / "paused", root / folder)
        changed = {k: v for k, v in (state | tensor_change).items() if v is not None}
        (root / folder / "resume.safetensors").write_bytes(
            save_bytes(changed, metadata={"interp": json.dumps(state_meta | meta_change)}))
    # -- frame-precision over a run whose earlier checkpoint is another model
    shutil.copytree(root / "tiny", root / "mixed-models")
    import models
    import tasks
    other = models.build("transformer", tasks.make("bijection", V=6, L=5), dict(d_model=32, n_layers=1, n_heads=2))
    checkpoint.save(root / "mixed-models" / "checkpoints" / checkpoint.checkpoint_name(10), other, 10, 0)
    # -- reproduce over a corrupt run record
    shutil.copytree(root / "old-runs", root / "bad-runs")
    (root / "bad-runs" / "bijection-transformer-cpu" / "run.json").write_text(json.dumps(dict(record, arch=5)))


def snapshot(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}
