"""frame-precision and belief-clusters on constructed inputs and tiny runs whose answers are known."""
import json
import math

import numpy as np
import pytest
import torch

import analyses
import models
import tasks
from analyses import belief_clusters as bc
from analyses import frame_precision as fp
from interp import checkpoint
from interp.recipe import stated
from interp.train import Trainer, TrainSettings

TASK = dict(name="bijection", V=6, L=5)
MODEL = dict(d_model=16, n_layers=2, n_heads=2)


# -- frame-precision helpers ------------------------------------------------------------------
def test_js_divergence_is_zero_for_identical_and_one_bit_for_disjoint():
    p = torch.softmax(torch.randn(4, 7, generator=torch.Generator().manual_seed(0)), -1)
    assert torch.equal(fp.js_divergence_bits(p, p), torch.zeros(4, dtype=torch.float64))
    a, b = torch.eye(5)[[0, 1, 2]], torch.eye(5)[[3, 4, 0]]  # one-hots on different outcomes
    assert torch.allclose(fp.js_divergence_bits(a, b), torch.ones(3, dtype=torch.float64))
    half = torch.tensor([0.5, 0.5, 0.0])  # JS([1,0,0], [.5,.5,0]) in closed form
    expected = 0.5 * math.log2(4 / 3) + 0.5 * (0.5 * math.log2(2 / 3) + 0.5 * math.log2(2))
    assert fp.js_divergence_bits(torch.tensor([1.0, 0, 0]), half).item() == pytest.approx(expected)


def test_subspace_overlap_of_identical_and_orthogonal_subspaces():
    d, k = 8, 3
    keys = torch.randn(6, d, generator=torch.Generator().manual_seed(1))
    u = fp.top_subspace(keys, k)
    assert u.shape == (d, k)
    assert fp.subspace_overlap(u, u) == pytest.approx(1, abs=1e-12)
    assert fp.subspace_overlap(u, u) / (k / d) == pytest.approx(d / k, rel=1e-12)
    g = torch.Generator().manual_seed(2)  # random subspaces overlap k/d on average: the null of the ratio
    null = [fp.subspace_overlap(fp.top_subspace(torch.randn(k, d, generator=g), k),
                                fp.top_subspace(torch.randn(k, d, generator=g), k)) for _ in range(400)]
    assert sum(null) / len(null) == pytest.approx(k / d, abs=0.03)
    e = torch.eye(d, dtype=torch.float64)
    assert fp.subspace_overlap(e[:, :k], e[:, k:2 * k]) == 0
    assert fp.subspace_overlap(e[:, :2], e[:, [1, 5]]) == pytest.approx(0.5)  # one shared direction of two
    assert fp.frame_k(6, 8) == 3 and fp.frame_k(20, 24) == 10


def test_settling_step_on_known_curves():
    steps = [0, 100, 200, 300, 400]
    assert fp.settling_step(steps, [10, 6, 2, 0.5, 0]) == 300  # progress .4 .8 .95 -> first >= .9 at 300
    assert fp.settling_step(steps, [0, 1, 9, 10, 10]) == 200  # rising curve, exactly 90% counts
    assert fp.settling_step(steps, [0, 0.95, 0.2, 0.3, 1]) == 100  # the first crossing, even if it falls back
    assert fp.settling_step(steps, [3, 3, 3, 3, 3]) == 0  # no change: settled from the start
    assert fp.settling_step(steps, [5, 4, 3, 2, 1]) == 400  # straight line: only the last reaches 90%
    assert fp.settling_step(steps, [1, None, 0, 0, 0]) is None


# -- frame-precision end to end ----------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp("frame") / "run"
    settings = TrainSettings(steps=250, batch_size=32, lr=3e-3, warmup=20, eval_every=250, eval_size=64)
    Trainer.start(out, stated(TASK, "transformer", MODEL, settings), progress=False).run()
    return out


def test_frame_precision_on_a_tiny_run(tiny_run):
    model = checkpoint.load(tiny_run)
    assert model.run_dir == tiny_run and model.step == 250
    result = analyses.run("frame-precision", model, n=128)
    m = result.metrics
    assert m["steps"] == [0, 100, 200, 250] and m["n_checkpoints"] == 4 and m["final_step"] == 250
    frame, prec = m["frame"], m["precision"]
    # every settling step is the stated rule applied to the reported curve, and the headline follows from them
    steps, settle = m["steps"], m["settling_steps"]
    mean = lambda rows: [sum(r) / len(r) for r in rows]  # noqa: E731
    assert settle == dict(frame_ratio=fp.settling_step(steps, mean(frame["overlap_ratio"])),
                          attention_js=fp.settling_step(steps, mean(frame["attention_js_bits"])),
                          entropy_mae=fp.settling_step(steps, [math.log10(v) for v in prec["entropy_mae_bits"]]),
                          entropy_r2=fp.settling_step(steps, prec["entropy_r2"]))
    assert m["frame_curve"] == "frame_ratio" and m["frame_settling_step"] == settle["frame_ratio"]
    assert m["precision_settling_step"] == settle["entropy_mae"]
    assert m["attention_settles_first"] == (settle["attention_js"] < settle["entropy_mae"])
    d_head, k = 8, 3  # d_model 16 / 2 heads; k = min(6 value tokens, 8) // 2
    assert frame["group"] == "values" and frame["d_head"] == d_head and frame["k"] == k
    assert frame["max_ratio"] == pytest.approx(d_head / k)
    assert frame["attention_js_bits"][-1] == [0.0, 0.0]  # the final checkpoint against itself, exactly
    assert all(r == pytest.approx(d_head / k, rel=1e-9) for r in frame["overlap_ratio"][-1])
    assert all(0 < js <= 1 for js in frame["attention_js_bits"][0])
    assert len(frame["overlap_ratio"]) == 4 and len(frame["overlap_ratio"][0]) == 2
    assert prec["entropy_mae_bits"][-1] < prec["entropy_mae_bits"][0]  # it learned something
    assert len(prec["entropy_r2"]) == 4 and all(r is None or r <= 1 for r in prec["entropy_r2"])
    assert m["frame_settling_step"] in m["steps"] and m["precision_settling_step"] in m["steps"]
    assert m["frame_settles_first"] == (m["frame_settling_step"] < m["precision_settling_step"])
    json.dumps(m, allow_nan=False)
    assert set(result.figures) == {"settling", "frame", "precision"}
    for fig in result.figures.values():
        assert fig.layout.title.text and fig.layout.xaxis.type == "log"
    assert "90%" in result.definition and "half the smallest positive" in result.definition


