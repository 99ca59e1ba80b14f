"""The tour notebook runs top to bottom and still says what its text claims.

``notebooks/tour.ipynb`` narrates one graph through every stage; its prose states facts
(all five kernels fuse into one, a dropped event gives wrong numbers, the CUDA graph needs
a GPU or says what is missing). Executing it in a fresh kernel and checking those facts in
its outputs keeps the notebook true to the code. ``workbench.ipynb`` is run by the browser
test instead (its widgets need a frontend).
"""

from __future__ import annotations

import os
from pathlib import Path

import nbformat
import pytest

from tests.notebook_kernel import execute

ROOT = Path(__file__).resolve().parent.parent
TOUR = ROOT / "notebooks" / "tour.ipynb"


def cell_text(cell: dict) -> str:
    """What a code cell printed: its stream and text/plain outputs, joined."""
    parts = []
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream":
            parts.append(out["text"])
        elif "data" in out:
            parts.append(out["data"].get("text/plain", ""))
    return "".join(parts)


@pytest.fixture(scope="module")
def tour(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    nb = nbformat.read(TOUR, as_version=4)
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), (
        "commit the tour without outputs (they are computed here)"
    )
    execute(nb, tmp_path_factory.mktemp("tour"))
    return [cell_text(c) for c in nb.cells if c.cell_type == "code"]


def test_tour_runs_and_keeps_its_promises(tour: list[str]) -> None:
    out = "\n".join(tour)
    # Section 3: the whole diamond fuses, and fused == unfused.
    assert "kernels 5 -> 1; buffers removed: s, g, gx, th" in out
    assert "max |fused - unfused|" in out and 'extern "C" __global__ void' in out
    assert "'transpose' is injective, which never fuses" in out  # fusion says why it stops
    # Section 4: fusion off, the branches run on two streams with events between them.
    assert "ExecutionPlan: 11 steps on 2 streams, 2 events" in out
    # Section 5: the simulator matches the reference; without event 0 it races and is wrong.
    assert "outputs equal the reference: True" in out
    assert "reads 'x' while step 0 'upload' on stream 0 writes it" in out
    assert "outputs still equal the reference: False" in out
    # Section 6: the CUDA graph either ran and matched, or said why it could not.
    assert "CUDA graph output equals the simulator's: True" in out or "no GPU here:" in out
    # Section 7: more streams never lengthen the modelled makespan here; they raise the
    # schedule-aware bound above one-order liveness, and the planner meets it.
    rows = [line.split() for line in out.splitlines()]
    table = [r for r in rows if len(r) == 8 and all(x.replace(".", "").isdigit() for x in r)]
    assert [int(r[0]) for r in table] == [1, 2, 4, 8], table
    makespan, arena, bound, live, ratio = ([float(r[i]) for r in table] for i in range(3, 8))
    assert makespan == sorted(makespan, reverse=True)
    assert all(a >= b >= v for a, b, v in zip(arena, bound, live, strict=True))
    assert bound[0] == live[0] and bound[2] > live[2]  # one stream: the bounds agree
    assert ratio == [1.0] * 4


@pytest.mark.parametrize(
    ("errors", "runs", "raises"),
    [
        (["Kernel died before replying to kernel_info"], 2, None),  # the port race: once more
        (["Kernel died before replying to kernel_info"] * 2, 2, "Kernel died"),  # not twice
        (["a cell failed"], 1, "a cell failed"),  # any other failure: at once
        ([], 1, None),
    ],
)
def test_a_kernel_that_dies_at_start_is_started_once_more(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, errors: list[str], runs: int, raises: str
) -> None:
    import tests.notebook_kernel as nk

    started = []

    class Client:
        def __init__(self, nb: object, **kw: object) -> None:
            started.append(os.environ["PYTHONPATH"].split(os.pathsep)[0])

        def execute(self) -> None:
            if len(started) <= len(errors):
                raise RuntimeError(errors[len(started) - 1])

    monkeypatch.setattr(nk.nbclient, "NotebookClient", Client)
    before = dict(os.environ)
    if raises:
        with pytest.raises(RuntimeError, match=raises):
            nk.execute(nbformat.v4.new_notebook(), tmp_path)
    else:
        nk.execute(nbformat.v4.new_notebook(), tmp_path)
    assert started == [str(ROOT)] * runs  # each kernel sees this checkout first
    assert dict(os.environ) == before  # the environment is restored
