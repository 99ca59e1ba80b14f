"""Validation of the frontend's typed messages (oxiwork.widget.messages)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oxiwork.error import MessageError
from oxiwork.widget.messages import MAX_INT, MAX_MESSAGE_BYTES, MAX_STRING, SCHEMAS, validate

# One valid example per message type; the test below checks that the table is complete.
VALID: dict[str, dict[str, Any]] = {
    "select": {"node": 1},
    "set_pass": {"index": 0},
    "sim": {"action": "run", "breakpoint": 2},
    "sim_config": {"policy": "adversarial", "drop_event": 3},
    "inspect": {"buffer": 0},
    "pin": {"clear": False},
    "set_memory_mode": {"mode": "exact"},
    "set_stream_mode": {"mode": "stream"},
    "set_options": {"max_streams": 2, "fusion": False, "max_group_size": 8},
    "plan_memory": {},
    "sweep": {},
    "compare_eager": {},
    "load_passes": {},
    "add_buffer": {"name": "b", "size_bytes": 64, "dtype": "float32"},
    "add_kernel": {
        "name": "k",
        "op": "relu",
        "inputs": ["x"],
        "outputs": [1],
        "grid": [1],
        "block": [32, 2],
        "params": {"alpha": 2.0},
    },
    "add_memcpy": {"name": "c", "src": "x", "dst": 1, "direction": "d2d"},
    "add_dependency": {"src": 0, "dst": 1},
    "delete": {"node": 1},
    "rename": {"buffer": 0, "name": "y"},
}


def msg(mtype: str, **fields: Any) -> dict[str, Any]:
    return {"type": mtype, "request_id": "r1", **fields}


class TestValidate:
    def test_raises_unknown_type(self) -> None:
        with pytest.raises(MessageError, match="unknown message type 'teleport'"):
            validate(msg("teleport"))

    @pytest.mark.parametrize("content", [None, [], "select", 3])
    def test_raises_not_an_object(self, content: Any) -> None:
        with pytest.raises(MessageError, match="JSON object"):
            validate(content)

    def test_raises_missing_field(self) -> None:
        with pytest.raises(MessageError, match="missing the field 'node'"):
            validate(msg("select"))

    def test_raises_extra_field(self) -> None:
        with pytest.raises(MessageError, match="unexpected field"):
            validate(msg("select", node=1, colour="red"))

    @pytest.mark.parametrize(
        ("mtype", "fields", "match"),
        [
            ("select", {"node": "1"}, "integer"),
            ("select", {"node": True}, "integer"),
            ("set_pass", {"index": 1.5}, "integer"),
            ("sim", {"action": "fly"}, "expected one of"),
            ("add_buffer", {"name": 3, "size_bytes": 4}, "string"),
            ("add_buffer", {"name": "x", "size_bytes": 4, "dtype": "complex"}, "expected one of"),
            ("add_kernel", {"name": "k", "inputs": "x", "outputs": [], "grid": [1], "block": [1]}, "list"),
            ("add_kernel", {"name": "k", "inputs": [], "outputs": [], "grid": [1, 1, 1, 1], "block": [1]}, "at most 3"),
            ("add_kernel", {"name": "k", "inputs": [], "outputs": [], "grid": [], "block": [1]}, "1 to 3"),
            ("add_kernel", {"name": "k", "inputs": [[1]], "outputs": [], "grid": [1], "block": [1]}, "string"),
            ("add_kernel", {"name": "k", "inputs": [], "outputs": [], "grid": [1], "block": [1], "params": {"a": [1]}}, "number"),
            ("add_memcpy", {"name": "c", "direction": "sideways"}, "expected one of"),
            ("delete", {}, "exactly one"),
            ("delete", {"node": 1, "buffer": 1}, "exactly one"),
            ("rename", {"name": "x"}, "exactly one"),
            ("select", {"node": 2**70}, "integer"),
            ("set_options", {}, "at least one of: max_streams, fusion, max_group_size"),
            ("set_options", {"max_streams": 0}, "max_streams is 0; choose an integer from 1 to 32"),
            ("set_options", {"max_streams": 33}, "from 1 to 32"),
            ("set_options", {"max_streams": 2**40}, "from 1 to 32"),
            ("set_options", {"max_streams": 2**70}, "integer"),
            ("set_options", {"max_streams": True}, "integer"),
            ("set_options", {"max_streams": "2"}, "integer"),
            ("set_options", {"max_streams": 2.0}, "integer"),
            ("set_options", {"max_streams": None}, "must not be null"),
            ("set_options", {"fusion": 1}, "true or false"),
            ("set_options", {"fusion": "false"}, "true or false"),
            ("set_options", {"max_group_size": 0}, "from 1 to 64"),
            ("set_options", {"max_group_size": 65}, "from 1 to 64"),
            ("set_options", {"max_group_size": False}, "integer"),
            ("set_options", {"streams": 2}, "unexpected field"),
            ("sim_config", {}, "at least one of: policy, drop_event"),
            ("sim_config", {"policy": "chaotic"}, "sim_config.policy is 'chaotic'; expected one of"),
            ("sim_config", {"policy": None}, "must not be null"),
            ("sim_config", {"policy": 1}, "string"),
            ("sim_config", {"drop_event": True}, "integer"),
            ("sim_config", {"drop_event": "3"}, "integer"),
            ("sim_config", {"drop_event": 1.0}, "integer"),
            ("sim_config", {"drop_event": [3]}, "integer"),
            ("sim_config", {"event": 3}, "unexpected field"),
        ],
    )  # fmt: skip
    def test_raises_wrong_fields(self, mtype: str, fields: dict[str, Any], match: str) -> None:
        with pytest.raises(MessageError, match=match):
            validate(msg(mtype, **fields))

    def test_raises_long_string(self) -> None:
        with pytest.raises(MessageError, match=f"at most {MAX_STRING}"):
            validate(msg("add_buffer", name="x" * (MAX_STRING + 1), size_bytes=4))

    def test_raises_huge_payload(self) -> None:
        big = {f"k{i}": "v" * 200 for i in range(MAX_MESSAGE_BYTES // 200 + 10)}
        with pytest.raises(MessageError, match="limited to"):
            validate(
                msg("add_kernel", name="k", inputs=[], outputs=[], grid=[1], block=[1], params=big)
            )

    def test_raises_binary_buffers(self) -> None:
        with pytest.raises(MessageError, match="binary"):
            validate(msg("select", node=1), [b"\x00"])

    def test_raises_bad_request_id(self) -> None:
        with pytest.raises(MessageError, match="request_id"):
            validate({"type": "select", "node": 1, "request_id": 5})

    def test_every_type_has_a_valid_example(self) -> None:
        assert set(VALID) == set(SCHEMAS)

    @pytest.mark.parametrize("mtype", sorted(SCHEMAS))
    def test_accepts_valid(self, mtype: str) -> None:
        out = validate(msg(mtype, **VALID[mtype]))
        assert out["type"] == mtype
        assert out["request_id"] == "r1"
        for k, v in VALID[mtype].items():
            assert out[k] == v

    @pytest.mark.parametrize("mtype", sorted(SCHEMAS))
    def test_each_required_field_is_required(self, mtype: str) -> None:
        for name, f in SCHEMAS[mtype].items():
            if f.required:
                fields = {k: v for k, v in VALID[mtype].items() if k != name}
                with pytest.raises(MessageError, match=name):
                    validate(msg(mtype, **fields))


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(
    mtype=st.sampled_from([*SCHEMAS, "nope", ""]),
    fields=st.dictionaries(
        st.sampled_from(
            [
                "node",
                "index",
                "name",
                "inputs",
                "grid",
                "params",
                "buffer",
                "x",
                "max_streams",
                "fusion",
                "max_group_size",
                "policy",
                "drop_event",
            ]
        ),
        json_values,
        max_size=5,
    ),
)
def test_validate_only_raises_message_error(mtype: str, fields: dict[str, Any]) -> None:
    """Whatever arrives, validation either accepts a JSON-able dict or raises MessageError."""
    try:
        out = validate({"type": mtype, **fields})
    except MessageError:
        return
    json.dumps(out)
    assert out["type"] in SCHEMAS


@settings(max_examples=200, deadline=None)
@given(
    name=st.sampled_from(["max_streams", "max_group_size", "fusion"]),
    value=st.integers(-(2**64), 2**64) | st.booleans() | st.floats() | st.text(max_size=3),
)
def test_set_options_accepts_exactly_the_allowed_values(name: str, value: Any) -> None:
    """An int option is accepted iff it is a non-bool int within its bounds; fusion iff bool."""
    bounds = {"max_streams": (1, 32), "max_group_size": (1, 64)}
    if name == "fusion":
        allowed = isinstance(value, bool)
    else:
        lo, hi = bounds[name]
        allowed = type(value) is int and lo <= value <= hi
    try:
        out = validate(msg("set_options", **{name: value}))
    except MessageError as e:
        assert not allowed, e
        assert name in str(e)
        return
    assert allowed and out[name] == value and type(out[name]) is type(value)


@settings(max_examples=200, deadline=None)
@given(
    policy=st.none() | st.sampled_from(["in_order", "adversarial", "chaos", ""]) | json_values,
    drop=st.integers(-(2**64), 2**64)
    | st.booleans()
    | st.floats()
    | st.text(max_size=3)
    | st.none(),
)
def test_sim_config_accepts_exactly_the_allowed_values(policy: Any, drop: Any) -> None:
    """A policy is accepted iff it is one of POLICIES; drop_event iff a non-bool int in range
    or null (the workbench then checks that the plan has that event)."""
    from oxiwork.executor.simulator import POLICIES

    allowed = isinstance(policy, str) and policy in POLICIES
    allowed = allowed and (drop is None or (type(drop) is int and abs(drop) <= MAX_INT))
    try:
        out = validate(msg("sim_config", policy=policy, drop_event=drop))
    except MessageError as e:
        assert not allowed, e
        assert "sim_config." in str(e)
        return
    assert allowed and out["policy"] == policy and out["drop_event"] == drop
