"""The Task/Batch protocol every wind tunnel follows.

A task samples batches of token sequences together with the exact Bayes predictive posterior at
every query position. Nothing here knows about models: a model reads ``task.vocab_size`` and
``task.seq_len`` to size itself and ``task.answer_logits`` to turn its output into beliefs.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass, field, fields

import torch


class ConfigError(ValueError):
    """A task (or model) was asked for with settings that cannot work. The message says how to fix it."""


# The seed policy, in one place. A seed is an integer in [0, 2^32): the range every torch backend
# accepts, which the training and held-out formulas offset into torch's 64-bit seed range. Training
# batches are seeded by seed * 1_000_003 + step; held-out batches live far above that.
SEED_LIMIT = 2 ** 32
SEED_RANGE = "an integer from 0 to 2^32 - 1"
HELD_OUT_SEED_BASE = 1 << 40


def is_seed(value) -> bool:
    """Whether ``value`` is a seed (an int, not a bool, in [0, SEED_LIMIT))."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < SEED_LIMIT


def held_out_batch(task, n: int, seed: int) -> "Batch":
    """A held-out batch of ``task``: same (n, seed), same batch, never one seen in training."""
    if not isinstance(n, int) or n < 1:
        raise ConfigError(f"need at least one sequence, got n={n}")
    if not is_seed(seed):
        raise ConfigError(f"seed must be {SEED_RANGE}, got {seed!r}")
    return task.sample(n, generator=torch.Generator().manual_seed(HELD_OUT_SEED_BASE + seed))


class PosteriorAtQueries:
    """A posterior given at the same query positions of every row, [B, Q, C], standing for the dense
    [B, T, C] one (uniform placeholder rows elsewhere) until something reads that whole. Training reads
    it at the queries only (``Batch.posterior_at_queries``), and the placeholders are most of the dense
    tensor: recall asks 3 of 329 positions, so a batch of 64 would fill and move 31 MB for 0.6 MB of
    beliefs (on a GPU at batch 1,024, half a gigabyte copied to the device every step)."""

    def __init__(self, values: torch.Tensor, positions: list[int], length: int):
        self.values, self.positions, self.length = values, positions, length  # positions: sorted, distinct

    def map(self, fn) -> "PosteriorAtQueries":
        return PosteriorAtQueries(fn(self.values), self.positions, self.length)

    def dense(self) -> torch.Tensor:
        B, _, C = self.values.shape
        # placeholders in float32 whatever the values' dtype, bit for bit what a dense batch always held
        full = torch.full((B, self.length, C), 1.0 / C, device=self.values.device).to(self.values.dtype)
        full[:, self.positions] = self.values
        return full


class _Posterior:
    """``Batch.posterior``: stored as given; a ``PosteriorAtQueries`` is made dense on first read."""

    def __get__(self, batch, owner=None):
        if batch is None:
            return None  # the dataclass field's default
        value = batch.__dict__["_posterior"]
        if isinstance(value, PosteriorAtQueries):
            value = batch.__dict__["_posterior"] = value.dense()
        return value

    def __set__(self, batch, value):
        batch.__dict__["_posterior"] = value


