"""An imported model's simulated outputs against PyTorch eager: per output, max |Δ| and allclose.

The workbench of an :class:`~oxiwork.importers.torch.ImportedModel` simulates with the
model's own input and weight values and compares the outputs with what the module computed
eagerly (:attr:`~oxiwork.importers.torch.ImportedModel.eager_outputs`, or the arrays the
user passes as ``Workbench(model, expected=...)``). The comparison is ``numpy.allclose``
per output, ``|got - eager| <= atol + rtol * |eager|`` elementwise (NaN equal to NaN), with
the tolerance of the output's dtype in :data:`TOLERANCES` (those of
``torch.testing.assert_close``) unless one is given. A shape that differs, or a NaN/Inf
where eager has a number, is a mismatch whose difference has no size.

Example
-------
>>> got = (np.array([1.0, 2.0], np.float32),)
>>> [m] = compare(("y",), got, (np.array([1.0, 2.5], np.float32),))
>>> m.allclose, m.max_abs_diff, (m.rtol, m.atol)
(False, 0.5, (1.3e-06, 1e-05))
>>> compare(("y",), got, got)[0].allclose
True
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import numpy as np

from oxiwork.error import InvalidArgument

__all__ = ["TOLERANCES", "OutputMatch", "check_expected", "compare", "eager_section", "tolerance"]

#: (rtol, atol) per dtype: ``torch.testing.assert_close``'s defaults. Both sides compute in
#: float32 and round once per op, so they differ only where a sum's rounding order differs.
#: Integer and bool outputs must be equal (``tolerance`` gives them (0, 0)).
TOLERANCES: Mapping[str, tuple[float, float]] = MappingProxyType(
    {
        "float16": (1e-3, 1e-5),
        "bfloat16": (1.6e-2, 1e-5),
        "float32": (1.3e-6, 1e-5),
        "float64": (1e-7, 1e-7),
    }
)


def tolerance(dtype: str) -> tuple[float, float]:
    """``(rtol, atol)`` for outputs of ``dtype`` (:data:`TOLERANCES`; exact otherwise).

    >>> tolerance("float16"), tolerance("int64")
    ((0.001, 1e-05), (0.0, 0.0))
    """
    return TOLERANCES.get(dtype, (0.0, 0.0))


@dataclass(frozen=True, slots=True)
class OutputMatch:
    """One output against eager.

    ``max_abs_diff`` is ``None`` when the difference has no size: the shapes differ
    (``reason`` says so), or one side has NaN/Inf where the other has another value.
    """

    name: str
    shape: tuple[int, ...]
    dtype: str
    max_abs_diff: float | None
    rtol: float
    atol: float
    allclose: bool
    reason: str = ""

    def to_view(self) -> dict[str, Any]:
        """As the simulator panel gets it (plain JSON types)."""
        return {
            "name": self.name, "shape": list(self.shape), "dtype": self.dtype,
            "max_abs_diff": self.max_abs_diff, "rtol": self.rtol, "atol": self.atol,
            "allclose": self.allclose, "reason": self.reason,
        }  # fmt: skip


def _as_array(value: Any) -> np.ndarray:
    """A numpy array of ``value`` (a torch tensor too: bfloat16 widened, as numpy has none)."""
    if hasattr(value, "detach"):
        value = value.detach().cpu()
        if str(value.dtype) == "torch.bfloat16":
            value = value.float()
    return np.asarray(value)


def check_expected(expected: Any, names: Sequence[str]) -> tuple[np.ndarray, ...]:
    """``expected`` (a sequence in torch's output order, or a mapping by output buffer
    name) as one array per output of ``names``.

    Raises
    ------
    InvalidArgument
        Not one value per output, or a mapping missing an output.

    >>> [a.tolist() for a in check_expected({"y": [1.0]}, ("y",))]
    [[1.0]]
    """
    if isinstance(expected, Mapping):
        missing = [n for n in names if n not in expected]
        if missing:
            raise InvalidArgument(
                f"expected= has no value for output {missing[0]!r}; give one per output of "
                f"model.outputs ({', '.join(map(repr, names))}), or a sequence in torch's order"
            )
        return tuple(_as_array(expected[n]) for n in names)
    if hasattr(expected, "shape"):  # one array or tensor: a model with one output
        expected = (expected,)
    if isinstance(expected, (str, bytes)) or not isinstance(expected, Sequence):
        raise InvalidArgument(
            f"expected= must be the model's outputs (a tuple of arrays in torch's order, or "
            f"a dict by output name), got {type(expected).__name__}"
        )
    if len(expected) != len(names):
        raise InvalidArgument(
            f"expected= has {len(expected)} value(s) but the model has {len(names)} output(s) "
            f"({', '.join(map(repr, names))}); give them in torch's order"
        )
    return tuple(_as_array(v) for v in expected)


def compare(
    names: Sequence[str],
    got: Sequence[np.ndarray],
    expected: Sequence[np.ndarray],
    tol: tuple[float, float] | None = None,
) -> tuple[OutputMatch, ...]:
    """Each output of ``got`` against ``expected`` (``tol``: one ``(rtol, atol)`` for all;
    default: :func:`tolerance` of the expected output's dtype).

    >>> [m] = compare(("y",), (np.ones(2),), (np.ones(3),))
    >>> m.allclose, m.max_abs_diff, m.reason
    (False, None, 'shape (2,), eager (3,)')
    """
    out = []
    for name, g, e in zip(names, got, expected, strict=True):
        g, e = np.asarray(g), np.asarray(e)
        rtol, atol = tol if tol is not None else tolerance(e.dtype.name)
        if g.shape != e.shape:
            out.append(
                OutputMatch(name, g.shape, g.dtype.name, None, rtol, atol, False,
                            f"shape {g.shape}, eager {e.shape}")
            )  # fmt: skip
            continue
        g64, e64 = g.astype(np.float64), e.astype(np.float64)
        same = (g64 == e64) | (np.isnan(g64) & np.isnan(e64))
        with np.errstate(all="ignore"):
            delta = np.where(same, 0.0, np.abs(g64 - e64))
        biggest = float(delta.max()) if delta.size else 0.0
        ok = bool(np.allclose(g64, e64, rtol=rtol, atol=atol, equal_nan=True))
        size = biggest if np.isfinite(biggest) else None
        reason = "" if size is not None else "NaN or Inf where the other side has a number"
        out.append(OutputMatch(name, g.shape, g.dtype.name, size, rtol, atol, ok, reason))
    return tuple(out)


def eager_section(matches: Sequence[OutputMatch], source: str) -> dict[str, Any]:
    """The simulator panel's eager check: a verdict, a line of text and one row per output.

    >>> v = eager_section(compare(("y",), (np.ones(2),), (np.ones(2),)), "simulation")
    >>> v["match"], v["text"]
    (True, 'matches PyTorch eager: 1 output allclose (simulation)')
    """
    bad = [m for m in matches if not m.allclose]
    n = len(matches)
    if bad:
        parts = [
            f"{m.name} (max |Δ| {m.max_abs_diff:.3g} > {m.atol:.2g} + {m.rtol:.2g}·|eager|)"
            if m.max_abs_diff is not None
            else f"{m.name} ({m.reason})"
            for m in bad[:4]
        ]
        more = f" and {len(bad) - 4} more" if len(bad) > 4 else ""
        text = (
            f"differs from PyTorch eager: {len(bad)} of {n} output{'s' if n != 1 else ''} "
            f"not allclose: {', '.join(parts)}{more} ({source})"
        )
    else:
        text = f"matches PyTorch eager: {n} output{'s' if n != 1 else ''} allclose ({source})"
    return {
        "match": not bad,
        "text": text,
        "source": source,
        "outputs": [m.to_view() for m in matches],
    }
