"""Models that are only measured or about to be overwritten are built on the meta device without a random
initialisation (``models.on_meta``): loading a checkpoint gives the file's numbers exactly, as building a seeded
model and copying the weights into it did, without paying for the initialisation (nor for the torch._dynamo import
that initialising meta tensors costs)."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import interp
import models
import tasks
from interp import checkpoint
from models.transformer import WindTunnelTransformer

ROOT = Path(__file__).resolve().parent.parent


def loaded_the_old_way(path):
    """A seeded model built for real, then given the file's weights: what loading did before."""
    meta, weights = checkpoint.read(checkpoint.resolve(path))
    model = models.build(meta["arch"], tasks.from_config(meta["task"]), config=meta["model"], seed=meta["seed"])
    model.load_state_dict({k: v for k, v in weights.items() if not k.startswith("optim.")})
    return model.eval()


@pytest.mark.parametrize("arch", models.ARCHS)
def test_a_loaded_checkpoint_holds_the_files_numbers_bit_for_bit(arch):
    path = ROOT / "models" / "pretrained" / f"bijection-{arch}-cpu"
    new, old = interp.load(path), loaded_the_old_way(path)
    assert not any(t.is_meta for t in checkpoint.tensors_of(new))
    a, b = new.state_dict(), old.state_dict()
    assert a.keys() == b.keys() and all(a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]) for k in a)
    assert all(p.requires_grad for p in new.parameters()) and not new.training
    tokens = new.task.sample(8, generator=torch.Generator().manual_seed(1)).tokens
    with torch.no_grad():
        assert torch.equal(new(tokens), old(tokens))
    next(new.parameters()).data.add_(1.0)  # the weights are the model's own, writable (fine-tuning starts here)


def test_weights_stored_in_another_float_type_are_cast_as_before(small_model, tmp_path):
    path = checkpoint.save(tmp_path / "m.safetensors", small_model.double(), step=1, seed=0)
    small_model.float()
    loaded = interp.load(path)
    assert all(p.dtype == torch.float32 for p in loaded.parameters())
    assert all(torch.equal(loaded.state_dict()[k], v) for k, v in small_model.state_dict().items())


def test_on_meta_skips_initialisers_and_random_draws_but_nothing_else():
    with models.on_meta():
        weight = torch.nn.Parameter(torch.empty(3, 4))
        torch.nn.init.normal_(weight, std=2.0)
        weight.requires_grad_(False)  # in place, but not an initialiser: still done
        drawn = torch.randn(2, 3)
        on_cpu = torch.randn(1000, device="cpu")  # a tensor asked for elsewhere is drawn as asked
    assert weight.is_meta and not weight.requires_grad and drawn.is_meta and drawn.shape == (2, 3)
    assert on_cpu.device.type == "cpu" and on_cpu.std() > 0.9


def test_counting_and_loading_a_transformer_never_import_torch_dynamo():
    done = subprocess.run(
        [sys.executable, "-c", "import sys, interp, models, tasks\n"
         "interp.load('models/pretrained/bijection-transformer-cpu')\n"
         "models.count_params('transformer', tasks.make('bijection'), models.model_config('transformer', 'paper'))\n"
         "print('torch._dynamo' in sys.modules)"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False"]


class WithScratch(WindTunnelTransformer):
    """An architecture holding a tensor its checkpoints do not (a non-persistent buffer)."""

    arch, order = "transformer-with-scratch", 99

    def __init__(self, config, task, seed=0):
        super().__init__(config, task, seed)
        self.register_buffer("scratch", torch.arange(3.0), persistent=False)


def test_an_architecture_holding_more_than_its_checkpoint_is_built_for_real(monkeypatch, tmp_path):
    monkeypatch.setitem(models.REGISTRY, WithScratch.arch, WithScratch)
    task = tasks.make("bijection", V=5, L=4)
    model = models.build(WithScratch.arch, task, config=models.model_config("transformer", "cpu", task), seed=3)
    loaded = interp.load(checkpoint.save(tmp_path / "m.safetensors", model, step=2, seed=3))
    assert torch.equal(loaded.scratch, torch.arange(3.0))
    assert all(torch.equal(loaded.state_dict()[k], v) for k, v in model.state_dict().items())
