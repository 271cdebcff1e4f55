"""Length generalisation: per-length calibration, and a clear refusal past the position table."""
import pytest
import torch

import analyses
import models
import tasks


def test_lengths_and_boundary_on_a_model_sized_for_them():
    task = tasks.make("hmm", S=2, O=2, K=6)
    longest = task.with_length(12).seq_len
    model = models.build("transformer", task, config=dict(d_model=32, n_layers=1, n_heads=2, n_ctx=longest)).eval()
    result = analyses.run("length-generalization", model, lengths="6,9,12", n=64)
    m = result.metrics
    assert m["trained_queries"] == 6 and m["length_setting"] == "K" and m["n_ctx"] == longest
    assert list(m["lengths"]) == ["6", "9", "12"]
    assert len(m["lengths"]["12"]["abs_error_bits"]) == 12
    assert m["lengths"]["6"]["beyond_training_mae_bits"] is None
    beyond = m["lengths"]["12"]["abs_error_bits"][6:]
    assert m["lengths"]["12"]["beyond_training_mae_bits"] == pytest.approx(sum(beyond) / 6)
    assert set(result.figures) == {"error-by-position", "mae-by-length"}


def test_past_n_ctx_is_refused_with_the_fix():
    task = tasks.make("bijection", V=10, L=5)
    model = models.build("transformer", task, config=dict(d_model=16, n_layers=1, n_heads=2))
    with pytest.raises(analyses.AnalysisError, match=r"L=8 needs 15 positions but the model has n_ctx=9; retrain with -M n_ctx=15"):
        analyses.run("length-generalization", model, lengths="5,8")
    with pytest.raises(analyses.AnalysisError, match="L=12: bijection: L=12 > V=10"):
        analyses.run("length-generalization", model, lengths="12")
    with pytest.raises(analyses.AnalysisError, match="comma-separated integers"):
        analyses.run("length-generalization", model, lengths="five")
    # The model itself refuses a too-long input with the same advice instead of a shape error.
    with pytest.raises(tasks.ConfigError, match="n_ctx=9"):
        model(task.with_length(8).sample(2, generator=torch.Generator().manual_seed(0)).tokens)


def test_default_lengths_leave_out_what_the_task_or_positions_refuse_and_say_why():
    task = tasks.make("bijection", V=10, L=5)  # 1.5x = 8 needs 15 positions (n_ctx 9); 2.5x = 12 > V
    model = models.build("transformer", task, config=dict(d_model=16, n_layers=1, n_heads=2))
    m = analyses.run("length-generalization", model, n=16).metrics
    assert list(m["lengths"]) == ["5"]
    assert "retrain with -M n_ctx=15" in m["skipped_lengths"]["8"]
    assert "L=12 > V=10" in m["skipped_lengths"]["12"]
