"""One validation rule per kind of value: names, ids, sizes, alignments, costs, dimensions.

Every entry point that takes a value from a user, a file or the widget's frontend (the
builder, the JSON loader, ``ComputeGraph.with_changes``, the widget's messages and edits)
checks it with the rule here, so a value one of them refuses is refused by all of them, with
the same message. A rule returns the value (unchanged: nothing is coerced, so ``"4"``,
``1.5`` and ``True`` are not an ``int``) or raises :class:`~oxiwork.error.InvalidArgument`
whose message starts with ``what`` (the caller's description of the value) and says what is
allowed.

The bounds are what every consumer of a graph can hold:

- ids fit the frontend's ``Int32Array`` columns with room for the nodes the passes create
  (``MAX_ID = 2**30 - 1``: fusion and the stream pass number new nodes after the largest id);
- sizes are at most :data:`MAX_SIZE_BYTES` (1 TiB, more than any GPU's memory), so their sums
  stay exact in a float64 and in JavaScript numbers;
- names are valid Unicode (they must encode to UTF-8, which is how Jupyter sends them: a lone
  surrogate such as ``"\\ud800"`` cannot be sent) without control characters.

Example
-------
>>> name("relu", "kernel name")
'relu'
>>> try:
...     name("\\ud800", "buffer name")
... except InvalidArgument as e:
...     print(e)
buffer name '\\ud800' is not valid Unicode (a lone surrogate cannot be encoded to UTF-8); use proper characters
>>> try:
...     size(8 * 2**40, "size of buffer 'x'")
... except InvalidArgument as e:
...     print(e)
size of buffer 'x' is 8796093022208 bytes; at most 1099511627776 (1 TiB) is allowed
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from oxiwork.error import InvalidArgument

__all__ = [
    "MAX_ALIGNMENT",
    "MAX_BLOCK_DIM",
    "MAX_BLOCK_THREADS",
    "MAX_BODIES",
    "MAX_BODY_DEPTH",
    "MAX_COST_SECONDS",
    "MAX_GRID_X",
    "MAX_GRID_YZ",
    "MAX_ID",
    "MAX_ITERATIONS",
    "MAX_NAME_LENGTH",
    "MAX_PARAMS",
    "MAX_PARAM_INT",
    "MAX_RANK",
    "MAX_SHARED_MEM_BYTES",
    "MAX_SIZE_BYTES",
    "MAX_STREAM",
    "alignment",
    "byte",
    "cost",
    "dims",
    "flag",
    "ident",
    "iterations",
    "name",
    "offset",
    "param_name",
    "params",
    "shape",
    "shared_mem",
    "shown",
    "size",
    "stream",
    "text",
    "view",
]

#: Longest name (of a node, buffer, parameter value...) in characters.
MAX_NAME_LENGTH = 256
#: Largest node, buffer or event id (ids must fit an ``Int32Array`` after passes add nodes).
MAX_ID = 2**30 - 1
#: Largest buffer, copy or memset size in bytes (1 TiB).
MAX_SIZE_BYTES = 2**40
#: Largest buffer alignment in bytes (2 MiB, a huge page; CUDA needs at most 256).
MAX_ALIGNMENT = 2**21
#: Largest offset of a placed buffer in the arena.
MAX_OFFSET = 2**50
#: Largest cost override in seconds (about 11.6 days).
MAX_COST_SECONDS = 1e6
#: Largest stream a node may be pinned to (plans use at most 32 streams).
MAX_STREAM = 1023
#: Most dimensions of a buffer's shape.
MAX_RANK = 8
#: Most op parameters on one node, and largest magnitude of an integer parameter (exact
#: in a float64 and a JavaScript number).
MAX_PARAMS = 64
MAX_PARAM_INT = 2**53
MAX_PARAM_NAME = 64
#: Deepest nesting of body graphs (child graphs and conditionals inside bodies).
MAX_BODY_DEPTH = 8
#: Most bodies of one node (a SWITCH's cases).
MAX_BODIES = 256
#: Largest iteration bound of a WHILE node.
MAX_ITERATIONS = 1_000_000

# CUDA limits (compute capability 7.0 and newer; Hopper allows 227 KiB of dynamic smem).
MAX_BLOCK_THREADS = 1024
MAX_BLOCK_DIM = (1024, 1024, 64)
MAX_GRID_X = 2**31 - 1
MAX_GRID_YZ = 65535
MAX_SHARED_MEM_BYTES = 227 * 1024

# Control characters (C0, DEL, C1) and the Unicode line/paragraph separators: they break
# the one-line messages, tables and labels that show names.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def shown(value: Any) -> str:
    """``repr(value)`` cut to 60 characters (a hostile value may be huge)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 128:
        return f"an integer of {value.bit_length()} bits"  # repr of 10**5000 raises
    r = repr(value)
    return r if len(r) <= 60 else r[:57] + "..."


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _int(value: Any, what: str) -> int:
    if not _is_int(value):
        raise InvalidArgument(f"{what} must be an int, got {shown(value)}")
    return int(value)


