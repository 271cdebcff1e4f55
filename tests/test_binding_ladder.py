"""experiments/binding_ladder.py --restore: a fresh clone resumes the binding ladder from the points it ships."""
import json
import runpy
from pathlib import Path
from types import SimpleNamespace

from interp.sweep import Point, Sweep

ROOT = Path(__file__).resolve().parent.parent
LADDER = runpy.run_path(str(ROOT / "experiments" / "binding_ladder.py"), run_name="binding_ladder")


def test_the_shipped_points_are_written_back_where_the_sweep_reads_finished_points(tmp_path):
    restored = LADDER["restore"](tmp_path)
    shipped = {name: json.loads((LADDER["OUT"] / name / "sweep.json").read_text())["metrics"]
               for name in LADDER["SWEEPS"] if (LADDER["OUT"] / name / "sweep.json").exists()}
    assert shipped and restored == sum(len(sweep["points"]) for sweep in shipped.values())
    for name, sweep in shipped.items():
        for point in sweep["points"]:
            # the folder the sweep itself gives that point, so it counts as finished and is not trained again
            where = Sweep.run_dir(SimpleNamespace(out=tmp_path / name, setting=sweep["axis"]),
                                  Point(point["arch"], point["value"], lr=point["lr"], seed=point["seed"]))
            assert json.loads((where / "point.json").read_text()) == point
    assert LADDER["restore"](tmp_path) == 0  # a point already there (restored or trained) is left as it is
