"""The CLI's instant answers (`interp list`, every `--help`, a refusal on a shipped model) come from the
manifest: shipped current with the sources, rebuilt from the registries when they change."""
import json
import subprocess
import sys

import pytest

from interp import manifest
from tests.cli import run_cli

FAST_COMMANDS = [["--help"], ["list"], ["run", "--help"], ["run", "key-orthogonality", "--help"],
                 ["train", "--help"], ["explore", "--help"], ["reproduce", "--help"], ["sweep", "--help"],
                 ["run", "qk-alignment", "--ckpt", "hmm-transformer-cpu"]]


def test_the_shipped_manifest_is_current():
    data = json.loads(manifest.SHIPPED.read_text())
    assert data["fingerprint"] == manifest.fingerprint(), (
        "interp/manifest.json is stale for these sources: run `python -m interp.manifest`")


@pytest.mark.parametrize("args", FAST_COMMANDS, ids=" ".join)
def test_help_listing_and_a_shipped_refusal_import_no_torch(args):
    """Each answers from the manifest in a fresh process without importing torch (the cost of a
    second-long answer). Timings are measured by benchmarks/cli_time.py, not here."""
    probe = ("import sys; sys.argv = ['interp', *sys.argv[1:]]\n"
             "from interp.cli import entry\n"
             "try:\n    entry()\nexcept SystemExit:\n    pass\n"
             "assert 'torch' not in sys.modules, 'torch was imported'\n")
    done = subprocess.run([sys.executable, "-c", probe, *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr


def test_a_refusal_from_the_manifest_is_the_analysis_s_own(capsys):
    import analyses
    from interp.catalog import shipped
    from interp.checkpoint import load

    fast = run_cli(capsys, "run", "qk-alignment", "--ckpt", "hmm-transformer-cpu")
    model = load(shipped()["hmm-transformer-cpu"])
    with pytest.raises(analyses.AnalysisError) as real:
        analyses.run("qk-alignment", model)
    assert fast.code == 1 and fast.err.strip() == f"interp: error: {real.value}"


def test_listing_names_each_analysis_what_it_measures_and_where_it_applies(capsys):
    import analyses

    listed = run_cli(capsys, "list").out.splitlines()
    for name, analysis in analyses.REGISTRY.items():
        at = next(i for i, line in enumerate(listed) if line.split()[:1] == [name])
        assert analysis.summary in listed[at] and listed[at + 1].strip().startswith("-> shipped: ")
    head = next(line for line in listed if line.split()[:1] == ["qk-alignment"])
    applies = listed[listed.index(head) + 1]
    assert "bijection-transformer-cpu" in applies and "hmm-transformer-cpu" not in applies


@pytest.mark.slow
def test_a_changed_source_is_listed_from_a_fresh_build_kept_in_the_user_cache(tmp_path, monkeypatch, capsys):
    """With the shipped manifest not matching (as after editing a plugin), the listing is built from the
    registries (equal to the shipped one for the same files), kept, and served from the cache next time;
    a folder planted where the cache goes is said in one warning line and left alone."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(manifest, "SHIPPED", tmp_path / "absent.json")
    built = []
    real = manifest.build
    monkeypatch.setattr(manifest, "build", lambda fp=None: built.append(1) or real(fp))
    first, again = run_cli(capsys, "list"), run_cli(capsys, "list")
    assert first.code == again.code == 0 and first.out == again.out and len(built) == 1
    shipped = json.loads((manifest.ROOT / "interp" / "manifest.json").read_text())
    assert first.out.startswith(shipped["list"])  # then the language-model packages, as installed here
    cache = manifest.user_cache(manifest.fingerprint())
    cache.unlink()
    cache.mkdir()
    warned = run_cli(capsys, "list")
    assert warned.code == 0 and warned.out == first.out and len(built) == 2
    assert warned.err.startswith("interp: warning: the listing is not cached: ") and cache.is_dir()
