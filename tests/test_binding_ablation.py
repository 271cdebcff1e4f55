"""experiments/binding_anneal_ablation.py: what the paper's Mamba's anneal depends on.

The difference from the shipped anneal is checked on constructed intervals whose standard errors are known,
and the shipped ablation.json against the content-addressing records it was made from (so the page's table
cannot drift from the measurements)."""
import json
import math
import runpy
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "experiments/binding_anneal_ablation.py"


@pytest.fixture(scope="module")
def ablation():
    return runpy.run_path(str(SCRIPT))  # defines its functions; main() runs only as a script


def test_difference_adds_the_two_standard_errors_in_quadrature(ablation):
    z = ablation["Z95"]
    shipped = dict(accuracy=0.90, interval=[0.90 - 0.01 * z, 0.90 + 0.01 * z])  # standard error 0.01
    other = dict(accuracy=0.85, interval=[0.85 - 0.02 * z, 0.85 + 0.02 * z])  # 0.02
    diff = ablation["difference"](other, shipped)
    assert diff["difference"] == pytest.approx(-0.05)
    half = z * math.hypot(0.01, 0.02)
    assert diff["interval"] == pytest.approx([-0.05 - half, -0.05 + half])


def test_the_shipped_numbers_are_the_records(ablation):
    shipped = json.loads((ablation["HERE"] / "ablation.json").read_text())
    runs = [d["run"] for d in shipped["settings"]]
    assert runs[0] == ablation["SHIPPED"] and set(runs) <= set(ablation["SETTINGS"])
    for d in shipped["settings"]:
        measured = ablation["measured"](d["run"])
        assert [p["step"] for p in d["measured"]] == [p["step"] for p in measured] and measured[0]["step"] == 0
        for saved, now in zip(d["measured"], measured):
            assert saved["accuracy"] == now["accuracy"] and saved["interval"] == now["interval"]
        assert d["end"]["accuracy"] == measured[-1]["accuracy"]
        # every anneal starts from the same checkpoint's measurement
        assert d["measured"][0]["accuracy"] == shipped["settings"][0]["measured"][0]["accuracy"]