@dataclass
class Batch:
    tokens: torch.Tensor  # LongTensor [B, T]; FloatTensor [B, T, F] for continuous tasks
    targets: torch.Tensor  # hard labels [B, T] (-100 = unsupervised; float targets for continuous tasks)
    query_mask: torch.Tensor  # BoolTensor [B, T]: positions where the model states a belief
    bayes_entropy: torch.Tensor  # [B, T] bits (differential entropy for continuous tasks)
    posterior: torch.Tensor | None = _Posterior()  # [B, T, C] exact Bayes predictive over the answer classes
    posterior_mean: torch.Tensor | None = None  # [B, T] continuous tasks: Gaussian predictive mean
    posterior_var: torch.Tensor | None = None  # [B, T] ... and variance
    hypothesis: dict = field(default_factory=dict)  # the sampled latent truth
    # Every per-position field is defined where query_mask is set; elsewhere it holds placeholders.

    def posterior_at_queries(self) -> torch.Tensor:
        """``posterior[query_mask]`` ([queries, C], row by row), without making a lazy posterior dense."""
        stored = self.__dict__["_posterior"]
        if isinstance(stored, PosteriorAtQueries):
            return stored.values.reshape(-1, stored.values.shape[-1])
        return self.posterior[self.query_mask]

    def map(self, fn) -> "Batch":
        """A batch whose every tensor (the hypothesis's too) is ``fn(tensor)``; a posterior still given at
        the queries only stays so."""
        def apply(value):
            if isinstance(value, PosteriorAtQueries):
                return value.map(fn)
            return fn(value) if isinstance(value, torch.Tensor) else value
        stored = lambda name: self.__dict__["_posterior"] if name == "posterior" else getattr(self, name)  # noqa: E731
        moved = {f.name: apply(stored(f.name)) for f in fields(self)}
        moved["hypothesis"] = {k: apply(v) for k, v in self.hypothesis.items()}
        return Batch(**moved)

    def to(self, device) -> "Batch":
        return self.map(lambda t: t.to(device))

    def rows(self, start: int, stop: int) -> "Batch":
        """Sequences ``start:stop`` (every tensor is indexed by sequence first)."""
        return self.map(lambda t: t[start:stop])

    def double(self) -> "Batch":
        """Floating-point tensors in float64 (tokens of a discrete task stay integers)."""
        return self.map(lambda t: t.double() if t.is_floating_point() else t)

    def __len__(self) -> int:
        return self.tokens.shape[0]


def entropy_bits(p: torch.Tensor) -> torch.Tensor:
    """Shannon entropy in bits over the last axis, with 0 log 0 = 0."""
    logp = torch.log2(p.clamp_min(1e-30))
    return -(p * logp).where(p > 0, torch.zeros_like(p)).sum(-1)


def batch_at_queries(tokens: torch.Tensor, positions: torch.Tensor, posterior: torch.Tensor,
                     labels: torch.Tensor, hypothesis: dict) -> Batch:
    """A Batch whose beliefs are asked for at the same ``positions`` in every row.

    ``posterior`` [B, Q, C] and ``labels`` [B, Q] are given at the Q query positions only; other
    positions get a uniform placeholder posterior and the -100 "unsupervised" label.
    """
    B, T = tokens.shape[:2]
    C = posterior.shape[-1]
    positions = torch.as_tensor(positions).flatten()
    order = positions.argsort()  # sorted, so the lazy posterior's rows follow posterior[query_mask]'s order
    positions, posterior, labels = positions[order], posterior[:, order], labels[:, order]
    if positions.unique().numel() != positions.numel():
        raise ValueError(f"query positions must be distinct, got {positions.tolist()}")
    query_mask = torch.zeros(B, T, dtype=torch.bool)
    query_mask[:, positions] = True
    # The placeholder rows are all alike, so their entropy is computed once.
    bayes_entropy = torch.full((B, T), math.log2(C))
    bayes_entropy[:, positions] = entropy_bits(posterior.float())
    targets = torch.full((B, T), -100, dtype=torch.long)
    targets[:, positions] = labels
    return Batch(tokens=tokens, targets=targets, query_mask=query_mask,
                 posterior=PosteriorAtQueries(posterior.float(), positions.tolist(), T),
                 bayes_entropy=bayes_entropy, hypothesis=hypothesis)


@dataclass
class Corruption:
    """A clean/corrupted pair of batches for causal interventions (``Task.corrupt``).

    Both batches have the same shape and the same tokens except at ``changed``; each carries its own
    exact posterior, so a patched model's answer at ``query`` can be placed between the clean and the
    corrupted Bayes answers. ``clean`` may differ from the batch it was made from (recall points its
    last query at the changed binding).
    """

    clean: Batch
    corrupted: Batch
    query: int  # the query position whose answer is compared (the same in every row)
    changed: tuple[int, ...]  # the positions whose tokens differ (the same in every row)
    what: str  # one line: which part of the hypothesis was changed


