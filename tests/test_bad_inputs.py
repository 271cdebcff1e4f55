"""The catalogue of bad inputs: every one gets one clear line, a non-zero exit, and loses nothing.

This file is the single source of docs/bad-inputs.md: ``CATALOGUE`` below holds each bad input
and the exact message it gets, the parametrised test runs them all, and

    python -m tests.test_bad_inputs          # rewrites docs/bad-inputs.md from CATALOGUE

regenerates the table. ``test_the_doc_is_current`` fails when the two differ, so they cannot drift.

Every case runs in a fresh copy of a small working folder (``WORKSPACE`` files: a tiny trained run,
corrupt and hostile checkpoints, broken run records), with that folder as the current directory,
so paths in messages are the relative paths a user typed. Before and after, every file in it is
hashed: a bad input may not create, change or delete any file (a half-written output, a temp file
left behind, or the marker file a hostile pickle would create all fail the test).
"""
from __future__ import annotations

import errno
import json
import os
import shlex
import shutil
import socket
import sys
import tempfile
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests import tiny
from tests.explorer_requests import REQUESTS, explorer_request
from tests.workspace import MARKER, snapshot

DOC = Path(__file__).resolve().parent.parent / "docs" / "bad-inputs.md"


@dataclass(frozen=True)
class Case:
    what: str  # the kind of bad input, in words
    call: str  # an `interp ...` command line, or a Python expression (with interp, tasks, models, analyses)
    message: str  # the exact line the user sees (CLI: stderr; Python: "ExceptionType: message"), see expected()
    code: int = 1  # CLI exit status
    fault: str | None = None  # injected: "full-disk", "read-only", "port-in-use", "locked" or "fifo" (see injected)
    at: str = ""  # where the "link" fault (a symbolic link to victim.txt) or the "pipe" fault (a FIFO) is planted
    no_gpu: bool = False  # the case is a machine without a GPU: skipped where one exists (it would train there)


TRAIN = "interp train --out new-run"  # a fresh run folder; every bad input must leave it uncreated
BUSY_PORT = 48213  # held open by the "port-in-use" fault
TINY_RUN = " ".join(tiny.cli_args(n_layers=1))
# A one-trial search of a tiny model: every bad input below is refused before its first trial trains
TUNE = ("interp tune --task bijection -T V=3 -T L=2 --arch transformer -M d_model=8 -M n_heads=2 --steps 4 "
        "--batch-size 4 --eval-size 8 --out search --space lr=1e-3")
MOVED = ("interp: error: --moved continues a search copied here, and a search's folder holds tune.json, trials, "
         "study.db; ")
LINK = "the toolkit never writes through a link (it would change the file the link points to): remove it, or write elsewhere"