def text(value: Any, what: str, *, max_length: int = MAX_NAME_LENGTH) -> str:
    """A string that may be empty: valid Unicode, no control characters, bounded length.

    >>> text("", "label")
    ''
    """
    if not isinstance(value, str):
        raise InvalidArgument(f"{what} must be a str, got {type(value).__name__}")
    if len(value) > max_length:
        raise InvalidArgument(f"{what} is {len(value)} characters; keep it to at most {max_length}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgument(
            f"{what} {shown(value)} is not valid Unicode (a lone surrogate cannot be "
            "encoded to UTF-8); use proper characters"
        ) from None
    if _CONTROL.search(value):
        raise InvalidArgument(f"{what} {shown(value)} contains control characters; remove them")
    return value


def name(value: Any, what: str) -> str:
    """A name: a non-blank :func:`text` of at most :data:`MAX_NAME_LENGTH` characters.

    >>> try:
    ...     name("a\\nb", "kernel name")
    ... except InvalidArgument as e:
    ...     print(e)
    kernel name 'a\\nb' contains control characters; remove them
    """
    # The common case, cheaply: printable text has no control characters or surrogates.
    fits = type(value) is str and 0 < len(value) <= MAX_NAME_LENGTH
    if fits and value.isprintable() and value.strip():
        return value
    text(value, what)
    if not value.strip():
        raise InvalidArgument(f"{what} must not be empty")
    return value


def ident(value: Any, what: str) -> int:
    """A node, buffer or event id: an int in ``0..MAX_ID``.

    >>> try:
    ...     ident(2**31, "node id")
    ... except InvalidArgument as e:
    ...     print(e)
    node id is 2147483648; ids must be from 0 to 1073741823
    """
    if _is_int(value) and 0 <= value <= MAX_ID:
        return value
    v = _int(value, what)
    raise InvalidArgument(f"{what} is {shown(v)}; ids must be from 0 to {MAX_ID}")


def _bounded(value: Any, what: str, lo: int, hi: int, unit: str = "", note: str = "") -> int:
    if type(value) is int and lo <= value <= hi:
        return value
    v = _int(value, what)
    if v < lo:
        raise InvalidArgument(f"{what} must be >= {lo}, got {shown(v)}")
    if v > hi:
        raise InvalidArgument(f"{what} is {shown(v)}{unit}; at most {hi}{note} is allowed")
    return v


def size(value: Any, what: str) -> int:
    """A size in bytes: an int in ``1..MAX_SIZE_BYTES``.

    >>> size(4096, "size of buffer 'x'")
    4096
    """
    if type(value) is int and 0 < value <= MAX_SIZE_BYTES:
        return value
    v = _int(value, what)
    if v <= 0:
        raise InvalidArgument(f"{what} must be > 0, got {shown(v)}")
    return _bounded(v, what, 1, MAX_SIZE_BYTES, " bytes", " (1 TiB)")


def alignment(value: Any, what: str) -> int:
    """An alignment in bytes: a power of two in ``1..MAX_ALIGNMENT``.

    >>> try:
    ...     alignment(48, "alignment of 'x'")
    ... except InvalidArgument as e:
    ...     print(e)
    alignment of 'x' is 48, which is not a power of two
    """
    v = _int(value, what)
    if v <= 0:
        raise InvalidArgument(f"{what} must be > 0, got {shown(v)}")
    if v & (v - 1):
        raise InvalidArgument(f"{what} is {shown(v)}, which is not a power of two")
    return _bounded(v, what, 1, MAX_ALIGNMENT, " bytes", " (2 MiB)")


def offset(value: Any, what: str) -> int:
    """An arena offset in bytes: an int in ``0..MAX_OFFSET``."""
    return _bounded(value, what, 0, MAX_OFFSET, " bytes")