@dataclass(frozen=True)
class Preset:
    """A task's own variant of a named preset (``cpu``, ``paper``): what differs from the generic one.

    ``model`` settings go to every architecture whose config has them (``n_heads`` only to those with
    heads); ``train`` settings override the generic training recipe. ``longest``: the value of the
    task's length setting that learned position tables are sized for, so one model can be tested for
    length generalisation (an architecture with positions gets ``n_ctx`` = that sequence length).
    ``by_arch`` holds the same three for one architecture, applied on top. ``task``: the task settings
    the preset trains on where the user gives none (e.g. recall's range of table sizes), for every
    architecture.
    """

    model: dict = field(default_factory=dict)
    train: dict = field(default_factory=dict)
    longest: int | None = None
    by_arch: dict[str, "Preset"] = field(default_factory=dict)
    task: dict = field(default_factory=dict)


@dataclass(frozen=True)
class PaperRow:
    """One line of the paper's table that ``interp reproduce`` measures on this task's models.

    ``arch`` None: one row per architecture reproduced. ``metric`` is a dotted path into the
    analysis's metrics; ``paper`` None when the paper gives no number. ``claim="over"``: the paper
    claims ours exceeds ``paper`` (a ratio), rather than a value to match. ``options`` go to the analysis.
    """

    experiment: str
    arch: str | None
    analysis: str
    metric: str
    paper: float | None
    paper_text: str
    claim: str = "value"
    options: dict = field(default_factory=dict)
    # Also measured on every other shipped model of the task and architecture (``interp reproduce --runs
    # shipped``), each row with its own budget and recipe: where the preset's budget is not the whole story.
    variants: bool = False


@dataclass(frozen=True)
class Primitive:
    """The inference primitive a task tests, and how a model passes it (``compare``'s matrix).

    ``direction="max"``: pass when ``metric`` <= threshold; ``"min"``: pass when >= threshold.
    """

    name: str
    metric: str
    direction: str
    threshold: float
    why: str = ""  # why the threshold sits where it does