CATALOGUE = [
    # -- names -------------------------------------------------------------------------------------
    Case("unknown task", f"{TRAIN} --task sudoku",
         "interp: error: unknown task 'sudoku'; valid tasks: {TASKS}"),
    Case("unknown architecture", f"{TRAIN} --arch rnn9000",
         "interp: error: unknown architecture 'rnn9000'; valid architectures: {ARCHS}"),
    Case("unknown preset", f"{TRAIN} --preset huge",
         "interp: error: unknown preset 'huge'; valid presets: cpu, paper"),
    Case("unknown analysis", "interp run telepathy --ckpt tiny",
         "interp: error: unknown analysis 'telepathy'; valid analyses: {ANALYSES}"),
    Case("unknown analysis option", "interp run key-orthogonality --ckpt tiny --colour red",
         'interp: error: unknown option --colour for key-orthogonality; its options: --group, --layer, --head'),
    Case("unknown output format", "interp run calibration --ckpt tiny --format svg",
         'interp: error: unknown format svg; choose from pdf, html, json, png'),
    Case("unknown command", "interp frobnicate",
         "interp: error: No such command 'frobnicate'.", code=2),
    Case("unknown flag", "interp train --stepz 10",
         "interp: error: No such option '--stepz'. (Did you mean one of: '--help', '--seed', '--steps'?)", code=2),
    Case("unknown task (Python)", "tasks.make('sudoku')",
         "ConfigError: unknown task 'sudoku'; valid tasks: {TASKS}"),
    Case("unknown analysis (Python)", "analyses.run('telepathy', interp.load('tiny'))",
         "AnalysisError: unknown analysis 'telepathy'; valid analyses: {ANALYSES}"),
    # -- task settings -----------------------------------------------------------------------------
    Case("unknown task setting", f"{TRAIN} -T colour=3",
         "interp: error: unknown setting(s) colour for task 'bijection'; valid settings: V, L, replacement, paired"),
    Case("task setting of the wrong type", f"{TRAIN} -T V=abc",
         "interp: error: bijection: V must be an integer, got 'abc'"),
    Case("bool where an integer is expected", f"{TRAIN} --task hmm -T K=true",
         'interp: error: hmm: K must be an integer, got True'),
    Case("task size out of range", f"{TRAIN} -T V=1",
         'interp: error: bijection: V must be at least 2, got V=1'),
    Case("task sizes that contradict each other", f"{TRAIN} -T V=5 -T L=9",
         'interp: error: bijection: L=9 > V=5 needs keys drawn with replacement (pass replacement=True) or L <= V'),
    Case("NaN in a task setting", f"{TRAIN} --task hmm -T concentration=NaN",
         'interp: error: hmm: concentration must be a finite number > 0, got nan'),
    Case("infinity in a task setting", f"{TRAIN} --task regression -T noise_std=Infinity",
         'interp: error: regression: noise_std must be a finite positive number, got inf'),
    Case("NaN probability", f"{TRAIN} --task recall -T p_unbound=NaN",
         'interp: error: recall: p_unbound must be in [0, 1), got p_unbound=nan'),
    Case("a table pool larger than the pools it draws from", f"{TRAIN} --task recall -T pool=300",
         'interp: error: recall: pool=300 must hold the table (at least N=64) and fit in both pools (at most '
         'n_keys=256, n_values=256)'),
    Case("setting not KEY=VALUE", f"{TRAIN} -T V",
         "interp: error: task option 'V' is not KEY=VALUE"),
    Case("word where true/false is expected", f"{TRAIN} -T replacement=maybe",
         "interp: error: bijection: replacement must be true or false, got 'maybe'"),
    Case("float where an integer is expected (Python)", "tasks.make('bijection', V=5.5)",
         'ConfigError: bijection: V must be an integer, got 5.5'),
    Case("task config that is not a dict (Python)", "tasks.from_config('bijection')",
         "ConfigError: a task config is a dict with a 'name', like {'name': 'bijection', 'V': 20}; got 'bijection'"),
    Case("task config without a name (Python)", "tasks.from_config({'V': 6})",
         "ConfigError: a task config is a dict with a 'name', like {'name': 'bijection', 'V': 20}; got {'V': 6}"),
    # -- model settings ----------------------------------------------------------------------------
    Case("unknown model setting", f"{TRAIN} -M colour=red",
         'interp: error: unknown transformer setting(s) colour; valid: {TRANSFORMER}'),
    Case("position offsets without a longer position table", f"{TRAIN} -T V=6 -T L=5 -M position_offsets=true",
         'interp: error: transformer: position_offsets=true needs a position table longer than the training sequences '
         '(9 tokens): set -M n_ctx to the longest sequence it should read, e.g. -M n_ctx=18'),
    Case("--init from a checkpoint of another architecture", f"{TRAIN} --arch mlp --init tiny",
         'interp: error: --init tiny/checkpoints/step-00000020.safetensors is a transformer checkpoint; this run '
         'trains a mlp'),
    Case("non-positive layer count", f"{TRAIN} -M n_layers=0",
         'interp: error: transformer: n_layers must be a positive integer, got 0'),
    Case("NaN in a model setting", f"{TRAIN} -M d_model=NaN",
         'interp: error: transformer: d_model must be a positive integer, got nan'),
    # One weight of 2^23 x 2^23 floats (256 TiB) exceeds any 64-bit address space: refused at once.
    Case("model wider than any memory", f"{TRAIN} -T V=6 -T L=5 -M d_model=8388608 -M n_heads=1 -M n_layers=1",
         'interp: error: transformer: d_model must be at most 1,048,576, got 8,388,608'),
    Case("width not divisible by heads", f"{TRAIN} -M d_model=30 -M n_heads=4",
         'interp: error: transformer: d_model=30 is not divisible by n_heads=4'),
    # -- training settings -------------------------------------------------------------------------
    Case("zero steps", f"{TRAIN} --steps 0",
         'interp: error: steps must be a positive integer, got 0'),
    Case("negative batch size", f"{TRAIN} --batch-size -4",
         'interp: error: batch-size must be a positive integer, got -4'),
    Case("NaN learning rate", f"{TRAIN} --lr nan",
         'interp: error: lr must be a finite positive number, got nan'),
    Case("negative warm-up", f"{TRAIN} --warmup -5",
         'interp: error: warmup must be a non-negative integer, got -5'),
    Case("an anneal longer than the run", f"{TRAIN} --decay 1.5",
         'interp: error: decay must be a fraction in (0, 1] (the share of the run the rate anneals over), got 1.5'),
    Case("number of the wrong type", f"{TRAIN} --steps ten",
         "interp: error: Invalid value for '--steps': 'ten' is not a valid integer.", code=2),
    Case("unknown loss", f"{TRAIN} --loss medium",
         "interp: error: Invalid value for '--loss': 'medium' is not one of 'soft', 'hard'.", code=2),
    Case("seed out of range", f"{TRAIN} --seed 99999999999999999999",
         'interp: error: seed must be an integer from 0 to 2^32 - 1, got 99999999999999999999'),
    Case("no CUDA device", f"{TRAIN} --device cuda",
         'interp: error: --device cuda was asked for, but no CUDA device is available', no_gpu=True),
    Case("unknown device", f"{TRAIN} --device tpu {TINY_RUN}",
         "interp: error: unknown device 'tpu'; use auto, cpu or cuda"),
    # -- run folders -------------------------------------------------------------------------------
    Case("training into an existing run", "interp train --out tiny",
         'interp: error: tiny already holds a run; pass --resume to continue it or choose another --out'),
    Case("resume without a run", "interp train --resume --out nowhere",
         'interp: error: nothing to resume: nowhere/run.json does not exist (start the run without --resume)'),
    Case("resume of a finished run", "interp train --resume --out tiny",
         'interp: error: tiny has already finished; nothing to resume'),
    Case("resume with new settings", "interp train --resume --out tiny --steps 50",
         'interp: error: --resume continues with the settings in tiny/run.json; drop --steps'),
    Case("corrupt run.json", "interp train --resume --out corrupt-record",
         "interp: error: cannot read corrupt-record/run.json (Expecting ',' delimiter: line 1 column 30 (char 29)); it cannot be resumed, start a new run with another --out"),
    Case("NaN in run.json training settings", "interp train --resume --out nan-record",
         'interp: error: nan-record/run.json is not a valid run record (lr must be a finite positive number, got nan); it cannot be resumed'),
    Case("unknown key in run.json training settings", "interp train --resume --out odd-record",
         "interp: error: odd-record/run.json is not a valid run record (TrainSettings.__init__() got an unexpected keyword argument 'stepz'); it cannot be resumed"),
    Case("resume state of another run", "interp train --resume --out mixed-run",
         'interp: error: mixed-run/resume.safetensors is the state of another run than mixed-run/run.json (their task, architecture or model differ); it cannot be resumed'),
    Case("reproduce over a run trained with other settings",
         "interp reproduce --only bijection --archs transformer --runs old-runs --out repro",
         "interp: error: old-runs/bijection-transformer-cpu was not trained with the cpu preset (task.V: 6 (preset 20); "
         "task.L: 5 (preset 19); model.d_model: 16 (preset 96)); move it away or pass --runs with another folder"),
    Case("sweep axis that is not SETTING=VALUES", "interp sweep --task recall --axis N --out sweep",
         "interp: error: --axis must be SETTING=V1,V2,... with integer values, e.g. --axis N=4,8,16,32,64; got 'N'"),
    Case("sweep over a setting the task does not have", "interp sweep --task hmm --axis depth=2,4 --out sweep",
         "interp: error: depth=2: unknown setting(s) depth for task 'hmm'; valid settings: S, O, K, concentration"),
    Case("sweep over runs that are not run folders", "interp sweep --runs notes.txt --axis K=5 --out sweep",
         "interp: error: --runs: notes.txt is not a run folder (no readable run.json); pass run folders or shipped "
         "model names (`interp list`)"),
    Case("sweep of trained runs with a training budget", "interp sweep --runs tiny --axis L=3,4 --steps 5 --out sweep",
         "interp: error: an evaluated sweep (--runs) measures the runs as trained; drop --steps, or drop --runs "
         "to train one model per point"),
    Case("sweep with a learning rate that is not a number",
         "interp sweep --task recall --axis N=4,8 --lr 1e-3,fast --out sweep",
         "interp: error: --lr must be one or more comma-separated numbers, e.g. --lr 1e-3,3.2e-3,1e-2; got "
         "'1e-3,fast'"),
    Case("sweep with rates for an architecture it does not train",
         "interp sweep --task recall --axis N=4,8 --archs transformer,mamba --lr 1e-3,3.2e-3 --lr lstm=1e-3 "
         "--out sweep",
         "interp: error: --lr lstm=1e-3: 'lstm' is not swept here; give rates to one of transformer, mamba"),
    Case("sweep with a setting that moves with the axis, one value short",
         "interp sweep --task recall --axis N=4,8 --axis-with pool=8 --out sweep",
         "interp: error: --axis-with pool: give one value per axis value (2: 4, 8), got 1"),
    Case("sweep with a curriculum name the task does not have",
         "interp sweep --task bijection --axis V=3,4 --curriculum dense-mix --out sweep",
         "interp: error: task 'bijection' has no curriculum named 'dense-mix' (it names none); give the stages "
         "as JSON instead, e.g. '[[2000, {...}]]'"),
    Case("--out is a file", f"interp train --out notes.txt {TINY_RUN}",
         'interp: error: cannot write to notes.txt: notes.txt is a file, not a folder; choose another folder with --out'),
    Case("output folder that cannot be written", f"interp train --out read-only/run {TINY_RUN}",
         'interp: error: cannot write to read-only/run: Permission denied; choose another folder with --out',
         fault="read-only"),
    Case("disk full when a run starts", f"{TRAIN} {TINY_RUN}",
         'interp: error: could not write new-run/run.json: No space left on device; it was left as it was (free some space, or write elsewhere with --out)', fault="full-disk"),
    # -- checkpoint files --------------------------------------------------------------------------
    Case("missing checkpoint", "interp run calibration --ckpt missing.safetensors",
         'interp: error: checkpoint not found: missing.safetensors (pass a run folder, a .safetensors file or a shipped model: {SHIPPED})'),
    Case("misspelled shipped model", "interp run calibration --ckpt bijection-transformer",
         'interp: error: checkpoint not found: bijection-transformer; did you mean bijection-transformer-cpu or '
         'bijection-transformer-equal or bijection-transformer-dense? (pass a run folder, a .safetensors file or a '
         'shipped model: {SHIPPED})'),
    Case("folder without checkpoints", "interp run calibration --ckpt empty-folder",
         'interp: error: empty-folder holds no checkpoints/step-*.safetensors; is it a run folder from `interp train`?'),
    Case("empty file", "interp run calibration --ckpt empty.safetensors",
         'interp: error: empty.safetensors is empty or truncated; it is not a safetensors checkpoint'),
    Case("truncated checkpoint", "interp run calibration --ckpt truncated.safetensors",
         'interp: error: truncated.safetensors is not a readable safetensors checkpoint (Error while deserializing: incomplete metadata, file not fully covered)'),
    Case("corrupt checkpoint (text)", "interp run calibration --ckpt notes.safetensors",
         'interp: error: notes.safetensors is not a valid safetensors file (corrupt or truncated header)'),
    Case("pickle (.pt) that would run code", "interp run calibration --ckpt evil.pt",
         'interp: error: evil.pt looks like a pickle/torch.save file; pickles can run arbitrary code when loaded, so only .safetensors checkpoints are accepted (re-save with safetensors)'),
    Case("pickle renamed .safetensors", "interp run calibration --ckpt evil.safetensors",
         'interp: error: evil.safetensors looks like a pickle/torch.save file; pickles can run arbitrary code when loaded, so only .safetensors checkpoints are accepted (re-save with safetensors)'),
    Case("torch.save zip renamed .safetensors", "interp run calibration --ckpt torch-save.safetensors",
         'interp: error: torch-save.safetensors looks like a pickle/torch.save file; pickles can run arbitrary code when loaded, so only .safetensors checkpoints are accepted (re-save with safetensors)'),
    Case("pickle as a run's latest checkpoint", "interp run calibration --ckpt evil-run",
         'interp: error: evil-run/checkpoints/step-00000100.safetensors looks like a pickle/torch.save file; pickles can run arbitrary code when loaded, so only .safetensors checkpoints are accepted (re-save with safetensors)'),
    Case("pickle among several checkpoints", "interp run compare --ckpt tiny --ckpt evil.pt",
         'interp: error: evil.pt looks like a pickle/torch.save file; pickles can run arbitrary code when loaded, so only .safetensors checkpoints are accepted (re-save with safetensors)'),
    Case("pickle among a run's earlier checkpoints", "interp run frame-precision --ckpt half-evil",
         'interp: error: half-evil/checkpoints/step-00000010.safetensors looks like a pickle/torch.save file; pickles can run arbitrary code when loaded, so only .safetensors checkpoints are accepted (re-save with safetensors)'),
    Case("pickle as the resume state", "interp train --resume --out evil-resume",
         'interp: error: evil-resume/resume.safetensors looks like a pickle/torch.save file; pickles can run arbitrary code when loaded, so only .safetensors checkpoints are accepted (re-save with safetensors)'),
    Case("pickle (Python)", "interp.load('evil.pt')",
         'UserError: evil.pt looks like a pickle/torch.save file; pickles can run arbitrary code when loaded, so only .safetensors checkpoints are accepted (re-save with safetensors)'),
    Case("safetensors without interp metadata", "interp run calibration --ckpt plain.safetensors",
         'interp: error: plain.safetensors is a safetensors file without interp metadata; it was not written by `interp train`'),
    Case("malformed config JSON in checkpoint metadata", "interp run calibration --ckpt bad-json.safetensors",
         'interp: error: bad-json.safetensors has malformed interp metadata (not JSON)'),
    Case("unknown task key in checkpoint metadata", "interp run calibration --ckpt odd-task.safetensors",
         "interp: error: odd-task.safetensors: invalid config: unknown setting(s) colour for task 'bijection'; valid settings: V, L, replacement, paired"),
    Case("NaN in checkpoint's task config", "interp run calibration --ckpt nan-task.safetensors",
         'interp: error: nan-task.safetensors: invalid config: bijection: V must be an integer, got nan'),
    Case("unknown architecture in checkpoint metadata", "interp run calibration --ckpt odd-arch.safetensors",
         "interp: error: odd-arch.safetensors: invalid config: unknown architecture 'rnn9000'; valid architectures: {ARCHS}"),
    Case("unknown model key in checkpoint metadata", "interp run calibration --ckpt odd-model.safetensors",
         'interp: error: odd-model.safetensors: invalid config: unknown transformer setting(s) colour; valid: {TRANSFORMER}'),
    Case("weights whose shapes disagree with the config", "interp run calibration --ckpt reshaped.safetensors",
         'interp: error: reshaped.safetensors: weights do not match the config in its metadata (shape of embed.W_E is (12, 16), config says (12, 32))'),
    Case("wrong task for a checkpoint", "interp run belief-clusters --ckpt tiny",
         "interp: error: belief-clusters needs a task with a discrete latent state at every query (its clusters); "
         "'bijection' has none"),
    Case("wrong task for a checkpoint (Python)", "interp.load('tiny', task='hmm')",
         "UserError: tiny/checkpoints/step-00000020.safetensors is a 'bijection' checkpoint, but this needs a 'hmm' one"),
    # -- analysis options --------------------------------------------------------------------------
    Case("analysis option of the wrong type", "interp run calibration --ckpt tiny --n many",
         "interp: error: --n must be int, got 'many'"),
    Case("analysis option out of range", "interp run key-orthogonality --ckpt tiny --layer 7",
         'interp: error: layer 7, head 0 out of range: the model has 1 layers of 2 heads'),
    Case("non-positive sample count", "interp run calibration --ckpt tiny --n 0",
         'interp: error: --n must be from 1 to 10000000, got 0'),
    Case("negative seed", "interp run calibration --ckpt tiny --seed -1",
         'interp: error: --seed must be from 0 to 4294967295, got -1'),
    Case("malformed list option", "interp run length-generalization --ckpt tiny --lengths 5,x",
         "interp: error: --lengths must be comma-separated integers, got '5,x'"),
    Case("unknown device", "interp run calibration --ckpt tiny --device tpu",
         "interp: error: unknown device 'tpu'; use auto, cpu or cuda"),
    Case("several checkpoints for a one-model analysis", "interp run calibration --ckpt tiny --ckpt tiny",
         'interp: error: calibration takes one --ckpt; only compare takes several'),
    # -- output ------------------------------------------------------------------------------------
    Case("--out is a file", "interp run calibration --ckpt tiny --format json --out notes.txt",
         'interp: error: cannot write to notes.txt/tiny: notes.txt is a file, not a folder; choose another folder with --out'),
    Case("output folder that cannot be written", "interp run calibration --ckpt tiny --format json --out read-only",
         'interp: error: cannot write to read-only: Permission denied; choose another folder with --out', fault="read-only"),
    Case("port already in use", f"interp explore --ckpt tiny --port {BUSY_PORT}",
         f"interp: error: port {BUSY_PORT} on 127.0.0.1 is already in use; pick another with --port", fault="port-in-use"),
    Case("pickle given to the explorer", f"interp explore --ckpt evil.pt --port {BUSY_PORT + 1}",
         'interp: error: evil.pt looks like a pickle/torch.save file; pickles can run arbitrary code when loaded, so only .safetensors checkpoints are accepted (re-save with safetensors)'),
    Case("the explorer's numbers without a sequence", "interp explore --ckpt tiny --numbers --ablate H0.0",
         "interp: error: --numbers needs the sequence: --seed N (a held-out sequence) or --tokens '...', one of them"),
    Case("a sequence for the explorer without --numbers", "interp explore --ckpt tiny --seed 3",
         "interp: error: --seed, --tokens and --ablate go with --numbers and --ckpt"),
    Case("the explorer's numbers with an ablation the model lacks", "interp explore --ckpt tiny --numbers --seed 3 --ablate H5.0",
         "interp: error: unknown ablation 'H5.0'; heads are H<layer>.<head> (zero) or M<layer>.<head> (mean), blocks "
         "B<layer>, within the model's 1 layers of 2 heads"),
    Case("disk full while writing figures", "interp run calibration --ckpt tiny --format json,html",
         'interp: error: could not write figures/plotly.min.js: No space left on device; it was left as it was (free some space, or write elsewhere with --out)',
         fault="full-disk"),
    # -- concurrency -------------------------------------------------------------------------------
    Case("training a run another process is training", "interp train --resume --out paused", 'interp: error: paused is in use by another training process (pid 4242); wait for it to end, or stop it first', fault="locked"),
    Case("a new run in a folder another process holds", f"interp train --out paused {TINY_RUN}", 'interp: error: paused is in use by another training process (pid 4242); wait for it to end, or stop it first', fault="locked"),
    # -- documents of the wrong shape --------------------------------------------------------------
    Case("number where the task config is expected (checkpoint)", "interp run calibration --ckpt number-task.safetensors", 'interp: error: number-task.safetensors has invalid interp metadata (task is not a config object with a name)'),
    Case("string where the step is an integer (checkpoint)", "interp run calibration --ckpt string-step.safetensors", "interp: error: string-step.safetensors has invalid interp metadata (step must be a non-negative integer, got '20')"),
    Case("seed out of range (checkpoint)", "interp run calibration --ckpt big-seed.safetensors", 'interp: error: big-seed.safetensors has invalid interp metadata (seed must be an integer from 0 to 2^32 - 1, got 1099511627776)'),
    Case("metadata nested 100,000 deep (checkpoint)", "interp run calibration --ckpt deep.safetensors", 'interp: error: deep.safetensors has malformed interp metadata (not JSON)'),
    Case("metadata that is not an object (checkpoint)", "interp run calibration --ckpt list-meta.safetensors", 'interp: error: list-meta.safetensors has malformed interp metadata (a JSON object is expected)'),
    Case("17 KB file declaring a 1.6 GB model", "interp run calibration --ckpt huge-model.safetensors", 'interp: error: huge-model.safetensors: weights do not match the config in its metadata (shape of embed.W_E is (12, 16), config says (12, 8192))'),
    Case("NaN weights", "interp run calibration --ckpt nan.safetensors", 'interp: error: nan.safetensors: tensor blocks.0.attn.W_Q holds NaN or infinite values; the weights are broken (did training diverge?)'),
    Case("infinite weights", "interp run calibration --ckpt inf.safetensors", 'interp: error: inf.safetensors: tensor blocks.0.attn.W_Q holds NaN or infinite values; the weights are broken (did training diverge?)'),
    Case("NaN weights (Python)", "interp.load('nan.safetensors')", 'UserError: nan.safetensors: tensor blocks.0.attn.W_Q holds NaN or infinite values; the weights are broken (did training diverge?)'),
    Case("a pipe in a run's checkpoints", "interp run calibration --ckpt fifo-run", 'interp: error: fifo-run/checkpoints/step-00000100.safetensors is not a regular file (a pipe or a device?); it is not a checkpoint', fault="fifo"),
    Case("number where the task config is expected (run.json)", "interp train --resume --out number-record", 'interp: error: number-record/run.json is not a valid run record (task must be a JSON object, got 3); it cannot be resumed'),
    Case("string where an integer is expected (run.json)", "interp train --resume --out string-record", "interp: error: string-record/run.json is not a valid run record (steps must be a positive integer, got 'many'); it cannot be resumed"),
    Case("seed out of range (run.json)", "interp train --resume --out seed-record", 'interp: error: seed-record/run.json is not a valid run record (seed must be an integer from 0 to 2^32 - 1, got -1); it cannot be resumed'),
    Case("betas out of range (run.json)", "interp train --resume --out betas-record", 'interp: error: betas-record/run.json is not a valid run record (betas must be two numbers in [0, 1), got [2, 0.9]); it cannot be resumed'),
    Case("run.json that is not an object", "interp train --resume --out list-record", 'interp: error: list-record/run.json is not a valid run record (a JSON object is expected, got list); it cannot be resumed, start a new run with another --out'),
    Case("run.json nested 100,000 deep", "interp train --resume --out deep-record", 'interp: error: cannot read deep-record/run.json (nested too deeply); it cannot be resumed, start a new run with another --out'),
    Case("run.json that is not UTF-8", "interp train --resume --out latin1-record", "interp: error: cannot read latin1-record/run.json ('utf-8' codec can't decode byte 0xe9 in position 13: invalid continuation byte); it cannot be resumed, start a new run with another --out"),
    Case("reproduce over a corrupt run record",
         "interp reproduce --only bijection --archs transformer --runs bad-runs --out repro", 'interp: error: bad-runs/bijection-transformer-cpu/run.json is not a valid run record (arch must be a string, got 5); move the run away or pass --runs with another folder'),
    # -- resume consistency ------------------------------------------------------------------------
    Case("resume after run.json was changed, no resume state", "interp train --resume --out changed-run", 'interp: error: changed-run/checkpoints/step-00000000.safetensors does not belong to the run in changed-run/run.json (its task, architecture, model or seed differ from run.json); it cannot be resumed without overwriting it'),
    Case("resume state with a negative step", "interp train --resume --out negative-step", 'interp: error: negative-step/resume.safetensors has invalid interp metadata (step must be a non-negative integer, got -5)'),
    Case("resume state beyond the run's steps", "interp train --resume --out future-step", "interp: error: future-step/resume.safetensors is at step 1000000, beyond the run's 20 steps; it cannot be resumed"),
    Case("resume state missing a weight", "interp train --resume --out short-state", 'interp: error: short-state/resume.safetensors: weights do not match the config in its metadata (missing blocks.0.attn.W_Q)'),
    Case("resume state with a malformed optimizer", "interp train --resume --out bad-optimizer", 'interp: error: bad-optimizer/resume.safetensors: malformed optimizer state (optim.0.exp_avg has shape (3,), expected (12, 16)); it cannot be resumed'),
    Case("resume state with NaN weights", "interp train --resume --out nan-state", 'interp: error: nan-state/resume.safetensors: tensor blocks.0.attn.W_Q holds NaN or infinite values; the weights are broken (did training diverge?)'),
    Case("frame-precision over a run of mixed models", "interp run frame-precision --ckpt mixed-models", 'interp: error: frame-precision: step-00000010.safetensors is another model than the analysed checkpoint (d_model=32 vs 16); the run folder mixes models'),
    # -- extreme numbers, devices, names -----------------------------------------------------------
    Case("huge learning rate", f"{TRAIN} --lr 1e308 {TINY_RUN}", 'interp: error: lr must be at most 10, got 1e+308 (Adam steps of that size overflow)'),
    Case("batch size beyond any memory", f"{TRAIN} --batch-size 99999999999999999999999", 'interp: error: batch-size must be at most 1,048,576, got 99,999,999,999,999,999,999,999'),
    Case("steps beyond any plan", f"{TRAIN} --steps 99999999999999999999999", 'interp: error: steps must be at most 1,000,000,000, got 99,999,999,999,999,999,999,999'),
    Case("task size beyond any memory", f"{TRAIN} -T V=999999999999999999999999999999",
         'interp: error: bijection: V must be at most 1,048,576, got V=999,999,999,999,999,999,999,999,999,999'),
    Case("model depth beyond any plan", f"{TRAIN} -M n_layers=99999",
         'interp: error: transformer: n_layers must be at most 1,024, got 99,999'),
    Case("model of 13 trillion parameters", f"{TRAIN} -T V=6 -T L=5 -M d_model=1048576 -M n_layers=1 -M n_heads=2",
         'interp: error: transformer: this model would have 13,194,189,864,972 parameters (49,152 GiB in float32); at most 2,147,483,648: make it smaller (d_model, n_layers, the task\'s sizes)'),
    Case("sample count beyond any memory", "interp run calibration --ckpt tiny --n 99999999999999999999999", 'interp: error: --n must be from 1 to 10000000, got 99999999999999999999999'),
    Case("a device torch has no support for", f"{TRAIN} --device mps {TINY_RUN}", "interp: error: unknown device 'mps'; use auto, cpu or cuda"),
    Case("the meta device", "interp run calibration --ckpt tiny --device meta", "interp: error: unknown device 'meta'; use auto, cpu or cuda"),
    Case("run folder name longer than the file system allows", f"interp train --out {'r' * 300} {TINY_RUN}", 'interp: error: cannot write to rrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrr...rrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrr: File name too long; choose another folder with --out'),
    Case("output folder name longer than the file system allows",
         f"interp run calibration --ckpt tiny --format json --out {'f' * 300}", 'interp: error: cannot write to ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff...fffffffffffffffffffffffffffffffffff/tiny: File name too long; choose another folder with --out'),
    Case("--only that names nothing", "interp reproduce --only , --runs old-runs --out repro", "interp: error: --only ',' names nothing; leave it out for all, or name some (comma-separated)"),
    # -- planted links and pipes, caches, build locks, and what used to end in a traceback ----------
    Case("a link planted at a run's lock (resume)", "interp train --resume --out paused", 'interp: error: paused/.lock is a symbolic link, not a regular file; the toolkit never writes through a link (it would change the file the link points to): remove it, or write elsewhere', fault='link', at='paused/.lock'),
    Case("a link planted at a new run's lock", f"interp train --out empty-folder {TINY_RUN}", 'interp: error: empty-folder/.lock is a symbolic link, not a regular file; the toolkit never writes through a link (it would change the file the link points to): remove it, or write elsewhere', fault='link', at='empty-folder/.lock'),
    Case("a pipe planted at a run's lock", "interp train --resume --out paused", 'interp: error: paused/.lock is a named pipe, not a regular file; the toolkit only writes regular files there: remove it, or write elsewhere', fault='pipe', at='paused/.lock'),
    Case('a link planted at run.json (resume)', "interp train --resume --out paused", 'interp: error: paused/run.json is a symbolic link, not a regular file; the toolkit never writes through a link (it would change the file the link points to): remove it, or write elsewhere', fault='link', at='paused/run.json'),
    Case("a link planted at a new run's run.json", f"interp train --out empty-folder {TINY_RUN}", 'interp: error: empty-folder/run.json is a symbolic link, not a regular file; the toolkit never writes through a link (it would change the file the link points to): remove it, or write elsewhere', fault='link', at='empty-folder/run.json'),
    Case('a pipe planted at run.json', "interp train --resume --out paused", 'interp: error: paused/run.json is a named pipe, not a regular file; the toolkit only writes regular files there: remove it, or write elsewhere', fault='pipe', at='paused/run.json'),
    Case('a link planted at metrics.jsonl (resume)', "interp train --resume --out paused", 'interp: error: paused/metrics.jsonl is a symbolic link, not a regular file; the toolkit never writes through a link (it would change the file the link points to): remove it, or write elsewhere', fault='link', at='paused/metrics.jsonl'),
    Case("a link planted at a new run's metrics.jsonl", f"interp train --out empty-folder {TINY_RUN}", 'interp: error: empty-folder/metrics.jsonl is a symbolic link, not a regular file; the toolkit never writes through a link (it would change the file the link points to): remove it, or write elsewhere', fault='link', at='empty-folder/metrics.jsonl'),
    Case('a pipe planted at metrics.jsonl', "interp train --resume --out paused", 'interp: error: paused/metrics.jsonl is a named pipe, not a regular file; the toolkit only writes regular files there: remove it, or write elsewhere', fault='pipe', at='paused/metrics.jsonl'),
    Case('a link planted at a checkpoint', "interp train --resume --out paused", 'interp: error: paused/checkpoints/step-00000000.safetensors is a symbolic link, not a regular file; the toolkit never writes through a link (it would change the file the link points to): remove it, or write elsewhere', fault='link', at='paused/checkpoints/step-00000000.safetensors'),
    Case('a pipe planted at a checkpoint', "interp train --resume --out paused", 'interp: error: paused/checkpoints/step-00000000.safetensors is a named pipe, not a regular file; the toolkit only writes regular files there: remove it, or write elsewhere', fault='pipe', at='paused/checkpoints/step-00000000.safetensors'),
    Case('a link planted at the resume state', "interp train --resume --out paused", 'interp: error: paused/resume.safetensors is a symbolic link, not a regular file; the toolkit never writes through a link (it would change the file the link points to): remove it, or write elsewhere', fault='link', at='paused/resume.safetensors'),
    Case('a pipe planted at the resume state', "interp train --resume --out paused", 'interp: error: paused/resume.safetensors is a named pipe, not a regular file; the toolkit only writes regular files there: remove it, or write elsewhere', fault='pipe', at='paused/resume.safetensors'),
    Case('metrics.jsonl that is a folder (resume)', "interp train --resume --out metrics-folder", 'interp: error: metrics-folder/metrics.jsonl is a folder, not a regular file; the toolkit only writes regular files there: remove it, or write elsewhere'),
    Case('a link planted at an analysis result', "interp run calibration --ckpt tiny --format json", 'interp: error: figures/tiny/calibration.json is a symbolic link, not a regular file; the toolkit never writes through a link (it would change the file the link points to): remove it, or write elsewhere', fault='link', at='figures/tiny/calibration.json'),
    Case("a link planted at the Mamba kernels' build lock (Python; exit 0: eager torch)", "models.mamba.cpu_kernels()", 'interp: warning: could not build the Mamba CPU kernels ({KERNEL_LOCK} is a symbolic link, not a lock file); using eager torch instead (the same numbers, more slowly)', code=0, fault='kernel-lock-link'),
    Case("a pipe planted at the Mamba kernels' build lock (Python; exit 0: eager torch)", "models.mamba.cpu_kernels()", 'interp: warning: could not build the Mamba CPU kernels ({KERNEL_LOCK} is not a regular file, not a lock file); using eager torch instead (the same numbers, more slowly)', code=0, fault='kernel-lock-pipe'),
    Case('--curriculum nested 50,000 deep (Python)', "interp.cli.parse_curriculum('[' * 50000 + ']' * 50000)", 'UserError: --curriculum must be JSON such as \'[[2000, {"n": 10}]]\', got \'[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[...]]]]]]]]]]\' (nested too deeply)'),
    Case('integer weights', "interp run calibration --ckpt int-weights.safetensors", "interp: error: int-weights.safetensors: tensor embed.W_E is int64; a model's weights are floating point, so these are not a trained model's"),
    Case('a checkpoint whose name and metadata disagree on its step', "interp run frame-precision --ckpt misnamed", 'interp: error: misnamed/checkpoints/step-00000010.safetensors is named step 10, but its metadata says step 15; rename it to step-00000015.safetensors or move it out of the run'),
    Case('a 48 MB word list (Python)', "tasks.prompts.read_words('big-words.txt')", 'ValueError: big-words.txt is 48.0 MB; a word list is at most 4 MB (100,000 words): prompts use a few hundred, pass a shorter list', fault='big-word-list'),
    # -- round four: the search engine, the language-model cache ------------------------------------------------
    Case("a link planted at a search's study", TUNE, f"interp: error: search/study.db is a symbolic link, not a regular file; {LINK}", fault="link", at="search/study.db"),
    Case("a link planted at a search's lock", TUNE, f"interp: error: search/.study-lock is a symbolic link, not a regular file; {LINK}", fault="link", at="search/.study-lock"),
    Case("a link planted at a trial's folder", TUNE, f"interp: error: search/trials/lr=1e-3 is a symbolic link, not a folder; {LINK}", fault="link", at="search/trials/lr=1e-3"),
    Case("a pipe planted at a search's lock", TUNE, "interp: error: search/.study-lock is a named pipe, not a regular file; the toolkit only writes regular files there: remove it, or write elsewhere", fault="pipe", at="search/.study-lock"),
    Case("a pipe planted at a search's study", TUNE, "interp: error: search/study.db is a named pipe, not a regular file; the toolkit only writes regular files there: remove it, or write elsewhere", fault="pipe", at="search/study.db"),
    Case("a --space value that climbs out of the search folder", TUNE.replace("lr=1e-3", "init=../../../empty-folder"),
         "interp: error: trial init=../../../empty-folder: checkpoint not found: ../../../empty-folder (pass a run folder, a .safetensors file or a shipped model: {SHIPPED})"),
    Case("zero steps for a search", f"{TUNE} --steps 0", "interp: error: --steps must be a positive integer, got 0"),
    Case("zero batch size for a search", f"{TUNE} --batch-size 0", "interp: error: --batch-size must be a positive integer, got 0"),
    Case("a grid larger than --max-grid", f"{TUNE} warmup=0,1 --max-grid 1", "interp: error: --space declares 2 trials, more than --max-grid 1 (each is a training run); narrow the space, or raise --max-grid"),
    Case("a study of random bytes", f"{TUNE} --out search-garbage", "interp: error: search-garbage/study.db is not an SQLite database, so not an Optuna study; move it away, or give another --out"),
    Case("a study cut short to its header", f"{TUNE} --out search-truncated", "interp: error: search-truncated/study.db is not a usable Optuna study (file is not a database); move it away, or give another --out"),
    Case("a study that is a folder", f"{TUNE} --out search-folder", "interp: error: search-folder/study.db is a folder, not a regular file; the toolkit only writes regular files there: remove it, or write elsewhere"),
    Case("a storage that is not a URL", f"{TUNE} --storage 'not a url'", "interp: error: --storage 'not a url' is not a storage URL; give an SQLAlchemy URL (sqlite:///FILE, postgresql://USER@HOST/DB, mysql+pymysql://...) or journal:FILE"),
    Case("a postgresql storage without its driver", f"{TUNE} --storage postgresql://me@localhost/db", "interp: error: --storage postgresql://me@localhost/db: the driver of postgresql is not installed here (psycopg); install it, e.g. pip install psycopg2-binary for postgresql, pymysql for mysql+pymysql"),
    Case("an SQLite storage in a missing folder", f"{TUNE} --storage sqlite:////missing/dir/x.db", "interp: error: --storage sqlite:////missing/dir/x.db: the folder /missing/dir does not exist; create it, or name a file in a folder that exists"),
    Case("a journal that is a text file", f"{TUNE} --storage journal:notes.txt", "interp: error: notes.txt is not an Optuna journal (its first line is not a journal record); give another journal:FILE"),
    Case("a journal that is a binary file", f"{TUNE} --storage journal:evil.pt", "interp: error: evil.pt is not an Optuna journal (its first line is not a journal record); give another journal:FILE"),
    Case("a journal that is a folder", f"{TUNE} --storage journal:empty-folder", "interp: error: empty-folder is a folder, not a regular file; the toolkit only writes regular files there: remove it, or write elsewhere"),
    Case("a journal in a missing folder", f"{TUNE} --storage journal:nowhere/j.log", "interp: error: --storage journal:nowhere/j.log: the folder nowhere does not exist; create it, or name a file in a folder that exists"),
    Case("a journal without a file", f"{TUNE} --storage journal:", "interp: error: --storage journal: names no file; give journal:FILE, e.g. journal:search.log"),
    Case("a journal that is a link", f"{TUNE} --storage journal:journal.log", f"interp: error: journal.log is a symbolic link, not a regular file; {LINK}", fault="link", at="journal.log"),
    Case("a search folder that cannot be written", f"{TUNE} --out read-only", "interp: error: cannot write to read-only: Permission denied; choose another folder with --out", fault="read-only"),
    Case("a new search folder that cannot be made", f"{TUNE} --out read-only/search", "interp: error: cannot write to read-only/search: Permission denied; choose another folder with --out", fault="read-only"),
    Case("a trial's run.json that is not JSON", f"{TUNE} --out search-record", "interp: error: cannot read search-record/trials/lr=1e-3/run.json (Expecting value: line 1 column 1 (char 0)); move search-record/trials/lr=1e-3 away to train the trial again"),
    Case("a trial's metrics log that is a folder", f"{TUNE} --out search-metrics", "interp: error: search-metrics/trials/lr=1e-3/metrics.jsonl is a folder, not a regular file; the toolkit only writes regular files there: remove it, or write elsewhere"),
    Case("a search without Optuna installed", TUNE, "interp: error: interp tune needs Optuna, which is not installed here: pip install optuna", fault="no-optuna"),
    Case("a GGUF file cut short (Python)", "models.gguf_model.open_gguf('short.gguf')", "ConfigError: short.gguf is not a whole GGUF file: its metadata or tensor table does not parse (524,352 bytes; truncated or corrupt)"),
    Case("a GGUF file of 100 bytes (Python)", "models.gguf_model.open_gguf('stub.gguf')", "ConfigError: stub.gguf is not a whole GGUF file: its metadata or tensor table does not parse (100 bytes; truncated or corrupt)"),
    Case("a GGUF header claiming 2^62 tensors (Python)", "models.gguf_model.open_gguf('many-tensors.gguf')", "ConfigError: many-tensors.gguf: its header claims 4,611,686,018,427,387,904 tensors and 1 metadata entries, more than its 1,048,704 bytes can hold; the file is truncated or corrupt"),
    Case("a conversion cache whose root is a file (Python)", "models.gguf_model.open_gguf('whole.gguf')", "ConfigError: the conversion cache notes.txt/interp/gguf cannot be written (notes.txt is not a folder); set XDG_CACHE_HOME to a folder that can be, before converting", fault="cache-root-file"),
    Case("the explorer's numbers with a head ablation on an LSTM", "interp explore --ckpt bijection-lstm-cpu --numbers --seed 1 --ablate H0.0",
         "interp: error: unknown ablation 'H0.0'; heads are H<layer>.<head> (zero) or M<layer>.<head> (mean), blocks B<layer>, within the model's 2 layers of 0 heads"),
    Case("a result's JSON that is a folder, beside an earlier page", "interp run calibration --ckpt tiny --format json,html --out calib-out", "interp: error: calib-out/tiny/calibration.json is a folder, not a regular file; the toolkit only writes regular files there: remove it, or write elsewhere"),
    # -- round five: the output tree's top level, a search's whole recipe, --moved, the Jacobian lens ---------------
    Case("a link planted at a run's checkpoints folder", f"{TRAIN} --steps 4",
         f"interp: error: new-run/checkpoints is a symbolic link, not a folder; {LINK}", fault="folder-link",
         at="new-run/checkpoints"),
    Case("a link planted at an analysis's folder for the run", "interp run calibration --ckpt tiny --format json",
         f"interp: error: figures/tiny is a symbolic link, not a folder; {LINK}", fault="folder-link", at="figures/tiny"),
    Case("a search's curriculum stage with an unknown setting",
         f"{TUNE.replace('lr=1e-3', 'curriculum=off,on')} --curriculum '[[2, {{\"nosuch\": 1}}]]'",
         "interp: error: trial curriculum=on: curriculum stage {'nosuch': 1}: unknown setting(s) nosuch for task "
         "'bijection'; valid settings: V, L, replacement, paired"),
    Case("a search's curriculum stage longer than its keys allow",
         f"{TUNE.replace('lr=1e-3', 'curriculum=off,on')} --curriculum '[[2, {{\"L\": 200}}]]'",
         "interp: error: trial curriculum=on: curriculum stage {'L': 200}: bijection: L=200 > V=3 needs keys drawn "
         "with replacement (pass replacement=True) or L <= V"),
    Case("a search's curriculum stage with another vocabulary",
         f"{TUNE.replace('lr=1e-3', 'curriculum=off,on')} --curriculum '[[2, {{\"V\": 9}}]]'",
         "interp: error: trial curriculum=on: curriculum stage {'V': 9} changes the vocabulary or the answers of the "
         "task; a stage may change only what the model can be run on unchanged (sizes, lengths)"),
    Case("--moved on a folder that does not exist", f"{TUNE.replace('--out search', '--out nowhere')} --moved",
         f"{MOVED}nowhere does not exist: check the path, or leave out --moved to start a new search"),
    Case("--moved on an empty folder", f"{TUNE.replace('--out search', '--out empty-folder')} --moved",
         f"{MOVED}empty-folder holds none of them: check the path, or leave out --moved to start a new search"),
    Case("--moved on a training run's folder", f"{TUNE.replace('--out search', '--out tiny')} --moved",
         f"{MOVED}tiny holds run.json, a training run's: give the search's folder"),
    Case("the Jacobian lens on a one-layer model", "interp run jacobian-lens --ckpt tiny --n 8 --n-fit 4",
         "interp: error: the Jacobian lens carries each layer below the last to the last, and this model has 1 layer: "
         "there is no layer to fit (it needs 2 or more layers)"),
]