def test_a_checkpoint_without_its_run_folder_is_refused(tmp_path):
    model = models.build("transformer", tasks.from_config(TASK), config=MODEL, seed=0)
    checkpoint.save(tmp_path / "alone.safetensors", model, step=0, seed=0)
    alone = checkpoint.load(tmp_path / "alone.safetensors")
    assert alone.run_dir is None
    with pytest.raises(analyses.AnalysisError, match=r"needs a run folder with several checkpoints \(at least 3; this "
                                                     r"model's run holds 0\); pass the run folder, e.g. --ckpt runs/NAME"):
        analyses.run("frame-precision", alone)
    for step in (0, 100):  # a run folder with only two checkpoints is refused too
        checkpoint.save(tmp_path / "short" / "checkpoints" / checkpoint.checkpoint_name(step), model, step, 0)
    with pytest.raises(analyses.AnalysisError, match="holds 2\\)"):
        analyses.run("frame-precision", checkpoint.load(tmp_path / "short"))


# -- belief-clusters ---------------------------------------------------------------------------
def test_purity_and_silhouette_of_well_separated_blobs():
    rng = np.random.default_rng(0)
    centres = np.array([[0, 0, 0], [20, 0, 0], [0, 20, 0]], dtype=float)
    labels = np.repeat([0, 1, 2], 200)
    points = centres[labels] + rng.normal(size=(600, 3))
    clusters = bc.kmeans_labels(points, 3, seed=0)
    assert bc.purity(clusters, labels) == 1.0
    sub = bc.subsample_indices(600, seed=0, size=300)
    assert len(sub) == 300 and len(np.unique(sub)) == 300
    assert bc.silhouette(points, clusters, sub) > 0.85
    assert bc.silhouette(points, labels, sub) > 0.85
    assert bc.silhouette(points, np.zeros(600, dtype=int), sub) is None  # one label: undefined
    assert bc.purity(np.zeros(600, dtype=int), labels) == pytest.approx(1 / 3)  # one cluster: largest share
    assert bc.purity(np.array([0, 0, 1, 1]), np.array([2, 2, 2, 0])) == 0.75


def test_belief_clusters_on_an_untrained_hmm_model():
    task = tasks.make("hmm", S=3, O=3, K=6)
    model = models.build("transformer", task, config=dict(d_model=16, n_layers=2, n_heads=2), seed=0).eval()
    result = analyses.run("belief-clusters", model, n=100)
    m = result.metrics
    for key in ("kmeans_silhouette", "true_state_silhouette", "purity", "purity_vs_bayes_map", "bayes_map_accuracy",
                "majority_state_share", "pca_explained_variance_ratio", "per_layer", "n_points"):
        assert key in m
    assert m["n_points"] == 600 and m["n_states"] == 3 and m["silhouette_points"] == 600
    assert len(m["per_layer"]["purity"]) == 2 and m["per_layer"]["hook"][-1] == "blocks.1.hook_resid_post"
    assert m["purity"] == m["per_layer"]["purity"][-1]
    assert m["majority_state_share"] - 1e-9 <= m["purity"] <= 1
    assert -1 <= m["kmeans_silhouette"] <= 1
    json.dumps(m, allow_nan=False)
    assert set(result.figures) == {"pca-scatter", "per-layer"}
    scatter = result.figures["pca-scatter"]
    assert len(scatter.data) == 3 and sum(len(t.x) for t in scatter.data) == 600
    assert "true state" in scatter.data[0].hovertemplate and "Bayes posterior max" in scatter.data[0].hovertemplate
    assert "arg-max true state" in result.definition


def test_belief_clusters_refuses_a_task_without_a_latent_state_per_query(small_model):
    assert small_model.task.query_latent is None
    with pytest.raises(analyses.AnalysisError, match="needs a task with a discrete latent state at every query"):
        analyses.run("belief-clusters", small_model)


def test_options():
    assert analyses.options("frame-precision") == {"n": 500, "seed": 1234}
    assert analyses.options("belief-clusters") == {"n": 500, "seed": 1234}