def cost(value: Any, what: str) -> float:
    """A cost override in seconds: a finite number in ``0..MAX_COST_SECONDS``, as a float.

    >>> cost(1, "cost of 'k'")
    1.0
    >>> try:
    ...     cost(float("inf"), "cost of 'k'")
    ... except InvalidArgument as e:
    ...     print(e)
    cost of 'k' must be finite and >= 0, got inf
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidArgument(f"{what} must be a number, got {shown(value)}")
    # Compared before float(): float(10**400) raises OverflowError.
    if (isinstance(value, float) and not math.isfinite(value)) or value < 0:
        raise InvalidArgument(f"{what} must be finite and >= 0, got {shown(value)}")
    if value > MAX_COST_SECONDS:
        raise InvalidArgument(
            f"{what} is {shown(value)} s; at most {MAX_COST_SECONDS:g} s is allowed"
        )
    return float(value)


def stream(value: Any, what: str) -> int:
    """A stream pin: an int in ``0..MAX_STREAM``."""
    return _bounded(value, what, 0, MAX_STREAM)


def iterations(value: Any, what: str) -> int:
    """A WHILE node's iteration bound: an int in ``1..MAX_ITERATIONS``.

    >>> iterations(10, "max_iterations of 'loop'")
    10
    """
    return _bounded(value, what, 1, MAX_ITERATIONS, " iterations")


def byte(value: Any, what: str) -> int:
    """A byte value 0..255 (a memset's fill value)."""
    if _is_int(value) and 0 <= value <= 255:
        return value
    raise InvalidArgument(f"{what} must be a byte 0..255, got {shown(value)}")


def flag(value: Any, what: str) -> bool:
    """A bool (not ``0``/``1``)."""
    if not isinstance(value, bool):
        raise InvalidArgument(f"{what} must be true or false, got {shown(value)}")
    return value


def shared_mem(value: Any, what: str) -> int:
    """Dynamic shared memory of a launch: an int in ``0..MAX_SHARED_MEM_BYTES``."""
    v = _int(value, what)
    if v < 0:
        raise InvalidArgument(f"{what} must be an int >= 0, got {shown(v)}")
    if v > MAX_SHARED_MEM_BYTES:
        raise InvalidArgument(
            f"{what} is {shown(v)}; at most {MAX_SHARED_MEM_BYTES} (227 KiB) per block is available"
        )
    return v


def dims(value: Any, what: str) -> tuple[int, int, int]:
    """A grid or block: an int or 1 to 3 ints (no bools, floats or strings), padded with 1s.

    Only the types are checked here; :class:`~oxiwork.node.KernelConfig` checks the CUDA
    limits of each axis (they differ between grid and block).

    >>> dims((4, 2), "grid")
    (4, 2, 1)
    >>> try:
    ...     dims(("4",), "grid")
    ... except InvalidArgument as e:
    ...     print(e)
    grid must be an int or a tuple of up to 3 ints, got ('4',)
    """
    if type(value) is tuple and len(value) == 3 and all(type(v) is int for v in value):
        return value  # type: ignore[return-value]  # the common, already-normalised case
    if _is_int(value):
        return (int(value), 1, 1)
    if not isinstance(value, (tuple, list)) or not all(_is_int(v) for v in value):
        raise InvalidArgument(
            f"{what} must be an int or a tuple of up to 3 ints, got {shown(value)}"
        )
    if not 1 <= len(value) <= 3:
        raise InvalidArgument(f"{what} must have 1 to 3 dimensions, got {len(value)}")
    out = tuple(int(v) for v in value)
    return (*out, *(1,) * (3 - len(out)))  # type: ignore[return-value]


def shape(value: Any, what: str) -> tuple[int, ...]:
    """A buffer shape: 1 to :data:`MAX_RANK` positive ints, each at most ``MAX_SIZE_BYTES``."""
    if isinstance(value, (str, bytes)) or not isinstance(value, (tuple, list)):
        raise InvalidArgument(f"{what} must be a list of ints, got {shown(value)}")
    if not 1 <= len(value) <= MAX_RANK:
        raise InvalidArgument(f"{what} must have 1 to {MAX_RANK} dimensions, got {len(value)}")
    return tuple(size(s, what) for s in value)


def param_name(value: Any, what: str) -> str:
    """An op parameter's name: an ASCII identifier of at most 64 characters."""
    if (
        not isinstance(value, str)
        or not value.isascii()
        or not value.isidentifier()
        or len(value) > MAX_PARAM_NAME
    ):
        raise InvalidArgument(
            f"{what} {shown(value)} must be an identifier (ASCII letters, digits, _) of at "
            f"most {MAX_PARAM_NAME} characters"
        )
    return value


def param_value(value: Any, what: str) -> Any:
    """An op parameter's value: a finite float, an int within ``±MAX_PARAM_INT``, a bool or
    a :func:`text`; returned unchanged (an int stays an int)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        if -MAX_PARAM_INT <= value <= MAX_PARAM_INT:
            return value
        raise InvalidArgument(f"{what} is {shown(value)}; integers up to ±2**53 are allowed")
    if isinstance(value, float):
        # NaN/inf would be written as non-standard JSON and NaN never compares equal, so a
        # graph holding one would not survive a to_json/from_json round trip.
        if not math.isfinite(value):
            raise InvalidArgument(f"{what} must be finite, got {value}")
        return value
    if isinstance(value, str):
        return text(value, what)
    raise InvalidArgument(f"{what} must be a number, str or bool, got {shown(value)}")


def params(value: Any, owner: str) -> tuple[tuple[str, Any], ...]:
    """Op parameters (a mapping or ``(name, value)`` pairs) of ``owner`` (``"'k'"``, the
    node's name quoted) as sorted pairs, each checked by :func:`param_name` and
    :func:`param_value`.

    >>> params({"alpha": 2}, "'k'")
    (('alpha', 2),)
    >>> try:
    ...     params({"alpha": [1]}, "'k'")
    ... except InvalidArgument as e:
    ...     print(e)
    parameter 'alpha' of 'k' must be a number, str or bool, got [1]
    """
    if isinstance(value, Mapping):
        items = list(value.items())
    elif isinstance(value, (tuple, list)) and all(
        isinstance(p, tuple) and len(p) == 2 for p in value
    ):
        items = list(value)
    else:
        raise InvalidArgument(
            f"parameters of {owner} must be a dict of name: value, got {shown(value)}"
        )
    if len(items) > MAX_PARAMS:
        raise InvalidArgument(
            f"{owner} has {len(items)} parameters; at most {MAX_PARAMS} are allowed"
        )
    for k, v in items:
        param_name(k, f"parameter name of {owner}")
        param_value(v, f"parameter {k!r} of {owner}")
    if len({k for k, _ in items}) != len(items):
        raise InvalidArgument(f"a parameter of {owner} is given twice")
    return tuple(sorted(items))


def view(
    view_offset: Any,
    shape: tuple[int, ...],
    strides: Any,
    base_elements: int,
    what: str,
) -> int:
    """The layout of a view over a base of ``base_elements`` elements: ``view_offset`` an
    int ``>= 0``, ``strides`` one int ``>= 0`` per dimension of ``shape`` (already checked
    by :func:`shape`), every element inside the base. Returns the view's extent (one past
    the last base element it covers).

    Offsets and strides count elements, as torch's ``storage_offset()`` and ``stride()``
    do; negative strides (numpy's reversed views) are refused, since torch has none.

    >>> view(2, (2, 3), (1, 2), 8, "view 'xT'")
    8
    >>> try:
    ...     view(3, (2, 3), (1, 2), 8, "view 'xT'")
    ... except InvalidArgument as e:
    ...     print(e)
    view 'xT' reaches element 8 of its base, which has 8 elements; lower the view's offset, shape or strides so that view_offset + sum((shape[k] - 1) * strides[k]) < 8
    """
    off = _bounded(view_offset, f"view_offset of {what}", 0, MAX_SIZE_BYTES, " elements")
    if isinstance(strides, (str, bytes)) or not isinstance(strides, (tuple, list)):
        raise InvalidArgument(
            f"strides of {what} must be a list of ints (one per dimension), got {shown(strides)}"
        )
    if len(strides) != len(shape):
        raise InvalidArgument(
            f"{what} has {len(shape)} dimensions but {len(strides)} strides; give one stride "
            "per dimension"
        )
    last = off
    for d, s in zip(shape, strides, strict=True):
        last += (d - 1) * _bounded(s, f"stride of {what}", 0, MAX_SIZE_BYTES, " elements")
    if last >= base_elements:
        raise InvalidArgument(
            f"{what} reaches element {last} of its base, which has {base_elements} elements; "
            "lower the view's offset, shape or strides so that view_offset + "
            f"sum((shape[k] - 1) * strides[k]) < {base_elements}"
        )
    return last + 1
