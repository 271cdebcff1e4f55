"""The plugin registries: one place per fact. Tasks, architectures and analyses declare themselves;
every table elsewhere is derived from those declarations, and the contracts that once broke hold."""
import ast
import json
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import pytest
import torch

import analyses
import models
import tasks
from interp import checkpoint
from interp.explore import Explorer
from interp.recipe import TrainSettings, preset_recipe, recorded_settings
from tests.cli import run_cli
from tests.tiny import small_config, small_task

ROOT = Path(__file__).resolve().parent.parent


def test_the_derived_presets_are_the_recipes_of_the_tables_they_replaced():
    """tests/data/preset_recipes.json was written from the name-keyed tables (train.TASK_PRESETS, each model
    file's TASK_PRESETS) before they were replaced: the shipped models' recipes must not move. Regenerate
    it only with a deliberate preset change."""
    recorded = json.loads((ROOT / "tests" / "data" / "preset_recipes.json").read_text())
    for key, recipe in recorded.items():
        task, arch, preset = key.split("/")
        recipe = recipe | dict(train=recorded_settings(recipe["train"]))  # settings added since: their defaults
        assert json.loads(json.dumps(preset_recipe(preset, task, arch))) == recipe, key


def test_task_presets_name_settings_that_exist():
    model_settings = {f.name for cls in models.REGISTRY.values() for f in fields(cls.config_class)}
    train_settings = {f.name for f in fields(TrainSettings)}
    for name, cls in tasks.REGISTRY.items():
        for preset, own in cls.presets.items():
            for layer in (own, *own.by_arch.values()):
                assert set(layer.model) <= model_settings, (name, preset, layer.model)
                assert set(layer.train) <= train_settings, (name, preset, layer.train)
            assert set(own.by_arch) <= set(models.ARCHS), (name, preset)


def test_paper_rows_and_declarations_refer_to_what_exists():
    for name, cls in tasks.REGISTRY.items():
        task = tasks.make(name)
        for row in cls.paper_rows:
            assert row.analysis in analyses.NAMES and (row.arch is None or row.arch in models.ARCHS), row
            assert set(row.options) <= set(analyses.options(row.analysis)), row
        if cls.frame is not None:
            assert cls.frame in task.hypothesis_tokens(), name
        if cls.query_latent is not None:
            batch = task.sample(4)
            latent = batch.hypothesis[cls.query_latent]
            assert latent.shape == (4, int(batch.query_mask[0].sum())) and latent.max() < task.n_latent_classes()
        if cls.eliminates is False and not cls.continuous:  # a task that says it never rules a class out
            assert (task.sample(64).posterior > 0).all(), name


@pytest.mark.parametrize("name", [n for n in tasks.NAMES if tasks.REGISTRY[n].frame is not None])
def test_every_frame_analysis_uses_the_one_declared_frame(name):
    """key-orthogonality and frame-precision once took the first group, qk-alignment the answer group."""
    arch = models.REFERENCE
    task = small_task(name)
    model = models.build(arch, task, small_config(arch), seed=0).eval()
    assert analyses.run("key-orthogonality", model).metrics["shown"]["group"] == task.frame
    if task.eliminates:
        from analyses.qk_alignment import hypothesis_group

        assert hypothesis_group(task)[0] == task.frame


def test_analyses_declare_typed_options_that_match_their_entry_points():
    import inspect

    for name, analysis in analyses.REGISTRY.items():
        assert analysis.run is not None or analysis.on_language_model is not None, name
        if analysis.run is not None:
            params = inspect.signature(analysis.run).parameters
            assert {k: p.default for k, p in params.items() if k != "model"} == analysis.defaults(), name
        if analysis.on_language_model is not None:  # every option taken, none defaulted (the schema holds them)
            params = list(inspect.signature(analysis.on_language_model).parameters.values())[1:]
            assert [p.name for p in params] == list(analysis.defaults(language=True)), name
            assert all(p.default is inspect.Parameter.empty for p in params), name
            assert analysis.language_definition, name
        assert analysis.definition and analysis.summary, name


