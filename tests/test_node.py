"""oxiwork.node: the id types."""

from __future__ import annotations

import pickle
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from oxiwork.node import StreamId


@given(
    st.one_of(
        st.integers(-(2**70), 2**70),
        st.booleans(),
        st.floats(allow_nan=False, allow_infinity=False),
        st.integers(-(2**20), 2**20).map(str),
    )
)
def test_stream_id_is_int_of_its_argument_and_one_object_per_small_value(value: object) -> None:
    sid = StreamId(value)
    assert type(sid) is StreamId and sid == int(value)  # type: ignore[call-overload]
    again = StreamId(int(sid))
    assert again == sid
    # interned below the limit (the table cannot be grown without bound by huge ids)
    assert (again is sid) == (0 <= sid < 1 << 12)
    assert pickle.loads(pickle.dumps(sid)) == sid


@pytest.mark.parametrize("bad", [[1], "x", float("nan"), float("inf"), None])
def test_stream_id_refuses_what_int_refuses_with_its_error(bad: object) -> None:
    with pytest.raises((TypeError, ValueError, OverflowError)) as got:
        int(bad)  # type: ignore[call-overload]
    with pytest.raises(got.type, match=re.escape(str(got.value))):
        StreamId(bad)
