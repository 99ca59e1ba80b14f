"""Typed requests from the workbench frontend and their validation.

Every message is checked against :data:`SCHEMAS` (one entry per message type: its fields,
their types and limits) before any handler runs, so a malformed request (unknown type,
missing or extra fields, wrong types, oversized payloads) is refused with a
:class:`~oxiwork.error.MessageError` that names the problem, and nothing changes.

Example
-------
>>> validate({"type": "select", "request_id": "r1", "node": 3})
{'type': 'select', 'request_id': 'r1', 'node': 3}
>>> try:
...     validate({"type": "teleport"})
... except MessageError as e:
...     print(e)
unknown message type 'teleport'; expected one of: add_buffer, add_dependency, add_kernel, add_memcpy, compare_eager, delete, inspect, load_passes, pin, plan_memory, rename, select, set_memory_mode, set_options, set_pass, set_stream_mode, sim, sim_config, sweep
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from oxiwork import validate as rules
from oxiwork.error import InvalidArgument, MessageError
from oxiwork.executor.simulator import POLICIES
from oxiwork.executor.timeline import MODES as STREAM_MODES
from oxiwork.optimizer.memory import MODES as MEMORY_MODES
from oxiwork.widget.session import OPTION_LIMITS

__all__ = ["MAX_LIST", "MAX_MESSAGE_BYTES", "MAX_STRING", "SCHEMAS", "Field", "validate"]

# Limits: a request from a form is tiny; anything bigger is a bug or an attack.
MAX_MESSAGE_BYTES = 32 * 1024
MAX_STRING = 256
MAX_LIST = 64
# Integers (ids, indices, sizes) beyond the largest size a graph can hold are junk; this
# also keeps them exact in the frontend's JavaScript numbers.
MAX_INT = rules.MAX_SIZE_BYTES

SIM_ACTIONS = ("step", "back", "run", "reset")
DIRECTIONS = ("h2d", "d2h", "d2d")
DTYPE_NAMES = ("float32", "float64", "float16", "int32", "int64", "uint8")


@dataclass(frozen=True, slots=True)
class Field:
    """One field of a message: its kind, whether it is required, allowed values."""

    kind: str  # "int", "bool", "str", "name", "int_or_name", "list_ids", "dims", "params"
    required: bool = True
    nullable: bool = False
    choices: tuple[str, ...] = ()
    #: Inclusive bounds of an "int" field (``None``: only the global ``MAX_INT``).
    bounds: tuple[int, int] | None = None


SCHEMAS: dict[str, dict[str, Field]] = {
    "select": {"node": Field("int", nullable=True)},
    "set_pass": {"index": Field("int")},
    "sim": {
        "action": Field("str", choices=SIM_ACTIONS),
        "breakpoint": Field("int", required=False, nullable=True),
    },
    # The simulator's settings: the ones given change (drop_event null: no event dropped).
    "sim_config": {
        "policy": Field("str", required=False, choices=POLICIES),
        "drop_event": Field("int", required=False, nullable=True),
    },
    "inspect": {"buffer": Field("int")},
    # Pin the current plan for the Compare tab (clear: forget the pinned one).
    "pin": {"clear": Field("bool", required=False)},
    "set_memory_mode": {"mode": Field("str", choices=MEMORY_MODES)},
    "set_stream_mode": {"mode": Field("str", choices=STREAM_MODES)},
    # Pipeline options (ExecutionPlan.build): the ones given change, the others stay.
    "set_options": {
        "max_streams": Field("int", required=False, bounds=OPTION_LIMITS["max_streams"]),
        "fusion": Field("bool", required=False),
        "max_group_size": Field("int", required=False, bounds=OPTION_LIMITS["max_group_size"]),
    },
    "plan_memory": {},
    # Plan every combination of stream caps and fusion (oxiwork.explore.sweep) for the Sweep tab.
    "sweep": {},
    # An imported model's plan run against PyTorch eager (Workbench.compare_eager).
    "compare_eager": {},
    # Sent by the frontend after its first draw: run the pass pipeline, fill its views.
    "load_passes": {},
    "add_buffer": {
        "name": Field("name"),
        "size_bytes": Field("int"),
        "dtype": Field("str", required=False, choices=DTYPE_NAMES),
    },
    "add_kernel": {
        "name": Field("name"),
        "op": Field("str", required=False, nullable=True),
        "inputs": Field("list_ids"),
        "outputs": Field("list_ids"),
        "grid": Field("dims"),
        "block": Field("dims"),
        "params": Field("params", required=False),
    },
    "add_memcpy": {
        "name": Field("name"),
        "src": Field("int_or_name", required=False, nullable=True),
        "dst": Field("int_or_name", required=False, nullable=True),
        "direction": Field("str", choices=DIRECTIONS),
        "size_bytes": Field("int", required=False),
    },
    "add_dependency": {"src": Field("int"), "dst": Field("int")},
    "delete": {"node": Field("int", required=False), "buffer": Field("int", required=False)},
    "rename": {
        "node": Field("int", required=False),
        "buffer": Field("int", required=False),
        "name": Field("name"),
    },
}

# Messages that name exactly one target among these fields.
_ONE_OF = {"delete": ("node", "buffer"), "rename": ("node", "buffer")}
# Messages whose fields are all optional but that must carry at least one of them.
_SOME_OF = {name: tuple(SCHEMAS[name]) for name in ("set_options", "sim_config")}


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and -MAX_INT <= v <= MAX_INT


def _rule(rule: Any, v: Any, where: str, **kw: Any) -> Any:
    """Apply an :mod:`oxiwork.validate` rule; its refusal is a MessageError, same words."""
    try:
        return rule(v, where, **kw)
    except InvalidArgument as e:
        raise MessageError(str(e)) from None


def _check_str(where: str, v: Any) -> str:
    # Every string is echoed somewhere (a reply, an error, a name): it must be text that
    # Jupyter can send back (valid Unicode, no control characters).
    if not isinstance(v, str):
        raise MessageError(f"{where} must be a string, got {type(v).__name__}")
    return _rule(rules.text, v, where, max_length=MAX_STRING)


def _check_field(mtype: str, name: str, f: Field, v: Any) -> Any:
    where = f"{mtype}.{name}"
    if v is None:
        if f.nullable:
            return None
        raise MessageError(f"{where} must not be null")
    if f.kind == "int":
        if not _is_int(v):
            raise MessageError(f"{where} must be an integer, got {v!r:.60}")
        if f.bounds is not None and not f.bounds[0] <= v <= f.bounds[1]:
            lo, hi = f.bounds
            raise MessageError(f"{where} is {v}; choose an integer from {lo} to {hi}")
        return v
    if f.kind == "bool":
        if not isinstance(v, bool):
            raise MessageError(f"{where} must be true or false, got {v!r:.60}")
        return v
    if f.kind == "name":
        _check_str(where, v)
        return _rule(rules.name, v, where)
    if f.kind == "str":
        s = _check_str(where, v)
        if f.choices and s not in f.choices:
            raise MessageError(f"{where} is {s!r}; expected one of: {', '.join(f.choices)}")
        return s
    if f.kind == "int_or_name":
        if _is_int(v):
            return v
        return _check_str(where, v)
    if f.kind in ("list_ids", "dims"):
        if not isinstance(v, list):
            raise MessageError(f"{where} must be a list, got {type(v).__name__}")
        limit = 3 if f.kind == "dims" else MAX_LIST
        if len(v) > limit:
            raise MessageError(f"{where} has {len(v)} entries; at most {limit} are allowed")
        if f.kind == "dims":
            if not v or not all(_is_int(x) for x in v):
                raise MessageError(f"{where} must be 1 to 3 integers, got {v!r:.80}")
            return v
        for i, x in enumerate(v):
            if not _is_int(x):
                _check_str(f"{where}[{i}]", x)
        return v
    if f.kind == "params":
        if not isinstance(v, dict):
            raise MessageError(f"{where} must be an object of name: value")
        if len(v) > MAX_LIST:
            raise MessageError(f"{where} has {len(v)} entries; at most {MAX_LIST} are allowed")
        for k, x in v.items():
            _check_str(f"{where} key", k)
            _rule(rules.param_name, k, f"{where} key")
            _rule(rules.param_value, x, f"{where}.{k}")
        return v
    raise AssertionError(f"unknown field kind {f.kind}")  # a bug in SCHEMAS


def validate(content: Any, buffers: list[Any] | None = None) -> dict[str, Any]:
    """Check a frontend message against :data:`SCHEMAS`; return it (normalised) or raise.

    Parameters
    ----------
    content
        The decoded JSON content of the comm message.
    buffers
        Binary buffers attached to the message; no request carries any.

    Raises
    ------
    MessageError
        Naming the message type and the offending field, with what was expected.

    Examples
    --------
    >>> validate({"type": "set_pass", "index": 1, "request_id": "r7"})["index"]
    1
    >>> try:
    ...     validate({"type": "set_pass", "index": "1"})
    ... except MessageError as e:
    ...     print(e)
    set_pass.index must be an integer, got '1'
    >>> try:
    ...     validate({"type": "set_options", "max_streams": 0})
    ... except MessageError as e:
    ...     print(e)
    set_options.max_streams is 0; choose an integer from 1 to 32
    """
    if buffers:
        raise MessageError("requests carry no binary buffers; send plain JSON")
    if not isinstance(content, dict):
        raise MessageError(f"a message must be a JSON object, got {type(content).__name__}")
    try:
        size = len(json.dumps(content, default=str))
    except (TypeError, ValueError, RecursionError):
        raise MessageError("the message is not plain JSON") from None
    if size > MAX_MESSAGE_BYTES:
        raise MessageError(
            f"the message is {size} bytes; requests are limited to {MAX_MESSAGE_BYTES} bytes"
        )
    mtype = content.get("type")
    if not isinstance(mtype, str) or mtype not in SCHEMAS:
        shown = repr(mtype)[:60]
        raise MessageError(
            f"unknown message type {shown}; expected one of: {', '.join(sorted(SCHEMAS))}"
        )
    rid = content.get("request_id", "")
    if not isinstance(rid, str) or len(rid) > 64:
        raise MessageError(f"{mtype}.request_id must be a string of at most 64 characters")
    _rule(rules.text, rid, f"{mtype}.request_id", max_length=64)
    schema = SCHEMAS[mtype]
    extra = sorted(set(content) - set(schema) - {"type", "request_id"})
    if extra:
        raise MessageError(
            f"{mtype} has unexpected field(s) {', '.join(repr(e)[:40] for e in extra)}; "
            f"allowed: {', '.join(schema) or 'none'}"
        )
    out: dict[str, Any] = {"type": mtype, "request_id": rid}
    for name, f in schema.items():
        if name not in content:
            if f.required:
                raise MessageError(f"{mtype} is missing the field {name!r}")
            continue
        out[name] = _check_field(mtype, name, f, content[name])
    if mtype in _ONE_OF:
        given = [k for k in _ONE_OF[mtype] if k in out]
        if len(given) != 1:
            raise MessageError(
                f"{mtype} needs exactly one of {' or '.join(_ONE_OF[mtype])}, got {len(given)}"
            )
    if mtype in _SOME_OF and not any(k in out for k in _SOME_OF[mtype]):
        raise MessageError(
            f"{mtype} changes nothing; give at least one of: {', '.join(_SOME_OF[mtype])}"
        )
    return out
