"""Safetensors checkpoints: round trips, and refusal of everything that is not one."""
import json
import os
import pickle

import pytest
import torch

import interp
from interp import checkpoint
from interp.errors import UserError


def test_round_trip_gives_the_same_model(small_model, tmp_path):
    path = checkpoint.save(tmp_path / "m.safetensors", small_model, step=7, seed=0)
    loaded = interp.load(path)
    tokens = small_model.task.sample(4, generator=torch.Generator().manual_seed(0)).tokens
    assert torch.equal(loaded.answer_probs(tokens), small_model.answer_probs(tokens))
    assert loaded.task.config() == small_model.task.config() and loaded.step == 7
    _, cache = loaded.run_with_cache(tokens)
    assert cache["blocks.0.attn.hook_pattern"].shape == (4, 2, 13, 13)


class Exploit:
    """Unpickling this creates a file: the marker proves whether a pickle was ever loaded."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.parametrize("suffix", [".pt", ".safetensors", ".bin"])
def test_pickles_are_refused_without_being_loaded(tmp_path, suffix):
    marker = tmp_path / "pwned"
    evil = tmp_path / f"model{suffix}"
    evil.write_bytes(pickle.dumps(Exploit(marker)))
    with pytest.raises(UserError, match="pickle"):
        interp.load(evil)
    assert not marker.exists()


def test_torch_save_zip_is_refused(tmp_path, small_model):
    path = tmp_path / "weights.safetensors"
    torch.save(small_model.state_dict(), path)
    with pytest.raises(UserError, match="pickle"):
        interp.load(path)


@pytest.mark.parametrize("content, message", [
    (b"", "empty or truncated"),
    (b"\x10\x00\x00\x00\x00\x00\x00\x00{\"a\":", "corrupt or truncated"),
    (b"hello world, not weights", "not a valid safetensors"),
])
def test_corrupt_files_are_refused(tmp_path, content, message):
    path = tmp_path / "bad.safetensors"
    path.write_bytes(content)
    with pytest.raises(UserError, match=message):
        interp.load(path)


def test_truncated_checkpoint_is_refused(tmp_path, small_model):
    path = checkpoint.save(tmp_path / "m.safetensors", small_model, step=1, seed=0)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(UserError, match="safetensors"):
        interp.load(path)


def test_missing_path_and_empty_folder(tmp_path):
    with pytest.raises(UserError, match="not found"):
        interp.load(tmp_path / "nope")
    with pytest.raises(UserError, match="no checkpoints"):
        interp.load(tmp_path)


def test_wrong_task_is_refused(tmp_path, small_model):
    path = checkpoint.save(tmp_path / "m.safetensors", small_model, step=1, seed=0)
    with pytest.raises(UserError, match="'bijection' checkpoint, but this needs a 'hmm' one"):
        interp.load(path, task="hmm")


def test_shapes_that_disagree_with_the_config_are_refused(tmp_path, small_model):
    from safetensors.torch import save_file
    meta = checkpoint.describe(small_model, 0, 0)
    meta["model"]["d_model"] = 64
    tensors = {k: v.contiguous() for k, v in small_model.state_dict().items()}
    save_file(tensors, tmp_path / "m.safetensors", metadata={"interp": json.dumps(meta)})
    with pytest.raises(UserError, match="weights do not match the config"):
        interp.load(tmp_path / "m.safetensors")


@pytest.mark.parametrize("first_bytes", [b"\x80", b"PK"])
def test_a_header_length_that_looks_like_a_pickle_still_loads(tmp_path, small_model, first_bytes):
    # safetensors headers are 8-byte padded, so one checkpoint in 32 has a length = 128 mod 256,
    # whose first byte is the pickle opcode 0x80; "PK" (a zip) is a length of 19280 mod 65536.
    path = tmp_path / "m.safetensors"
    target = int.from_bytes(first_bytes, "little")
    modulus = 256 ** len(first_bytes)
    base = int.from_bytes(checkpoint.save(path, small_model, step=3, seed=0).read_bytes()[:8], "little")
    # Padding blurs it by < 8; and the pad's own key adds bytes, so when the gap is smaller than
    # that, the next length with those low bytes (one modulus further) is the one to reach.
    gap = (target - base) % modulus
    for pad in [*range(gap - 24, gap + 24), *range(gap + modulus - 24, gap + modulus + 24)]:
        checkpoint.save(path, small_model, step=3, seed=0, extra_meta={"pad": "x" * max(pad, 0)})
        if path.read_bytes().startswith(first_bytes):
            break
    assert path.read_bytes().startswith(first_bytes)
    assert interp.load(path).step == 3


def test_the_run_folder_lists_its_series_finds_its_latest_and_the_run_of_a_checkpoint(tmp_path, small_model):
    from interp.files import RunFolder, checkpoint_name

    run = RunFolder(tmp_path / "run")
    assert run.saved() == [] and run.latest() is None and not run.has_record() and run.record_if_readable() is None
    for step in (200, 0, 10):
        checkpoint.save(run.checkpoint(step), small_model, step=step, seed=0)
    (run.checkpoints / "step-12.safetensors").write_bytes(b"")  # not a checkpoint's name: not in the series
    assert run.saved() == [(0, run.checkpoint(0)), (10, run.checkpoint(10)), (200, run.checkpoint(200))]
    assert run.latest() == run.checkpoint(200) == run.checkpoints / checkpoint_name(200)
    assert checkpoint.resolve(tmp_path / "run") == run.latest()
    assert RunFolder.of_checkpoint(run.checkpoint(10)).root == run.root
    assert RunFolder.step_named(run.checkpoint(10)) == 10
    assert RunFolder.of_checkpoint(tmp_path / "m.safetensors") is None  # a file on its own
    run.record.write_text("{not json")
    assert run.has_record() and run.record_if_readable() is None
    with pytest.raises(UserError, match="cannot read"):
        run.read_record()
    run.metrics.write_text('{"step": 1, "loss": 2.0}\n{"step": 2, "eval_accuracy": 0.5}\n{"step": 3, "lo')  # cut short
    assert run.logged_lines() == [{"step": 1, "loss": 2.0}, {"step": 2, "eval_accuracy": 0.5}]
    model = interp.load(tmp_path / "run")  # a record that does not read leaves the budget unknown, not the load
    assert model.step == 200 and model.provenance.budget is None and len(model.provenance.checkpoints) == 3
