"""What a fault leaves: resumes after odd logs, advice that works (the locks: tests/test_locks.py).

The one-line messages themselves are rows of tests/test_bad_inputs.py (docs/bad-inputs.md); here are
the behaviours that a row cannot show: a fresh run that fails on an
unwritable folder leaves nothing behind, a resumed log with a non-UTF-8 line resumes, the advice of
an error is a command that works, a reproduction rerun after a full disk makes the figures it links.
The explorer's requests are fuzzed against the real Dash endpoints on 127.0.0.1 (slow: a server).
"""
from __future__ import annotations

import errno
import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

from tests.cli import fork_cli, run_cli, wait_for
from tests import tiny

TINY = tiny.cli_args(n_layers=1)


# -- files a fault leaves --------------------------------------------------------------------------
def test_a_fresh_run_on_an_unwritable_checkpoints_folder_leaves_nothing(tmp_path, capsys):
    """The issue: a read-only RUN/checkpoints ended in an OSError and left run.json marked running, so
    the next `--out RUN` was refused. Run for real as an unprivileged user (root ignores permissions)."""
    # the same training once here first, so every module it imports is loaded before the fork: the
    # unprivileged child may not be allowed to read the interpreter's files
    assert run_cli(capsys, "train", "--out", tmp_path / "warm", *TINY, "--steps", "3").code == 0
    root = Path(tempfile.mkdtemp(prefix="interp-ro-", dir="/tmp"))
    try:
        os.chmod(root, 0o777)
        run = root / "RUN"
        (run / "checkpoints").mkdir(parents=True)
        os.chmod(run, 0o777)
        os.chmod(run / "checkpoints", 0o500)

        def unprivileged():
            os.chdir(root)
            if os.geteuid() == 0:
                os.setgid(65534)
                os.setuid(65534)

        log = tmp_path / "train.log"
        status = wait_for(fork_cli(log, "train", "--out", "RUN", *TINY, "--steps", "3", prepare=unprivileged))
        output = log.read_text()
        assert os.WEXITSTATUS(status) == 1
        assert output.strip().splitlines()[-1] == ("interp: error: cannot write to RUN/checkpoints: Permission denied; "
                                                   "choose another folder with --out")
        assert "Traceback" not in output and "OSError" not in output
        assert sorted(p.name for p in run.iterdir()) in ([], ["checkpoints"])  # no run.json, metrics or lock
        if (run / "checkpoints").exists():
            os.chmod(run / "checkpoints", 0o755)
        again = wait_for(fork_cli(log, "train", "--out", "RUN", *TINY, "--steps", "3", prepare=lambda: os.chdir(root)))
        assert os.WEXITSTATUS(again) == 0, log.read_text()
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_a_resume_over_a_log_with_a_line_that_is_not_utf8(workspace_template, tmp_path, monkeypatch, capsys):
    shutil.copytree(workspace_template / "paused", tmp_path / "paused")
    log = tmp_path / "paused" / "metrics.jsonl"
    log.write_bytes(b'{"step": 1, "loss": 2.0}\n\xff\xfe not text \xe9\n{"step": "one"}\n')
    monkeypatch.chdir(tmp_path)
    result = run_cli(capsys, "train", "--resume", "--out", "paused")
    assert result.code == 0, result.err
    lines = log.read_bytes().splitlines()
    assert lines[0] == b'{"step": 1, "loss": 2.0}' and all(json.loads(line)["step"] > 1 for line in lines[1:])


def test_a_curriculum_nested_50000_deep_is_one_line(tmp_path, capsys):
    deep = "[" * 50_000 + "]" * 50_000
    result = run_cli(capsys, "train", "--out", tmp_path / "run", *TINY, "--curriculum", deep)
    assert result.code == 1 and result.err.count("\n") == 1 and "(nested too deeply)" in result.err
    result = run_cli(capsys, "train", "--out", tmp_path / "run", *TINY, "-T", f"V={deep}")
    assert result.code == 1 and result.err.strip() == "interp: error: task option 'V' is nested too deeply"
    assert not (tmp_path / "run").exists()


