"""Run the ``interp`` console entry point in-process and capture what a user would see."""
import sys
from dataclasses import dataclass

from interp.cli import entry


@dataclass
class Outcome:
    code: int
    out: str
    err: str


def run_cli(capsys, *args) -> Outcome:
    argv = sys.argv
    sys.argv = ["interp", *map(str, args)]
    try:
        entry()
        code = 0
    except SystemExit as done:
        code = done.code if isinstance(done.code, int) else 1
    finally:
        sys.argv = argv
    captured = capsys.readouterr()
    return Outcome(code, captured.out, captured.err)
