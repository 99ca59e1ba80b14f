"""``python -m oxiwork``: the ``oxiwork`` command line (:mod:`oxiwork.cli`).

With no command it runs a graph through every stage and prints what each found (the
seed's quick start, ``--example transformer`` for the bundled transformer block, ``--json
FILE`` for a saved graph); ``lab``, ``plan``, ``simulate``, ``render``, ``report`` and
``export`` are the commands (``python -m oxiwork --help``).
"""

from __future__ import annotations

import sys

from oxiwork.cli import describe, main

report = describe  # the demo's name before the command line had commands

__all__ = ["main", "report"]

if __name__ == "__main__":
    sys.exit(main())