def test_a_write_through_a_planted_link_never_happens(tmp_path, monkeypatch):
    """What the issue did: `ln -s ~/victim.txt RUN/.lock; interp train --resume --out RUN`. The victim is
    untouched, for the lock, the log appended to, and the files replaced whole."""
    from interp.errors import UserError
    from interp.files import RunLock, append_regular, atomic_write_text

    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    run = tmp_path / "RUN"
    run.mkdir()
    for name, act in ((".lock", lambda p: RunLock(run).acquire()), ("metrics.jsonl", lambda p: append_regular(p, b"x\n")),
                      ("run.json", lambda p: atomic_write_text(p, "{}"))):
        (run / name).symlink_to(victim)
        with pytest.raises(UserError, match="is a symbolic link, not a regular file"):
            act(run / name)
        assert victim.read_text() == "precious\n" and (run / name).is_symlink()
        (run / name).unlink()
        os.mkfifo(run / name)
        with pytest.raises(UserError, match="is a named pipe, not a regular file"):
            act(run / name)  # and never blocks on the pipe
        (run / name).unlink()


def test_a_link_planted_at_an_output_folder_mark_is_not_written_through(workspace_template, tmp_path, monkeypatch,
                                                                         capsys):
    shutil.copytree(workspace_template / "tiny", tmp_path / "tiny")
    (tmp_path / "victim.txt").write_text("precious\n")
    (tmp_path / "figures" / "tiny").mkdir(parents=True)
    (tmp_path / "figures" / "tiny" / ".interp-source").symlink_to(tmp_path / "victim.txt")
    monkeypatch.chdir(tmp_path)
    result = run_cli(capsys, "run", "calibration", "--ckpt", "tiny", "--format", "json", "--n", "20")
    assert result.code == 0 and (tmp_path / "figures" / "tiny" / "calibration.json").exists()
    assert result.err.strip() == ("interp: warning: the results are written, but their folder is not marked: "
                                  "figures/tiny/.interp-source is a symbolic link, not a regular file; the toolkit "
                                  "never writes through a link (it would change the file the link points to): "
                                  "remove it, or write elsewhere")
    assert (tmp_path / "victim.txt").read_text() == "precious\n"