class Task:
    """Base class of a wind tunnel. Subclasses set the class attributes and implement ``sample``.

    A task module is one file in tasks/ with one Task subclass; it is found by name, and everything
    the toolkit needs to know about it is declared here (see the class attributes below), so adding
    a task touches no other file.
    """

    name: str = ""
    order: int = 100  # where it is listed (``interp list``, ``interp reproduce``); ties by name
    vocab_size: int  # input token vocabulary
    n_classes: int  # C: the answer classes the posterior ranges over
    seq_len: int  # T of a sampled batch
    length_setting: str | None = None  # the setting that sets the sequence length (length generalisation)
    # Tokens before this position are a fixed-length header (the HMM's tables), the stream that grows
    # with the length setting starts here; a transformer trained with position offsets keeps the
    # header's positions and moves only the stream's.
    stream_start: int = 0
    # Continuous tasks feed float vectors [B, T, input_dim] instead of tokens and are answered with
    # a Gaussian (mean, variance) instead of C classes.
    continuous: bool = False
    input_dim: int | None = None

    # -- declarations the toolkit derives its tables from --------------------------------------
    # The group of ``hypothesis_tokens()`` that forms the hypothesis frame (key-orthogonality,
    # qk-alignment, frame-precision); None when the task has none.
    frame: str | None = None
    # Whether the exact posterior can put zero mass on an answer class (a hypothesis ruled out).
    eliminates: bool = False
    # A discrete latent with one value per query position, in ``batch.hypothesis`` (e.g. HMM
    # hidden states), and its number of classes (an attribute name of the task); None if none.
    query_latent: str | None = None
    query_latent_classes: str | None = None
    # In-context linear regression: ``batch.hypothesis`` holds the inputs x [B, n, d] and outputs
    # y [B, n], query i predicting y_i from pairs before it (calibration's least-squares curve).
    linear_in_context: bool = False
    primitive: Primitive | None = None  # the inference primitive it tests, if any
    # The corruptions ``corrupt`` makes, by name (the first is the default), each with one line saying
    # which known part of the hypothesis it changes; empty when the task declares none.
    corruptions: dict[str, str] = {}
    presets: dict[str, Preset] = {}  # preset name -> this task's variant of it
    paper_rows: tuple[PaperRow, ...] = ()
    # Named curricula (``--curriculum NAME``): name -> one line saying what it trains on and why. Each is
    # built for the task's own settings and a run's length by ``curriculum``.
    curricula: dict[str, str] = {}

    def curriculum(self, name: str, steps: int) -> list:
        """The stages of the named curriculum ``name`` for this task and a run of ``steps`` steps, as
        ``TrainSettings.curriculum`` holds them. ConfigError for a name the task does not declare."""
        raise ConfigError(self.unknown_curriculum(name))

    def unknown_curriculum(self, name: str) -> str:
        valid = (f"its named curricula: {', '.join(self.curricula)}" if self.curricula else "it names none")
        return (f"task {self.name!r} has no curriculum named {name!r} ({valid}); give the stages as JSON "
                f"instead, e.g. '[[2000, {{...}}]]'")

    @classmethod
    def preset_layers(cls, preset: str, arch: str) -> list[Preset]:
        """This task's layers of ``preset`` for ``arch``, to apply in order over the generic preset: its
        own variant, then that variant's settings for ``arch`` (either may be absent)."""
        own = cls.presets.get(preset)
        return [layer for layer in (own, own and own.by_arch.get(arch)) if layer]

    @classmethod
    def small_config(cls, rng: random.Random) -> dict:
        """Settings of a small random instance whose posterior ``brute_force`` can check cheaply."""
        raise NotImplementedError(f"{cls.__name__} declares no small configurations")

    def brute_force(self, batch: Batch, row: int):
        """The exact posterior at every query of ``row`` by enumerating the generative process, an
        independent route to ``sample``'s closed form: [Q, C] (float64), or (mean, var) [Q] each for
        continuous tasks. Only for small configurations."""
        raise NotImplementedError(f"{type(self).__name__} declares no brute-force oracle")

    def corrupt(self, batch: Batch, generator: torch.Generator | None = None, kind: str = "",
                index: int | None = None) -> Corruption:
        """``batch`` and a copy with one known part of the hypothesis changed (``kind``, one of
        ``corruptions``, "" for the first; ``index``: which pair, observation, binding or output, None for
        the task's default), each with its exact posterior. ConfigError when it cannot be made."""
        raise ConfigError(f"task {self.name!r} declares no corruption for causal interventions")

    def corruption_kind(self, kind: str) -> str:
        """``kind`` checked against ``corruptions`` ("" is the first); a one-line ConfigError otherwise."""
        if not self.corruptions:
            raise ConfigError(f"task {self.name!r} declares no corruption for causal interventions")
        if kind == "":
            return next(iter(self.corruptions))
        if kind not in self.corruptions:
            raise ConfigError(f"{self.name}: unknown corruption {kind!r}; valid: {', '.join(self.corruptions)}")
        return kind

    def frame_tokens(self) -> tuple[str, torch.Tensor]:
        """(name, token ids) of the hypothesis frame; ConfigError when the task declares none."""
        groups = self.hypothesis_tokens()
        if self.frame is None or self.frame not in groups:
            raise ConfigError(f"task {self.name!r} defines no hypothesis tokens for a hypothesis frame")
        return self.frame, groups[self.frame]

    def n_latent_classes(self) -> int:
        """The number of classes of ``query_latent``."""
        return int(getattr(self, self.query_latent_classes))

    def config(self) -> dict:
        """Everything needed to rebuild this task with ``tasks.make(**config)``."""
        raise NotImplementedError

    def sample(self, batch_size: int, generator: torch.Generator | None = None) -> Batch:
        raise NotImplementedError

    def answer_logits(self, logits: torch.Tensor) -> torch.Tensor:
        """The model's logits restricted to the answer classes: [..., vocab_out] -> [..., C]."""
        start = self.answer_token_offset
        return logits[..., start:start + self.n_classes]

    answer_token_offset: int = 0  # output token id of answer class 0

    def batch_from_tokens(self, tokens: torch.Tensor) -> Batch:
        """The Batch of given (e.g. hand-edited) token sequences [B, T], with the exact posterior at
        their queries, read back from the tokens alone. Tasks whose hypothesis is not in the tokens
        cannot do this and raise ConfigError. The true latent answer is unknown: targets are -100."""
        raise ConfigError(f"{self.name}: the Bayes posterior of a typed sequence is not available for this task")

    def token_names(self, tokens: torch.Tensor) -> list[str]:
        """Human-readable names of a 1-D sequence of tokens (for hover text and labels)."""
        return [str(int(t)) for t in tokens]

    def position_names(self, tokens: torch.Tensor) -> list[str]:
        """Names of a 1-D sequence of tokens that say what each token is where it stands (an HMM's table
        entry "T[s0,s1] 0.25", not only "0.25"); ``token_names`` unless the task's layout adds meaning."""
        return self.token_names(tokens)

    def hypothesis_tokens(self) -> dict[str, torch.Tensor]:
        """Token ids whose embeddings span the task's hypothesis frame, by group name."""
        return {}

    def latent_tables(self, batch: Batch, row: int) -> dict[str, tuple[torch.Tensor, list[str], list[str]]]:
        """The latent truth of sequence ``row`` as matrices a person reads (the explorer draws them):
        title -> (matrix [r, c], row names, column names). None by default."""
        return {}

    def latent_path(self, batch: Batch, row: int) -> tuple[str, list[int]] | None:
        """(what it is, its class at each query position) when the true answer class behind every query is
        latent and known for ``row`` (a sampled sequence), for a drawing beside the Bayes-MAP class."""
        return None

    @property
    def max_entropy_bits(self) -> float:
        return math.log2(self.n_classes)

    def with_length(self, n: int) -> "Task":
        """The same task with its length setting changed to ``n`` (for length generalisation)."""
        if self.length_setting is None:
            raise ConfigError(f"task {self.name!r} has no length setting to vary")
        from . import make

        config = self.config()
        config.pop("name")
        config[self.length_setting] = n
        return make(self.name, **config)

    def judged_on(self) -> "Task":
        """The task on which ``compare`` judges this task's primitive: the task itself, unless a task says
        otherwise (recall: every table full, whatever range of table sizes a model trained on)."""
        return self

    def vary(self, setting: str, value) -> "Task":
        """The same task with one setting changed, as a difficulty axis reads it (``interp sweep``):
        the same vocabulary, so a trained model can be measured on it."""
        from . import make

        config = self.config()
        if setting not in config or setting == "name":
            raise ConfigError(f"task {self.name!r} has no setting {setting!r}; its settings: "
                              f"{', '.join(k for k in config if k != 'name')}")
        config[setting] = value
        return make(config.pop("name"), **config)

    def with_table(self, n: int) -> "Task":
        """The same task binding exactly ``n`` key-value pairs (a task with a table of bindings says how)."""
        raise ConfigError(f"task {self.name!r} has no table of bindings to resize")

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.config().items() if k != "name")
        return f"{type(self).__name__}({args})"


