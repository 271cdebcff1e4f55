"""What every architecture shares: config validation, the answer head, and the hooked residual skeleton.

Every model, whatever mixes information along the sequence, is the same residual stack

    hook_embed -> blocks.0 -> ... -> blocks.{L-1} -> ln_final -> unembed

and each block is pre-norm, ``resid_post = resid_pre + mixer(norm(resid_pre))``, with TransformerLens
hook points ``blocks.{l}.hook_resid_pre``, ``blocks.{l}.hook_mixer_out`` and ``blocks.{l}.hook_resid_post``.
So an analysis that walks "the residual stream after block l" uses one name on every architecture
(the transformer has the same ``blocks.{l}.hook_resid_*`` names from TransformerLens itself).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from types import SimpleNamespace
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from . import _optimized_python  # noqa: F401  (before TransformerLens: lets python -OO import it)
from transformer_lens import HookedRootModule
from transformer_lens.hook_points import HookPoint
from transformer_lens.utilities import get_act_name

from tasks import ConfigError, Task
from tasks.base import MAX_SIZE

MAX_LAYERS = 1024  # deeper models take minutes only to construct


class ModelConfig:
    """Validation shared by the architectures' config dataclasses.

    Types come from the field annotations: ``int`` fields must be positive integers up to
    ``tasks.base.MAX_SIZE`` (``n_layers`` up to MAX_LAYERS; ``int | None`` may also be None), ``float`` fields finite positive numbers, ``str`` fields one of ``CHOICES``.
    """

    ARCH = "model"
    CHOICES: dict[str, tuple[str, ...]] = {}

    @classmethod
    def from_dict(cls, settings: dict):
        if not isinstance(settings, dict):
            raise ConfigError(f"{cls.ARCH} config must be a JSON object, got {type(settings).__name__}")
        known = {f.name: f for f in fields(cls)}
        unknown = sorted(set(settings) - set(known))
        if unknown:
            raise ConfigError(f"unknown {cls.ARCH} setting(s) {', '.join(unknown)}; valid: {', '.join(sorted(known))}")
        for name, value in settings.items():
            check_value(cls.ARCH, name, str(known[name].type), value, cls.CHOICES.get(name))
        config = cls(**settings)
        config.check()
        return config

    def check(self) -> None:
        """Constraints between settings (subclasses add theirs): a width left to capacity matching must
        have been filled in by a preset before a model is built."""
        if getattr(self, "d_model", 0) is None:
            raise ConfigError(f"{self.ARCH}: d_model is not set (presets fill it in by capacity matching)")

    def to_dict(self) -> dict:
        return asdict(self)


def check_value(arch: str, name: str, annotation: str, value, choices=None) -> None:
    if value is None and "None" in annotation:
        return
    if annotation.startswith("int"):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"{arch}: {name} must be a positive integer, got {value!r}")
        most = MAX_LAYERS if name == "n_layers" else MAX_SIZE
        if value > most:
            raise ConfigError(f"{arch}: {name} must be at most {most:,}, got {value:,}")
    elif annotation.startswith("float"):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise ConfigError(f"{arch}: {name} must be a finite positive number, got {value!r}")
    elif annotation.startswith("bool"):
        if not isinstance(value, bool):
            raise ConfigError(f"{arch}: {name} must be true or false, got {value!r}")
    elif annotation.startswith("str"):
        if not isinstance(value, str) or (choices and value not in choices):
            raise ConfigError(f"{arch}: {name} must be one of {', '.join(choices or ())}, got {value!r}")


@dataclass(frozen=True)
class Provenance:
    """Where a model's weights come from: one record instead of attributes attached after loading.

    ``models.build`` records the seed of the initialisation; ``interp.load`` adds the training step,
    the checkpoint file, its run folder, the run's whole checkpoint series and ``loader``, the
    function that loads one of them, so an analysis of training dynamics reads the series without
    knowing how checkpoints are stored, and ``budget``, what the weights were trained on
    (``analyses.budget.training_budget``, from the run's record), so an analysis never reads the run's files.
    """

    seed: int = 0
    step: int | None = None
    path: Path | None = None
    run_dir: Path | None = None
    checkpoints: tuple[tuple[int, Path], ...] = ()  # (step, file) of every checkpoint of the run, in order
    loader: Callable | None = None  # loader(path, device=...) -> model
    budget: dict | None = None  # steps, batch size, sequences and tokens before this checkpoint

    def load(self, path: Path, device: str | None = None):
        if self.loader is None:
            raise ValueError("this model was not loaded from a checkpoint; its run's checkpoints are unknown")
        return self.loader(path, device=device)


class AnswerHead:
    """What every architecture shares: its declarations, its provenance and reading beliefs off its logits.

    An architecture is one module in models/ whose model class (a subclass of this) sets ``arch``;
    the registry finds it, and the rest of the toolkit reads only the declarations below.
    """

    arch: str = ""
    order: int = 100  # where it is listed (``interp list``, ``interp reproduce``); ties by name
    label: str = ""  # how a model card names it: "A transformer"
    config_class: type  # its config dataclass (a ModelConfig)
    presets: dict = {}  # preset name -> config; d_model None: matched to the capacity reference
    attention: bool = False  # has attention heads (blocks.{l}.attn.hook_pattern, W_K, ...)
    positions: bool = False  # has a learned position table of n_ctx rows (a longest input); else any length
    capacity_reference: bool = False  # the architecture whose parameter count the others are matched to
    task: Task
    provenance: Provenance

    def has_attention(self) -> bool:
        return self.attention

    def has_patterns(self) -> bool:
        """Whether ``attention_patterns`` has something to return: attention heads, or an effective attention."""
        return self.has_attention() or type(self).attention_patterns is not AnswerHead.attention_patterns

    @torch.no_grad()
    def attention_patterns(self, tokens: torch.Tensor, rows: torch.Tensor | None = None) -> list[torch.Tensor]:
        """Per layer, how each position mixes the positions up to it: [B, H, T, T], rows summing to 1; only the
        query positions ``rows`` ([R] indices) when given: [B, H, R, T].

        Attention models return their heads' ``hook_pattern``; an architecture whose mixer can be written
        as attention overrides this (Mamba: its selective scan's effective attention, one "head" per layer).
        """
        if not self.has_attention():
            raise ValueError(f"this {self.arch or type(self).__name__} model has no attention patterns")
        names = [act_name("pattern", l) for l in range(self.cfg.n_layers)]
        _, cache = self.run_with_cache(tokens, names_filter=names)
        return [cache[name] if rows is None else cache[name][:, :, rows] for name in names]

    @property
    def seed(self) -> int:
        return self.provenance.seed

    @property
    def step(self) -> int | None:
        return self.provenance.step

    @property
    def checkpoint_path(self) -> Path | None:
        return self.provenance.path

    @property
    def run_dir(self) -> Path | None:
        return self.provenance.run_dir

    def answer_logits(self, tokens: torch.Tensor, **kwargs) -> torch.Tensor:
        """Logits over the task's C answer classes, [B, T, C]; kwargs go to ``forward``."""
        if self.task.continuous:
            raise TypeError(f"{self.task.name} is a continuous task: use model.predictive(inputs)")
        return self.task.answer_logits(self(tokens, **kwargs))

    def answer_probs(self, tokens: torch.Tensor, **kwargs) -> torch.Tensor:
        """The model's predictive distribution over the task's answer classes, [B, T, C]."""
        return self.answer_logits(tokens, **kwargs).softmax(-1)

    def predictive(self, inputs: torch.Tensor, **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
        """Continuous tasks: the model's Gaussian predictive (mean, variance), each [B, T]."""
        out = self(inputs, **kwargs)
        return out[..., 0], out[..., 1].clamp(-30, 30).exp()


def at_least_float32(x: torch.Tensor) -> torch.Tensor:
    """``x`` in float32 when it is in a narrower float type (bf16 weights); float64 stays float64."""
    return x.to(torch.promote_types(x.dtype, torch.float32))


def training_loss(model, batch, kind: str = "soft") -> torch.Tensor:
    """The training objective on ``batch``, at its query positions only: ``kind`` "soft" is cross-entropy
    against the exact Bayes posterior (its expected value under the Bayes predictive for a continuous
    task), "hard" against the sampled answers. Kept in the weights' precision from float32 up (float64
    for gradient checks), so bf16 logits are promoted and float64 ones are not rounded."""
    mask = batch.query_mask
    if model.task.continuous:
        # Gaussian NLL (up to a constant). Soft: its expectation under the Bayes predictive, which
        # replaces the sampled (y - mean)^2 by var_Bayes + (mean_Bayes - mean)^2.
        mean, var = model.predictive(batch.tokens)
        if kind == "soft":
            sq = batch.posterior_var + (batch.posterior_mean - mean) ** 2
        else:
            sq = (batch.targets - mean) ** 2
        return 0.5 * (var.log() + sq / var)[mask].mean()
    # Softmax only where beliefs are asked for: a recall sequence has 3 of them in 329 positions.
    logits = at_least_float32(model.answer_logits(batch.tokens)[mask])
    if kind == "soft":
        return -(batch.posterior_at_queries() * logits.log_softmax(-1)).sum(-1).mean()
    return torch.nn.functional.cross_entropy(logits, batch.targets[mask])


def output_sizes(task: Task) -> tuple[int, int]:
    """(input vocabulary, output width). A continuous task's output is a Gaussian's mean and log-variance."""
    return (1, 2) if task.continuous else (task.vocab_size, task.vocab_size)


class InputProjection(nn.Module):
    """The token embedding's stand-in for continuous tasks: a linear map of the input features."""

    def __init__(self, input_dim: int, d_model: int):
        super().__init__()
        self.W_in = nn.Parameter(torch.randn(input_dim, d_model) / input_dim ** 0.5)
        self.b_in = nn.Parameter(torch.zeros(d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.to(self.W_in.dtype) @ self.W_in + self.b_in


class TokenEmbedding(nn.Module):
    def __init__(self, vocab_size: int, d_model: int):
        super().__init__()
        self.W_E = nn.Parameter(torch.randn(vocab_size, d_model) * 0.02)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        # F.embedding, not W_E[tokens]: the same numbers, but on CUDA indexing's backward (index_put with
        # accumulate) sums each repeated token's rows one after another, and a recall batch repeats its
        # filler token ~100k times: 140 ms of every architecture's backward on an H100 (gpu_check)
        return F.embedding(tokens, self.W_E)


class TokenShift(nn.Module):
    """A causal depthwise convolution on the embeddings: ``x_t + sum_{j=1..width} W_shift[j-1] * x_{t-j}``.

    The short convolution that Mamba and H3 put before their mixer, and the Canon layers of Allen-Zhu
    (2025, "Physics of Language Models 4.1") put before attention. On recall (``STORE k SEP v``) it
    puts the key k into the residual of its value v two positions later, so the first attention layer
    can match a query against bound keys by content. A plain transformer must first grow a head that
    attends exactly two positions back to do this, and on a CPU budget it never did. It carries no
    absolute position: a model with it can still only address the table by content. Every
    architecture offers it (``shift`` in its config), so a comparison can give all the same scaffold;
    Mamba's own short convolution (``d_conv``) sits inside each block, on the expanded channels.
    """

    def __init__(self, width: int, d_model: int, seed: int):
        super().__init__()
        generator = torch.Generator().manual_seed(seed)
        self.W_shift = nn.Parameter(0.5 * torch.randn(width, d_model, generator=generator))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [batch, pos, d_model]
        out, T = x, x.shape[1]
        for j, weight in enumerate(self.W_shift, start=1):  # x shifted j positions later, zeros in front
            out = out + weight * F.pad(x, (0, 0, j, 0))[:, :T]
        return out


def act_name(kind: str, layer: int | None = None) -> str:
    """The hook name of activation ``kind`` at block ``layer``, on every architecture: the one place hook
    names are spelled. TransformerLens's kinds (``utils.get_act_name``: "resid_pre", "resid_post",
    "attn_out", "mlp_out", "q", "k", "v", "z", "pattern", "embed", ...), "mixer_out" for a block's mixer
    output here, and "mixer.NAME" for a hook inside a mixer (Mamba's "mixer.h" and "mixer.y", the LSTM's
    "mixer.hidden" and "mixer.cell", the MLP's "mixer.pre" and "mixer.post")."""
    if kind.startswith("mixer."):
        return f"blocks.{layer}.mixer.hook_{kind.removeprefix('mixer.')}"
    return get_act_name(kind, layer)


class ResidualBlock(nn.Module):
    """Pre-norm residual block around a sequence mixer (or a per-position MLP)."""

    def __init__(self, norm: nn.Module, mixer: nn.Module):
        super().__init__()
        self.ln = norm
        self.mixer = mixer
        self.hook_resid_pre = HookPoint()
        self.hook_mixer_out = HookPoint()
        self.hook_resid_post = HookPoint()

    def forward(self, resid: torch.Tensor) -> torch.Tensor:
        resid = self.hook_resid_pre(resid)
        return self.hook_resid_post(resid + self.hook_mixer_out(self.mixer(self.ln(resid))))


class HookedSequenceModel(AnswerHead, HookedRootModule):
    """A residual stack of ``ResidualBlock``s with TransformerLens hooks; subclasses supply ``make_mixer``.

    ``n_ctx`` is the longest input the model accepts: a learned position table's size, or None for
    models (recurrent ones) that take any length.
    """

    norm = nn.LayerNorm

    def __init__(self, config, task: Task, seed: int = 0, n_ctx: int | None = None):
        super().__init__()
        self.config, self.task, self.provenance = config, task, Provenance(seed=seed)
        d = config.d_model
        d_vocab, d_out = output_sizes(task)
        with torch.random.fork_rng(devices=[]):  # seeded init without touching the caller's RNG
            torch.manual_seed(seed)
            self.embed = InputProjection(task.input_dim, d) if task.continuous else TokenEmbedding(d_vocab, d)
            self.hook_embed = HookPoint()
            if n_ctx is not None:
                self.W_pos = nn.Parameter(torch.randn(n_ctx, d) * 0.02)
                self.hook_pos_embed = HookPoint()
            self.blocks = nn.ModuleList(ResidualBlock(self.make_norm(d), self.make_mixer(layer))
                                        for layer in range(config.n_layers))
            self.ln_final = self.make_norm(d)
            self.unembed = nn.Linear(d, d_out)
        if getattr(config, "shift", None):  # its own generator: the other weights are those of the model without it
            self.token_shift = TokenShift(config.shift, d, seed)
            self.hook_token_shift = HookPoint()  # the embeddings after the shift: the residual stream's start
        # The few cfg fields analyses read (TransformerLens models carry the same names).
        self.cfg = SimpleNamespace(n_layers=config.n_layers, d_model=d, n_ctx=n_ctx, d_vocab=d_vocab, d_vocab_out=d_out)
        self.setup()

    def make_mixer(self, layer: int) -> nn.Module:
        raise NotImplementedError

    def make_norm(self, d: int) -> nn.Module:
        return self.norm(d)

    def no_weight_decay(self) -> set[str]:
        """Names of parameters the trainer exempts from weight decay besides every vector (none by default)."""
        return set()

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        if self.task.continuous and input.dim() == 2:
            input = input[None]
        length = input.shape[1]
        if self.cfg.n_ctx is not None and length > self.cfg.n_ctx:
            raise ConfigError(f"a sequence of {length} positions is longer than this model's context "
                              f"(n_ctx={self.cfg.n_ctx}); train with -M n_ctx={length} to size its position table")
        resid = self.hook_embed(self.embed(input))
        if self.cfg.n_ctx is not None:
            resid = resid + self.hook_pos_embed(self.W_pos[:length].expand(input.shape[0], -1, -1))  # [B, T, d] as in TL
        if getattr(self.config, "shift", None):
            resid = self.hook_token_shift(self.token_shift(resid))
        for block in self.blocks:
            resid = block(resid)
        return self.unembed(self.ln_final(resid))


def matched_width(build, target: int, step: int = 2, tolerance: float = 0.05) -> int:
    """The width (a multiple of ``step``) whose model's parameter count is nearest ``target``.

    ``build(d_model)`` returns a model; models are built on the meta device, so nothing is allocated.
    """
    def count(d: int) -> int:
        with torch.device("meta"):
            return sum(p.numel() for p in build(d).parameters())

    lo, hi = step, step
    while count(hi) < target:  # parameter counts grow with width: bracket, then bisect
        lo, hi = hi, hi * 2
    while hi - lo > step:
        mid = (lo + hi) // 2 // step * step
        lo, hi = (mid, hi) if count(mid) < target else (lo, mid)
    best = min((lo, hi), key=lambda d: abs(count(d) - target))
    if abs(count(best) - target) > tolerance * target:
        raise ConfigError(f"no width within {tolerance:.0%} of {target:,} parameters (nearest: d_model={best}, "
                          f"{count(best):,}); set d_model explicitly with -M d_model=...")
    return best
