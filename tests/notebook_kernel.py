"""Run a notebook top to bottom in a fresh kernel that imports this checkout.

One place for the tests that execute notebooks (the tour, the course lessons). Under
pytest-xdist two workers start kernels at once, and jupyter_client picks each kernel's TCP
ports by binding and releasing them before the kernel binds them again: another kernel
starting in between can take one ("zmq.error.ZMQError: Address already in use"; the kernel
dies before replying to kernel_info). A kernel that dies so has run no cell, so the
notebook is untouched and is run once more in a new kernel; any other failure, or a second
death, is raised.
"""

from __future__ import annotations

import os
from pathlib import Path

import nbclient
from nbformat import NotebookNode

ROOT = Path(__file__).resolve().parent.parent
_DIED_AT_START = "Kernel died before replying to kernel_info"


def execute(nb: NotebookNode, cwd: Path) -> None:
    """Execute ``nb`` in place (outputs filled) in a python3 kernel started in ``cwd``."""
    old = dict(os.environ)
    # The kernel inherits the environment: it must import this checkout.
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), old.get("PYTHONPATH")]))
    try:
        for attempt in (1, 2):
            client = nbclient.NotebookClient(
                nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(cwd)}}
            )
            try:
                client.execute()
                return
            except RuntimeError as e:
                if attempt == 2 or _DIED_AT_START not in str(e):
                    raise
    finally:
        os.environ.clear()
        os.environ.update(old)