@contextmanager
def injected(fault: str | None, root: Path, at: str = ""):
    """Simulate a full disk, an unwritable folder or a taken port, without root, for one case; or plant a
    link or a pipe at ``at`` (a file already there is moved aside and put back afterwards)."""
    with pytest.MonkeyPatch.context() as patch, ExitStack() as undo:
        if fault in ("link", "folder-link", "pipe"):
            target = root / at
            target.parent.mkdir(parents=True, exist_ok=True)
            if os.path.lexists(target):
                aside = target.with_name(target.name + ".aside")
                os.rename(target, aside)
                undo.callback(os.rename, aside, target)
            if fault == "link":  # to a file of the workspace, so the snapshot sees it change
                os.symlink(os.path.relpath(root / "victim.txt", target.parent), target)
            elif fault == "folder-link":  # to a folder of the workspace, so the snapshot sees a file written there
                os.symlink(os.path.relpath(root / "empty-folder", target.parent), target)
            else:
                os.mkfifo(target)
            undo.callback(os.unlink, target)
        elif fault in ("kernel-lock-link", "kernel-lock-pipe"):  # planted where the next build locks
            import models.mamba

            patch.setenv("INTERP_BUILD_DIR", "builds")
            patch.setattr(models.mamba, "_KERNELS", {})  # this process's build is forgotten for the case
            lock = kernel_lock_path()
            lock.parent.mkdir(parents=True)
            os.symlink("../victim.txt", lock) if fault == "kernel-lock-link" else os.mkfifo(lock)
            undo.callback(shutil.rmtree, root / "builds")
        elif fault == "no-optuna":  # an import of optuna fails, as where it is not installed
            patch.setitem(sys.modules, "optuna", None)
        elif fault == "cache-root-file":  # the conversion cache's root is a regular file
            patch.setenv("XDG_CACHE_HOME", "notes.txt")
        elif fault == "big-word-list":  # 48 MB, sparse: made here, not copied for every case
            with open(root / "big-words.txt", "wb") as handle:
                handle.truncate(48 << 20)
            undo.callback((root / "big-words.txt").unlink)
        elif fault == "full-disk":
            # The data reaches the temp file, then the disk reports it is full (as fsync does when
            # the file system defers allocation): the temp file must not survive.
            def full(fd):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            patch.setattr(os, "fsync", full)
        elif fault == "read-only":
            folder = root / "read-only"
            folder.chmod(0o555)
            undo.callback(folder.chmod, 0o755)
            if os.geteuid() == 0:  # root ignores permissions: refuse like the kernel does for anyone else
                real = tempfile.mkstemp

                def refuse(*args, dir=None, **kwargs):
                    if dir is not None and folder.resolve() in (Path(dir).resolve(), *Path(dir).resolve().parents):
                        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(dir))
                    return real(*args, dir=dir, **kwargs)
                patch.setattr(tempfile, "mkstemp", refuse)
        elif fault == "fifo":  # made here: copying a FIFO would block
            shutil.copytree(root / "tiny", root / "fifo-run")
            os.mkfifo(root / "fifo-run" / "checkpoints" / "step-00000100.safetensors")
            undo.callback(shutil.rmtree, root / "fifo-run")
        elif fault == "locked":  # another trainer (pid 4242) holds the run folder's lock
            import fcntl

            handle = undo.enter_context(open(root / "paused" / ".lock", "w"))
            fcntl.flock(handle, fcntl.LOCK_EX)
            handle.write("4242")
            handle.flush()
            undo.callback((root / "paused" / ".lock").unlink)
        elif fault == "port-in-use":
            listener = undo.enter_context(socket.socket())
            try:
                listener.bind(("127.0.0.1", BUSY_PORT))
                listener.listen()
            except OSError:  # something else already holds it: just as taken
                pass
        yield


