"""oxiwork.widget.eager: the comparison of a model's outputs with PyTorch eager."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from oxiwork.error import InvalidArgument
from oxiwork.widget.eager import check_expected, compare, eager_section, tolerance

finite = st.floats(-1e3, 1e3, width=32)
values = arrays(np.float32, st.integers(1, 12), elements=finite)


class TestCheckExpected:
    def test_raises_for_a_missing_name(self) -> None:
        with pytest.raises(InvalidArgument, match="no value for output 'z'"):
            check_expected({"y": [1.0]}, ("y", "z"))

    def test_raises_for_a_scalar(self) -> None:
        with pytest.raises(InvalidArgument, match="got int"):
            check_expected(3, ("y",))

    def test_one_array_is_the_only_output(self) -> None:
        (a,) = check_expected(np.ones(2), ("y",))
        assert a.tolist() == [1.0, 1.0]


class TestCompare:
    @settings(max_examples=25, deadline=None)
    @given(values)
    def test_an_output_matches_itself(self, a: np.ndarray) -> None:
        (m,) = compare(("y",), (a,), (a.copy(),))
        assert m.allclose and m.max_abs_diff == 0.0 and (m.rtol, m.atol) == tolerance("float32")

    @settings(max_examples=25, deadline=None)
    @given(values, st.data())
    def test_the_difference_is_the_largest_and_decides_allclose(self, a, data) -> None:
        i = data.draw(st.integers(0, a.size - 1))
        delta = data.draw(st.floats(1e-3, 10.0))
        b = a.astype(np.float64)
        b[i] += delta
        (m,) = compare(("y",), (b,), (a,))
        assert m.max_abs_diff == pytest.approx(float(np.abs(b - a).max()))
        rtol, atol = tolerance("float32")
        assert m.allclose == bool(abs(b[i] - a[i]) <= atol + rtol * abs(float(a[i])))

    def test_nan_against_a_number_has_no_size_and_fails(self) -> None:
        (m,) = compare(("y",), (np.array([np.nan, 1.0]),), (np.array([0.0, 1.0]),))
        assert not m.allclose and m.max_abs_diff is None and "NaN" in m.reason

    def test_nan_against_nan_matches(self) -> None:
        a = np.array([np.nan, 1.0], np.float32)
        assert compare(("y",), (a,), (a.copy(),))[0].allclose

    def test_integers_must_be_equal(self) -> None:
        (m,) = compare(("ids",), (np.array([1, 2]),), (np.array([1, 3]),))
        assert not m.allclose and (m.rtol, m.atol) == (0.0, 0.0) and m.max_abs_diff == 1.0


class TestSection:
    def test_a_failure_names_the_output_and_the_tolerance(self) -> None:
        ms = compare(("y", "z"), (np.zeros(2), np.ones(2)), (np.zeros(2), np.zeros(2)))
        v = eager_section(ms, "simulation")
        assert v["match"] is False
        assert v["text"].startswith("differs from PyTorch eager: 1 of 2 outputs not allclose: z")
        assert [o["allclose"] for o in v["outputs"]] == [True, False]
