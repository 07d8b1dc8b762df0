"""The C prelude's own float math (``sg_tanhf``): accuracy against tanh in double over a sweep
of float bit patterns, the special values, and that its loops vectorize; ``where`` by bit
masks (``sg_where``) selecting exactly as NumPy."""
import numpy as np
import pytest

import symgrad as sg


def _tanh_float32():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None], "float32")
        y = sg.tanh(x)
    return sg.compile(prog, [y], backend="c")


def _ulps(got, x):
    """|got - tanh(x)| in units of the last place of tanh(x) rounded to float32."""
    exact = np.tanh(x.astype(np.float64))
    rounded = np.abs(exact.astype(np.float32))
    ulp = np.nextafter(rounded, np.float32(np.inf)) - rounded
    return np.abs(got.astype(np.float64) - exact) / ulp.astype(np.float64)


def test_tanh_float32_is_within_2_5_ulp_over_a_sweep_of_all_floats():
    """Every 1024th bit pattern (4M floats, both signs, subnormals to infinities); over all
    2^32 the largest error is 2.5 ulp (NumPy's float32 tanh: 1.4)."""
    fn = _tanh_float32()
    bits = np.arange(0, 2 ** 32, 1024, dtype=np.uint64).astype(np.uint32) + 517
    x = bits.view(np.float32)
    finite = np.isfinite(x)
    got, = fn(x=x)
    assert np.all(np.isnan(got[np.isnan(x)]))
    assert _ulps(got[finite], x[finite]).max() <= 2.5
    # the cut between forms, the cut at 10, and where tanh rounds to +-1
    edges = np.float32([0.3465, 0.3466, 0.6931, 9.99, 10.0, 10.01, 8.9, 9.1, 1e-30, 1e-45])
    edges = np.concatenate([edges, -edges, np.nextafter(edges, np.float32(0))])
    got, = fn(x=edges)
    assert _ulps(got, edges).max() <= 2.5


def test_tanh_float32_special_values():
    fn = _tanh_float32()
    x = np.float32([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, -1e-40, 40.0, -40.0])
    got, = fn(x=x)
    np.testing.assert_array_equal(got[:4], [0.0, -0.0, 1.0, -1.0])
    assert np.signbit(got[1]) and not np.signbit(got[0])
    assert np.isnan(got[4])
    np.testing.assert_array_equal(got[5:], np.tanh(x[5:]))


def test_float32_tanh_is_the_preludes_own_inline_function():
    source = _tanh_float32().source
    assert "static inline float sg_tanhf(float x)" in source
    assert "float: sg_tanhf" in source


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32"])
def test_where_selects_bit_for_bit_as_numpy(dtype):
    """A bool mask fed and one computed in the loop, over special values: the bit-mask
    select of ``sg_where`` keeps -0.0, infinities and NaN payloads."""
    special = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.5, -2.5, 1e-40] if dtype != "int32" \
        else [0, -1, 7, 2 ** 31 - 1, -2 ** 31, 3, 5, 9]
    a = np.array(special * 3, dtype)
    b = np.roll(a, 5)
    mask = np.arange(a.size) % 3 == 0
    condition = np.where(mask, np.nan, np.arange(a.size) % 2 - 0.5).astype("float32")
    prog = sg.Program()
    with sg.program_guard(prog):
        values = [sg.data(name, [None], t) for name, t in
                  (("m", "bool"), ("c", "float32"), ("a", dtype), ("b", dtype))]
        m, c, x, y = values
        fetches = [sg.where(m, x * 1, y), sg.where(c > 0, x, y * 1)]
    fn = sg.compile(prog, fetches, backend="c")
    assert "sg_where(" in fn.sources[".c"]
    got = fn(m=mask, c=condition, a=a, b=b)
    for result, want in zip(got, (np.where(mask, a, b), np.where(condition > 0, a, b))):
        assert result.dtype == want.dtype
        assert result.tobytes() == want.tobytes()