def kernel_lock_path() -> Path:
    """The Mamba kernels' build lock with INTERP_BUILD_DIR=builds (the name hashes the sources and flags)."""
    import models.mamba
    from models.kernels import build_key, package_version

    name = models.mamba.KERNELS_NAME
    key = build_key([models.mamba.KERNELS_SOURCE], models.mamba.KERNELS_FLAGS[0])
    return Path("builds") / f"{name}-{package_version()}-{key}.lock"


def expected(case: Case, doc: bool = False) -> str:
    """The exact message, with {TASKS}, {ARCHS}, {ANALYSES}, {SHIPPED} and {TRANSFORMER} (its settings)
    filled in from the registries, so that adding a task, an analysis or a model setting only needs the
    doc regenerated, not every row rewritten. {KERNEL_LOCK}, a file name that hashes the sources, is
    written with HASH in the doc (``doc``)."""
    from dataclasses import fields

    import analyses
    import models
    import tasks
    from interp.catalog import shipped

    message = case.message
    settings = sorted(f.name for f in fields(models.architecture("transformer").config_class))
    for key, names in (("TASKS", tasks.NAMES), ("ARCHS", models.ARCHS), ("ANALYSES", sorted(analyses.NAMES)),
                       ("SHIPPED", shipped()), ("TRANSFORMER", settings)):
        message = message.replace("{" + key + "}", ", ".join(names))
    if doc:
        return message.replace("{KERNEL_LOCK}", "builds/interp_mamba_kernels-VERSION-HASH.lock")
    if "{KERNEL_LOCK}" in message:
        message = message.replace("{KERNEL_LOCK}", str(kernel_lock_path()))
    return message


