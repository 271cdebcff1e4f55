"""The ground floor: what every package of the toolkit may import (tasks, models, analyses, interp).

Data flows one way, tasks -> models -> analyses -> interp, so what all of them share cannot live in any of
them: ``models`` may not import ``interp``, and ``tasks`` and ``models`` import torch when they are imported,
which the CLI's fast paths (``interp list``, ``--help``) never pay for. These modules import nothing but the
standard library:

- ``ground.locks``: the one file lock (a kernel build, a run folder, a search's study, a sweep's claims,
  caches) and ``alive``, whether a process of this machine still runs;
- ``ground.terminal``: ``say``, one ``interp: ...`` line on the terminal's error stream.
"""