def test_interp_run_help_comes_from_the_schema(capsys):
    shown = run_cli(capsys, "run", "value-manifold", "--help")
    assert shown.code == 0
    assert "--max-points" in shown.out and "points drawn in each scatter panel, at least 1 (default 600)" in shown.out
    assert "Definition:" in shown.out
    listing = run_cli(capsys, "run", "--help")
    assert listing.code == 0 and all(name in listing.out for name in analyses.NAMES)
    bad = run_cli(capsys, "run", "value-manifold", "--ckpt", str(ROOT / "tests"), "--max-points", "0")
    assert bad.code == 1 and "--max-points must be at least 1, got 0" in bad.err


@pytest.mark.slow  # a fresh Python process under -OO importing everything
def test_import_works_without_docstrings():
    """-OO strips docstrings; analyses once parsed their definitions out of __doc__."""
    script = ("import analyses, tasks, models, interp, interp.cli, interp.reproduce, interp.explore\n"
              "task = tasks.make(tasks.NAMES[0])\n"
              "model = models.build(models.ARCHS[0], task, preset='cpu').eval()\n"
              "result = analyses.run(analyses.NAMES[0], model, n=8)\n"
              "print(len(result.definition))")
    done = subprocess.run([sys.executable, "-OO", "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) > 100


def imports_of(path: Path, package: str) -> set[str]:
    """Every module of ``package`` that ``path`` imports, anywhere in the file."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:  # relative: within the package
                base = package if node.module is None else f"{package}.{node.module}"
                found.update({base} if node.module else {f"{package}.{a.name}" for a in node.names})
            elif node.module:
                found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return found


def test_interp_has_no_import_cycles_and_analyses_never_import_interp():
    graph = {f"interp.{p.stem}": {m for m in imports_of(p, "interp") if m.startswith("interp.")}
             for p in (ROOT / "interp").glob("*.py") if p.stem != "__init__"}

    def visit(node, stack):
        assert node not in stack, " -> ".join(stack + [node])
        for nxt in graph.get(node, ()):
            visit(nxt, stack + [node])

    for node in graph:
        visit(node, [])
    for path in [*(ROOT / "analyses").glob("*.py"), *(ROOT / "models").glob("*.py"), *(ROOT / "tasks").glob("*.py")]:
        assert not any(m == "interp" or m.startswith("interp.") for m in imports_of(path, path.parent.name)), path


def string_constants(path: Path) -> set[str]:
    """String literals of a module, docstrings left out."""
    tree = ast.parse(path.read_text())
    docs = {id(n.body[0].value) for n in ast.walk(tree) if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef))
            and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    return {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
            and id(n) not in docs}


def test_no_task_or_architecture_name_is_spelled_in_analyses_or_interp():
    names = set(tasks.NAMES) | set(models.ARCHS)
    for path in [*(ROOT / "analyses").glob("*.py"), *(ROOT / "interp").rglob("*.py")]:  # interp/explore/ too
        assert not names & string_constants(path), (path, names & string_constants(path))


@pytest.mark.parametrize("arch", models.ARCHS)
def test_the_explorer_takes_typed_sequences_on_every_architecture(arch, tmp_path):
    """On a model without a position table (n_ctx None) every typed sequence once failed with an HTTP 500."""
    name = next(n for n in tasks.NAMES if not tasks.REGISTRY[n].continuous)
    task = small_task(name)
    model = models.build(arch, task, small_config(arch), seed=0).eval()
    checkpoint.save(tmp_path / "checkpoints" / checkpoint.checkpoint_name(0), model, step=0, seed=0)
    explorer = Explorer(tmp_path, n_calibration=8, n_geometry=8)
    tokens = task.sample(1, generator=torch.Generator().manual_seed(0)).tokens[0]
    text = " ".join(task.token_names(tokens))
    assert explorer.typed(text) == tokens.tolist()


def test_a_preset_may_train_on_its_own_task_settings():
    """recall's cpu preset trains on tables of 1..64 pairs; the user's -T settings still win, and a
    preset without task settings trains on the task's defaults."""
    assert tasks.for_preset("recall", "cpu").N_min == 1
    assert tasks.for_preset("recall", "cpu", N_min=32).N_min == 32
    assert tasks.for_preset("recall", "paper").config() == tasks.make("recall").config()
    assert preset_recipe("cpu", "recall", "mamba")["task"]["N_min"] == 1