def outcome(case: Case, capsys) -> tuple[int, str]:
    """(exit status, the one line shown) of a catalogue case, run in the current folder."""
    if case.call.startswith("interp "):
        from tests.cli import run_cli

        result = run_cli(capsys, *shlex.split(case.call)[1:])
        return result.code, result.err.strip()
    import analyses
    import interp
    import models
    import tasks

    import interp.cli
    import models.mamba
    import tasks.prompts

    try:
        eval(case.call, dict(interp=interp, tasks=tasks, models=models, analyses=analyses))
    except Exception as err:  # the message is the point; the type is shown next to it
        return 1, f"{type(err).__name__}: {err}"
    return 0, capsys.readouterr().err.strip()  # a call that goes on says why in a warning line


def _with_marks(case: Case):
    import torch

    gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU: the case is one without")
    return pytest.param(case, marks=[gpu] if case.no_gpu else [])


@pytest.mark.parametrize("case", [_with_marks(c) for c in CATALOGUE],
                         ids=[f"{i + 1:02d}-{c.what}" for i, c in enumerate(CATALOGUE)])
def test_bad_input(case, workspace_template, tmp_path, monkeypatch, capsys):
    root = tmp_path / "work"
    shutil.copytree(workspace_template, root)
    monkeypatch.chdir(root)
    before = snapshot(root)
    with injected(case.fault, root, case.at):
        code, shown = outcome(case, capsys)
    assert (code, shown) == (case.code, expected(case))
    assert "\n" not in shown and "Traceback" not in shown
    assert not (root / MARKER).exists(), "a pickle was unpickled"
    assert snapshot(root) == before, "a bad input changed, created or deleted a file"