@pytest.mark.slow
def test_a_reproduction_rerun_after_a_full_disk_makes_its_figures(tmp_path, monkeypatch, capsys):
    """The issue: after ENOSPC, calibration.json was on disk without its PNGs, the rerun took the JSON as
    the cached result, and reproduction.md linked PNGs that never came. Now the JSON is written last, and
    a result is reused only when every figure it lists is there."""
    from interp.reproduce import Reproduction
    from interp.recipe import stated
    from interp.train import Trainer, TrainSettings

    job = Reproduction("cpu", tmp_path / "runs", tmp_path / "repro", ("bijection",), ("mlp",))
    Trainer.start(job.run_dir("bijection", "mlp"),
                  stated(dict(name="bijection", V=6, L=5), "mlp", dict(d_model=16),
                         TrainSettings(steps=5, batch_size=8, warmup=1, eval_every=5, eval_size=20)),
                  progress=False).run()
    folder = tmp_path / "repro" / "bijection-mlp-cpu"
    real_fsync = os.fsync

    def full_on_png(fd):  # the disk fills while the PNGs are written
        if os.readlink(f"/proc/self/fd/{fd}").endswith(".png.tmp") or ".png." in os.readlink(f"/proc/self/fd/{fd}"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_fsync(fd)

    with monkeypatch.context() as patch:
        patch.setattr(os, "fsync", full_on_png)
        with pytest.raises(Exception, match="No space left on device"):
            job.analyse("bijection", "mlp", "calibration")
    assert not (folder / "calibration.json").exists() and not list(folder.glob("*.png"))
    saved = job.analyse("bijection", "mlp", "calibration")
    pngs = [folder / f"calibration-{name}.png" for name in saved["figures"]]
    assert pngs and all(p.stat().st_size for p in pngs)
    pngs[0].unlink()  # a result written before results wrote their JSON last: its figure missing
    again = job.analyse("bijection", "mlp", "calibration")
    assert pngs[0].exists() and again["figures"] == saved["figures"]


# -- advice that works -----------------------------------------------------------------------------
@pytest.mark.slow
def test_the_advice_of_a_compile_that_cannot_build_is_a_command_that_works(tmp_path):
    """Resuming a --compile run where no C++ compiler works said to pass --no-compile, which --resume
    refused. Now the advice is the whole command, and the test runs it."""
    from interp.recipe import stated
    from interp.train import Trainer, TrainSettings

    Trainer.start(tmp_path / "run",
                  stated(dict(name="bijection", V=6, L=5), "transformer", dict(d_model=16, n_layers=1, n_heads=2),
                         TrainSettings(steps=5, batch_size=8, warmup=1, eval_every=5, eval_size=20, compile=True)),
                  progress=False).close()  # a compile run interrupted before its first step
    # In fresh processes: a compiler that failed once stays failed in inductor's caches for the rest of
    # a process, which would break every later compiled test in the same pytest run.
    env = dict(os.environ, CXX="/nonexistent/c++", TORCHINDUCTOR_FORCE_DISABLE_CACHES="1")  # no compiler, no cache

    def interp(*args):
        return subprocess.run([sys.executable, "-m", "interp", *args], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=600)
    failed = interp("train", "--resume", "--out", "run")
    errors = [line for line in failed.stderr.splitlines() if line.startswith("interp: error:")]  # a line of its own
    assert failed.returncode == 1 and len(errors) == 1 and "Traceback" not in failed.stderr, failed.stderr
    advice = errors[0].split("or train without it: ")[1]
    assert advice == "interp train --resume --out run --no-compile"
    done = interp(*shlex.split(advice)[1:])
    assert done.returncode == 0, done.stderr
    assert "continues without it" in done.stderr
    record = json.loads((tmp_path / "run" / "run.json").read_text())
    assert record["status"] == "finished" and record["train"]["compile"] is True  # the recipe as it was started
    assert record["resumes"][-1]["compile"] is False


# -- the explorer's requests, fuzzed against the real server ----------------------------------------
def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def live_explorer(workspace_template):
    """``interp explore`` of the tiny run, served by werkzeug on 127.0.0.1 in a thread."""
    from werkzeug.serving import make_server

    from interp.explore import Explorer, build_app

    explorer = Explorer(workspace_template / "tiny")
    app = build_app(explorer)
    server = make_server("127.0.0.1", free_port(), app.server, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield explorer, app, f"http://127.0.0.1:{server.server_port}/_dash-update-component"
    server.shutdown()


def post(url: str, body: bytes) -> tuple[int, str]:
    import urllib.error
    import urllib.request

    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=120) as answer:
            return answer.status, answer.read().decode(errors="replace")
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode(errors="replace")


def odd_values():
    from hypothesis import strategies as st

    leaves = st.one_of(st.none(), st.booleans(), st.integers(-2 ** 80, 2 ** 80), st.integers(-3, 30),
                       st.floats(allow_nan=False), st.text(max_size=8), st.sampled_from(["H0.0", "B0", "k1 v2", "zero"]))
    return st.recursive(leaves, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                        st.dictionaries(st.sampled_from(["tokens", "seed", "x"]), inner,
                                                                        max_size=3)), max_leaves=8)


@pytest.mark.slow
def test_fuzzed_requests_never_get_a_500(live_explorer):
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from tests.explorer_requests import REQUESTS, Request, explorer_request

    explorer, app, url = live_explorer
    views = sorted({r.view for r in REQUESTS})
    properties = sorted({f"{i['id']}.{i['property']}" for cb in app.callback_map.values()
                         for i in [*cb["inputs"], *cb["state"]]})

    @settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
    @given(view=st.sampled_from(views), changes=st.dictionaries(st.sampled_from(properties), odd_values(), max_size=3),
           mangle=st.sampled_from([None, "outputs", "inputs", "output", "changed", "truncate"]))
    def fuzz(view, changes, mangle):
        body = json.loads(explorer_request(app, explorer, Request("fuzz", view, changes, 0, "")))
        if mangle == "outputs":
            body["outputs"] = changes or None
        elif mangle == "inputs":
            body["inputs"] = body["inputs"][:-1] + [changes]
        elif mangle == "output":
            body["output"] = list(changes) or 7
        elif mangle == "changed":
            body["changedPropIds"] = changes
        raw = json.dumps(body).encode()
        if mangle == "truncate":
            raw = raw[: len(raw) // 2]
        status, text = post(url, raw)
        assert status in (200, 204, 400, 413), (status, text[:500], raw[:500])

    fuzz()
    # and the server still answers a well-formed request afterwards
    status, _ = post(url, explorer_request(app, explorer, Request("fine", "code", {}, 200, "")))
    assert status == 200


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))


