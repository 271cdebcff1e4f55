"""The results store (interp/results.py): provenance, reuse only for the same weights and complete
files, and one reader that refuses what is not a result."""
import hashlib
import json

import pytest
from safetensors.torch import save_file

from analyses import compare
from analyses.base import AnalysisError, Result, read_result
from interp import results
from interp.errors import UserError


def result() -> Result:
    return Result("calibration", "a definition", {"entropy_mae_bits": 0.25, "n_sequences": 3})


def checkpoint(path, value: float):
    import torch

    save_file({"w": torch.full((4,), value)}, str(path))
    return path


def test_a_result_json_holds_its_provenance_and_reads_back(tmp_path, monkeypatch):
    file = checkpoint(tmp_path / "step.safetensors", 1.0)
    context = results.provenance(file, run="tiny", options={"n": 3})
    assert context["checkpoint_sha256"] == hashlib.sha256(file.read_bytes()).hexdigest()
    assert context["command"] is None and context["versions"]["torch"]  # made from Python (here pytest): no command
    monkeypatch.setattr("sys.argv", ["/venv/bin/interp", "run", "calibration", "--ckpt", "my run"])
    assert results.provenance()["command"] == "interp run calibration --ckpt 'my run'"
    monkeypatch.setattr("sys.argv", ["/repo/interp/__main__.py", "reproduce"])  # python -m interp
    assert results.provenance()["command"] == "interp reproduce"
    results.write(result(), tmp_path / "out", ("json",), context)
    saved = read_result(tmp_path / "out" / "calibration.json", "calibration")
    assert saved["metrics"] == {"entropy_mae_bits": 0.25, "n_sequences": 3}
    assert saved["run"] == "tiny" and saved["checkpoint"] == str(file) and saved["definition"] == "a definition"
    assert list(saved)[0] == "analysis" and list(saved)[-1] == "metrics"  # the numbers after where they came from


@pytest.mark.parametrize("content, analysis", [
    ("{not json", None),                                       # not JSON
    ("[1, 2]", None),                                          # not an object
    (json.dumps({"analysis": "calibration"}), None),           # no numbers
    (json.dumps({"analysis": "calibration", "metrics": {}}), "sweep"),  # another analysis's result
])
def test_what_is_not_a_result_is_refused_by_name(tmp_path, content, analysis):
    path = tmp_path / "x.json"
    path.write_text(content)
    with pytest.raises(AnalysisError, match=f"x.json is not an? {analysis or 'analysis'} result"):
        read_result(path, analysis)
    with pytest.raises(UserError, match="is not"):
        results.read(path, analysis)
    with pytest.raises(AnalysisError, match="is not an analysis result"):
        read_result(tmp_path / "missing.json")


def test_a_result_is_reused_only_for_the_same_weights_and_all_its_files(tmp_path):
    file = checkpoint(tmp_path / "step.safetensors", 1.0)
    folder = tmp_path / "out"
    res = result()
    res.figures = {}
    results.write(res, folder, ("json", "pdf"), results.provenance(file, figures=[]))
    assert results.reusable(folder, "calibration", file)["metrics"]["entropy_mae_bits"] == 0.25
    (folder / "calibration.pdf").unlink()  # a figure file lost: computed again
    assert results.reusable(folder, "calibration", file) is None
    results.write(res, folder, ("json", "pdf"), results.provenance(file, figures=[]))
    checkpoint(file, 2.0)  # retrained in place: same path, other weights
    assert results.reusable(folder, "calibration", file) is None
    (folder / "calibration.json").write_text("{")  # a corrupt record is no record
    assert results.reusable(folder, "calibration", file) is None


def test_compare_reads_a_sweep_through_the_reader(tmp_path):
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    (sweep / "sweep.json").write_text(json.dumps({"analysis": "calibration", "metrics": {}}))
    with pytest.raises(AnalysisError, match="--sweeps: .*sweep.json is not a sweep result; `interp sweep --out"):
        compare.compute([], sweeps=str(sweep))


def test_a_record_that_is_not_a_search_names_the_command_that_writes_one(tmp_path):
    (tmp_path / "tune.json").write_text(json.dumps({"analysis": "calibration", "metrics": {}}))
    with pytest.raises(UserError, match="tune.json is not a tune result; `interp tune --out FOLDER` writes one"):
        results.read(tmp_path / "tune.json", "tune")