def test_a_real_file_size_limit_leaves_no_half_written_file(workspace_template, tmp_path):
    """Not simulated: the kernel refuses writes past RLIMIT_FSIZE (EFBIG, with SIGXFSZ ignored), so
    plotly.js (~4.8 MB, the bundle the folder's HTML pages share, written first) fails half way through
    while the page and the small JSON would fit."""
    import resource
    import signal

    from tests.cli import fork_cli, wait_for

    root = tmp_path / "work"
    shutil.copytree(workspace_template, root)
    log = tmp_path / "interp.log"

    def limit():
        os.chdir(root)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))

    def limit_json():  # room for the HTML this time
        os.chdir(root)
        resource.setrlimit(resource.RLIMIT_FSIZE, (64 << 20, 64 << 20))

    status = wait_for(fork_cli(log, "run", "calibration", "--ckpt", "tiny", "--format", "json,html", prepare=limit))
    assert os.WEXITSTATUS(status) == 1
    assert log.read_text() == ("interp: error: could not write figures/plotly.min.js: File too large; it was "
                               "left as it was (free some space, or write elsewhere with --out)\n")
    # The JSON, the result's record, is written last: with the bundle cut off, no record claims a complete
    # result, no page stands without the bundle it loads, and no temp file of the bundle is left behind.
    assert [p for p in (root / "figures").rglob("*") if p.is_file()] == []
    status = wait_for(fork_cli(log, "run", "calibration", "--ckpt", "tiny", "--format", "json,html", prepare=limit_json))
    assert os.WEXITSTATUS(status) == 0, log.read_text()
    written = sorted(p.name for p in (root / "figures" / "tiny").iterdir())
    assert written == [".interp-source", "calibration.html", "calibration.json"]
    # one bundle at the output root, shared by every model's pages, a file genuinely over the limit
    assert (root / "figures" / "plotly.min.js").stat().st_size > 4 << 20