def test_real_valued_sequences_compare_as_numbers_as_the_page_writes_them():
    """The page's JSON writes a float 1.0 as 1: a sampled regression sequence must still be recognised
    (it was refused, so no view of a regression model ever drew in the browser); a bool is no number."""
    from interp.requests import same_numbers

    assert same_numbers([[1.0, -0.5], [0.0, 2.25]], [[1, -0.5], [0, 2.25]])
    assert not same_numbers([[1.0, -0.5]], [[1.0, -0.25]]) and not same_numbers([[1.0]], [[1.0, 0.0]])
    assert not same_numbers([[True]], [[1.0]]) and not same_numbers([["1"]], [[1.0]])


# -- round four: the language-model cache -----------------------------------------------------------------
@pytest.fixture(scope="module")
def cached_conversion(tmp_path_factory):
    """A conversion cache folder of a tiny Llama, made by the real ``convert`` (the GGUF reading replaced)."""
    from models import gguf_model
    from tests.tiny_language_models import tiny, word_tokenizer

    tokenizer = word_tokenizer()
    folder = tmp_path_factory.mktemp("cache") / "tiny-0123"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(gguf_model, "read_gguf", lambda path: (tiny("llama-gqa", len(tokenizer)), tokenizer))
        patch.setattr(gguf_model, "file_digest", lambda path: "0" * 64)
        gguf_model.convert(Path("tiny.gguf"), folder, progress=False)
    return folder


DAMAGE = {
    "model.safetensors truncated": lambda f: (f / "model.safetensors").write_bytes(
        (f / "model.safetensors").read_bytes()[:1000]),
    "model.safetensors missing": lambda f: (f / "model.safetensors").unlink(),
    "config.json missing": lambda f: (f / "config.json").unlink(),
    "reference.safetensors missing": lambda f: (f / "reference.safetensors").unlink(),
    "config.json garbage": lambda f: (f / "config.json").write_text("{not json"),
    "tokenizer missing": lambda f: shutil.rmtree(f / "tokenizer"),
    "parity.json without its tolerance": lambda f: (f / "parity.json").write_text(json.dumps(
        {k: v for k, v in json.loads((f / "parity.json").read_text()).items() if k != "tolerance"})),
}


@pytest.mark.parametrize("damage", DAMAGE)
def test_a_damaged_conversion_cache_is_one_line(damage, cached_conversion, tmp_path):
    from models import gguf_model
    from tasks import ConfigError

    folder = tmp_path / cached_conversion.name
    shutil.copytree(cached_conversion, folder)
    gguf_model.load_cached(folder)  # whole, it loads
    DAMAGE[damage](folder)
    with pytest.raises(ConfigError) as refused:
        gguf_model.load_cached(folder)
    assert str(refused.value).startswith(f"the cached conversion in {folder} is damaged (")
    assert str(refused.value).endswith("); delete the folder to convert again") and "\n" not in str(refused.value)


@pytest.mark.parametrize("root", ["a file", "read-only"])
def test_the_conversion_cache_root_is_checked_before_converting(root, workspace_template, tmp_path, monkeypatch):
    from models import gguf_model
    from tasks import ConfigError

    if root == "a file":
        (tmp_path / "cache").write_text("a file where the cache folder goes\n")
    else:  # a read-only file system refuses new files to anyone, root too
        real = tempfile.mkstemp

        def refuse(*args, dir=None, **kwargs):
            if dir is not None and str(tmp_path / "cache") in str(dir):
                raise OSError(errno.EROFS, os.strerror(errno.EROFS))
            return real(*args, dir=dir, **kwargs)
        monkeypatch.setattr(tempfile, "mkstemp", refuse)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(gguf_model, "convert", lambda *a, **k: pytest.fail("converted before the cache was checked"))
    with pytest.raises(ConfigError, match="the conversion cache .* cannot be written .*set XDG_CACHE_HOME"):
        gguf_model.open_gguf(str(workspace_template / "whole.gguf"))
