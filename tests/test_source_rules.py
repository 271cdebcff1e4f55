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


def test_the_held_out_seeding_formula_is_written_once():
    found = [name for name, text in sources() if "HELD_OUT_SEED_BASE +" in text]
    assert found == ["tasks/base.py"], found