MAX_SIZE = 2 ** 20  # the largest count a task or model setting may hold: beyond it sizes overflow or exhaust memory


def stage_options(settings) -> list[dict]:
    """A curriculum stage's task settings as a list: one dict trains on one variant of the task, a list of
    dicts on a mixture of them (``curriculum_choice``)."""
    return list(settings) if isinstance(settings, (list, tuple)) else [settings]


def curriculum_choice(curriculum, step: int) -> tuple[int, int] | None:
    """(stage, option) that step ``step`` trains on under ``curriculum`` ([[until_step, settings], ...]), or
    None once every stage is over (the task itself). A stage that lists several settings is a mixture: its
    steps take them in turn, so each gets an equal share, and the tokens a run trained on are exact
    (zoology trains MQAR on a mixture of table sizes and lengths; the easy ones bootstrap the hard ones)."""
    start = 0
    for index, (end, settings) in enumerate(curriculum):
        if step < end:
            return index, (step - start) % len(stage_options(settings))
        start = end
    return None


def whole(owner: str, label: str, value, low: int = 1) -> int:
    """``value`` if it is an integer from ``low`` to MAX_SIZE; a one-line ConfigError naming it otherwise."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{owner}: {label} must be an integer, got {value!r}")
    if value < low:
        raise ConfigError(f"{owner}: {label} must be at least {low}, got {label}={value}")
    if value > MAX_SIZE:
        raise ConfigError(f"{owner}: {label} must be at most {MAX_SIZE:,}, got {label}={value:,}")
    return value


def checked_batch_size(batch_size) -> int:
    """``batch_size`` itself if it is a positive integer; a one-line ConfigError otherwise."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ConfigError(f"batch_size must be a positive integer, got {batch_size!r}")
    return batch_size
