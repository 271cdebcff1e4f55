"""Facts the package code states once: a test over the source, so a second copy cannot creep back in."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("interp", "tasks", "models", "analyses")


def sources():
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            yield path.relative_to(ROOT).as_posix(), path.read_text()


def test_the_seed_range_is_defined_once():
    """tasks.base owns the seed policy (SEED_LIMIT, is_seed, held_out_batch); nothing else spells it."""
    spelled = re.compile(r"2\s*\*\*\s*32|1\s*<<\s*32|4294967296|4_294_967_29[56]")
    found = [name for name, text in sources() if spelled.search(text)]
    assert found == ["tasks/base.py"], found


def test_a_run_folders_files_are_spelled_only_by_run_folder():
    """interp.files.RunFolder answers every question about a run's files (its record, its checkpoints, its metrics
    log): no other module, benchmark or experiment names them, in code or words (tests may: they check the format
    on disk). The checkpoints folder counts where a path is made of it (``/ "checkpoints"``, ``== "checkpoints"``)."""
    spelled = re.compile(r"run\.json|metrics\.jsonl"
                         r"|/\s*f?[\"']checkpoints[\"']|==\s*[\"']checkpoints[\"']|[\"']checkpoints/")
    scripts = [(path.relative_to(ROOT).as_posix(), path.read_text()) for folder in ("benchmarks", "experiments")
               for path in sorted((ROOT / folder).glob("*.py"))]
    found = [f"{name}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)}" for name, text in [*sources(), *scripts]
             for m in spelled.finditer(text) if name != "interp/files.py"]
    assert found == [], "\n".join(found)
    assert all(spelled.search(code) for code in ('run / "checkpoints"', "p.name == 'checkpoints'", '"run.json"'))


def test_the_held_out_seeding_formula_is_written_once():
    found = [name for name, text in sources() if "HELD_OUT_SEED_BASE +" in text]
    assert found == ["tasks/base.py"], found


def test_hook_names_are_spelled_only_by_act_name():
    """analyses/ and interp/ name a block's hooks through models.base.act_name, never by hand (the
    docstrings may say them)."""
    import ast

    spelled = re.compile(r"^blocks\.(\d+|\{)|\.hook_[a-z_]+$|^hook_(resid|attn|mlp|mixer)")
    found = []
    for name, text in sources():
        if not name.startswith(("analyses/", "interp/")):
            continue
        tree = ast.parse(text)
        docs = {id(n.body[0].value) for n in ast.walk(tree) if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef))
                and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
        for node in ast.walk(tree):
            parts = ([node.value] if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs
                     else [v.value for v in node.values if isinstance(v, ast.Constant) and isinstance(v.value, str)]
                     if isinstance(node, ast.JoinedStr) else [])
            found += [f"{name}:{node.lineno}: {p!r}" for p in parts if spelled.search(p)]
    assert not found, "\n".join(found)


def test_interp_uses_only_public_names_of_analyses():
    """The explorer and the CLI build on the analyses' public views (analyses.activations,
    analyses.interventions, each analysis's public functions), never on a private name."""
    private = re.compile(r"from analyses(\.\w+)? import ([^\n]*\b_\w+)|analyses\._\w+|from analyses\._")
    found = [(name, m.group(0)) for name, text in sources() if name.startswith("interp/")
             for m in private.finditer(text)]
    assert found == [], found


def test_the_shared_layers_live_in_one_module_each():
    """One recipe (interp/recipe.py), one results store (interp/results.py), one activation layer
    (analyses/activations.py): what they define is defined nowhere else."""
    owners = {"def resolve(task": "interp/recipe.py", "class TrainSettings": "interp/recipe.py",
              "PRESETS = {": "interp/recipe.py", "def output_folder(": "interp/results.py",
              # a checkpoint's content hash is the checkpoint layer's (training records it for --init too)
              "def checkpoint_digest(": "interp/checkpoint.py", "SOURCE_MARK = ": "interp/results.py",
              "def training_budget(": "analyses/budget.py",
              "def ablation_hook(": "analyses/activations.py", "def part_hooks(": "analyses/activations.py",
              "def mean_z(": "analyses/activations.py", "def read_result(": "analyses/base.py"}
    for needle, owner in owners.items():
        found = [name for name, text in sources() if needle in text]
        assert found == [owner], (needle, found)
    assert not [name for name, text in sources() if name.startswith("analyses/") and re.search(
        r"open\([^)]*sweep\.json|json\.loads\([^)]*sweep", text)]  # sweeps are read through read_result


def import_graph() -> dict[str, set[str]]:
    """Which of the repo's modules each module imports, at its top or inside a function (a lazy import closes a
    circle as surely as an eager one: it only moves the failure to the first call)."""
    import ast

    names = {}
    for name, _ in sources():
        parts = name.removesuffix(".py").split("/")
        names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = name

    def known(module: str) -> str | None:  # the module itself, or the package that holds the name
        while module and module not in names:
            module = module.rpartition(".")[0]
        return module or None

    graph = {}
    for module, path in names.items():
        package = module if path.endswith("__init__.py") else module.rpartition(".")[0]
        found = set()
        for node in ast.walk(ast.parse((ROOT / path).read_text())):
            if isinstance(node, ast.Import):
                found |= {known(a.name) for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(package.split(".")[:len(package.split(".")) - node.level + 1] + ([base] if base else []))
                found |= {f"{base}.{a.name}" if f"{base}.{a.name}" in names else known(base) for a in node.names}
        # A package's __init__ is its registry, gathered from its own modules; a module that looks the registry
        # up at call time (``from . import make``) is how a registry works, not a circle between two modules.
        graph[module] = {m for m in found if m and m != module and not (m == package and module.startswith(m + "."))}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (each holds at least one import circle)."""
    order, low, stack, on, found = {}, {}, [], set(), []

    def visit(v):
        order[v] = low[v] = len(order)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in order:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], order[w])
        if low[v] == order[v]:
            group = []
            while not group or group[-1] != v:
                group.append(stack.pop())
                on.discard(group[-1])
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in order:
            visit(v)
    return found


def test_no_two_modules_import_each_other():
    """No import circle among the repo's modules, lazy imports included: models/gguf_model.py and
    models/language_model.py once imported each other; what they share is models/hf_bridge.py now."""
    graph = import_graph()
    assert "models.hf_bridge" in graph["models.gguf_model"] and "models.gguf_model" in graph["models.language_model"]
    assert circles(graph) == []
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]  # the check finds one


def test_the_explorers_shared_pieces_are_written_once():
    """interp/explore/common.py holds what every explorer view uses (a panel, a graph's box, the figure of an empty
    panel, a click's rule); the views, one file each, define none of them again."""
    for needle in ("def message_figure(", "def panel(title", "def graph(", "def sized_graph(", "def radios(", "def plain(",
                   "REFUSED = ("):
        found = [name for name, text in sources() if needle in text]
        assert found == ["interp/explore/common.py"], (needle, found)
    sizes = {name: text.count("\n") for name, text in sources() if name.startswith("interp/explore")}
    assert max(sizes.values()) < 450, sizes  # one view a file: none grows back into the 900-line explorer