# -- the explorer's requests ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def explorer_app(workspace_template):
    from interp.explore import Explorer, build_app

    explorer = Explorer(workspace_template / "tiny")
    return explorer, build_app(explorer)


@pytest.mark.parametrize("request_", REQUESTS, ids=[f"{i + 1:02d}-{r.what}" for i, r in enumerate(REQUESTS)])
def test_bad_request(request_, explorer_app):
    explorer, app = explorer_app
    answer = app.server.test_client().post("/_dash-update-component", data=explorer_request(app, explorer, request_),
                                           content_type="application/json")
    text = answer.get_data(as_text=True)
    assert answer.status_code == request_.status, text[:300]
    if request_.status == 200:  # the view's own refusal, in the message it shows
        assert request_.answer in json.dumps(answer.get_json(), ensure_ascii=False).replace("\\'", "'"), text[:300]
    else:
        assert text == request_.answer + "\n"


def render() -> str:
    def code_span(text: str) -> str:
        text = text.replace("|", "\\|")
        return f"`` {text} ``" if "`" in text else f"`{text}`"

    lines = [
        "# Bad inputs and the message each one gets",
        "",
        "Every bad input below gets exactly one line on stderr (or one exception from the Python API),",
        "a non-zero exit status, and no traceback; none of them creates, changes or deletes a file. The few",
        "rows with exit 0 are things in the way of a build, which is then done without them: the",
        "one line is a warning, and the command does its work.",
        "The working folder holds a tiny trained run `tiny/` and the broken files the rows name",
        "(built by `build_workspace` in `tests/test_bad_inputs.py`); `new-run` does not exist beforehand.",
        "Faults in *italics* are injected: *full disk* makes the disk report ENOSPC when a file is flushed,",
        "*read-only* makes the folder refuse new files with EACCES (also for root), *port in use* holds the",
        "port open, *locked* holds the run folder's lock as a trainer with pid 4242 would, *fifo* puts a named",
        "pipe where a checkpoint is expected, *link planted at* P puts a symbolic link at P to `victim.txt`",
        "(a file of the working folder, so a write through the link would show as a changed file), *folder link",
        "planted at* P a link at P to `empty-folder` (a file written through it would show), *pipe",
        "planted at* P a named pipe; *kernel lock link* and *kernel lock pipe* put a link or a pipe where",
        "the Mamba kernels' build locks (with INTERP_BUILD_DIR=builds), *big word list* a 48 MB file,",
        "*no optuna* makes `import optuna` fail, *cache root file* sets XDG_CACHE_HOME to a regular file.",
        "Concurrency for real (two trainers released together on one",
        "folder), the resume of a real resume state and generated inputs are tested in `tests/test_hardening.py`.",
        "A real full disk is tested too (`test_a_real_file_size_limit_leaves_no_half_written_file`:",
        "a write cut off half way by RLIMIT_FSIZE leaves no temp file behind, and no result record: a result's",
        "JSON is written last, after its figures, so a JSON on disk always means a complete result).",
        "Lists of valid names in the messages (tasks, architectures, analyses, shipped models) come from the",
        "live registries, so adding one only needs this file regenerated. A failed write may leave the empty",
        "folder it made (a later run into it works as usual), never a file.",
        "",
        "Generated from `CATALOGUE` in `tests/test_bad_inputs.py` by `python -m tests.test_bad_inputs`;",
        "`test_the_doc_is_current` fails if this file and the catalogue differ, and `test_bad_input` runs",
        "every row and checks the exit status, the exact message and that no file changed.",
        "",
        "| # | bad input | what is run | exit | message |",
        "|---|---|---|---|---|",
    ]
    lines_requests = [
        "",
        "## Requests to the explorer",
        "",
        "`interp explore` answers every request its page could not have sent with a 4xx and one line of text, or,",
        "where the request is well-formed and only its meaning is wrong, with the view's own refusal (status 200,",
        "the message shown in the page); never with a 500. Each row is the page's own request for one view with",
        "the values shown changed, or the body shown sent as it is (`BODY`: the page's request), posted to the",
        "explorer of `tiny/` by `test_bad_request` in `tests/test_bad_inputs.py`. The checks are in",
        "`interp/requests.py`.",
        "",
        "| # | bad request | view | what is sent | status | answer |",
        "|---|---|---|---|---|---|",
    ]
    for i, request in enumerate(REQUESTS, 1):
        sent = request.raw if request.raw is not None else ", ".join(
            f"{k} = {json.dumps(v)}".replace('"SAMPLE0"', "(seed 0's tokens)") for k, v in request.values.items())
        lines_requests.append(f"| {i} | {request.what} | {request.view} | {code_span(sent)} | {request.status} | "
                              f"{code_span(request.answer)} |")
    for i, case in enumerate(CATALOGUE, 1):
        fault = (case.fault or "").replace("-", " ") + (f" planted at {case.at}" if case.at else "")
        what = case.what + (f" (*{fault}*)" if fault else "")
        lines.append(f"| {i} | {what} | {code_span(case.call)} | {case.code} | {code_span(expected(case, doc=True))} |")
    return "\n".join(lines + lines_requests) + "\n"


def test_the_doc_is_current():
    assert DOC.read_text() == render(), "docs/bad-inputs.md is stale: run `python -m tests.test_bad_inputs`"


def test_the_catalogue_covers_the_issue():
    """Every fault ``injected`` can plant is exercised by a row, every row by its own call, and the
    generated doc lists exactly the catalogue's rows."""
    import inspect
    import re

    faults = set(re.findall(r'"([a-z-]+)"', "".join(
        line for line in inspect.getsource(injected).splitlines() if re.search(r"fault (==|in \()", line))))
    assert {c.fault for c in CATALOGUE} - {None} == faults
    rows = [line for line in DOC.read_text().splitlines() if re.match(r"\| \d+ \|", line)]
    assert len(rows) == len(CATALOGUE) + len(REQUESTS)
    assert len({(c.call, c.fault, c.at) for c in CATALOGUE}) == len(CATALOGUE), "a row is listed twice"
    assert len({(r.what, json.dumps(r.values), r.raw) for r in REQUESTS}) == len(REQUESTS), "a request is listed twice"


if __name__ == "__main__":
    DOC.parent.mkdir(exist_ok=True)
    DOC.write_text(render())
    print(f"wrote {DOC} ({len(CATALOGUE)} rows)", file=sys.stderr)
