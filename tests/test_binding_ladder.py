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
                                  Point(point["arch"], point["value"],  # rate and seed named when several
                                        lr=point["lr"] if len(sweep["lrs"]) > 1 else None,
                                        seed=point["seed"] if len(sweep["seeds"]) > 1 else None))
            assert json.loads((where / "point.json").read_text()) == point
    assert LADDER["restore"](tmp_path) == 0  # a point already there (restored or trained) is left as it is


def test_the_summary_says_each_cell_in_words_the_page_can_show():
    assert LADDER["rate"](3.2e-4) == "3.2e-4" and LADDER["rate"](1e-2) == "1e-2" and LADDER["rate"](0.0032) == "3.2e-3"
    assert LADDER["reached_text"](1e-3, [25600, 32000], 0.99) == "25,600 and 32,000 (at 1e-3)"
    assert LADDER["reached_text"](1e-2, [720000, None], 0.52) == "720,000; 1 of 2 seeds not reached (at 1e-2)"
    assert LADDER["reached_text"](1e-3, [None, None], 0.063) == "not reached (at best 6%, at 1e-3)"
    sweep = dict(archs=["transformer", "mamba"], values=[4, 16], lrs=[1e-3, 1e-2],
                 lrs_by_arch={"transformer": [3.2e-4, 1e-3, 1e-2], "mamba": [1e-3, 1e-2]},
                 ratios={"mamba": {"preset": {"4": dict(ratio=2.44, low=1.4, high=3.75),
                                              "16": dict(ratio=None, low=None, high=None)}}})
    assert LADDER["ratio_texts"](sweep) == {"mamba": {"4": "2.4× (1.4–3.8×)",
                                                      "16": "none: not every seed of both reached 90%"}}
    assert LADDER["rate_range"](sweep) == {"transformer": "3.2e-4 to 1e-2, 3 rates", "mamba": "1e-3 to 1e-2, 2 rates"}
    assert LADDER["ratio_texts"](dict(sweep, archs=["lstm", "mlp"])) == {}
