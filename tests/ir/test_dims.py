"""Symbolic dims (DESIGN.md "Symbolic dims (contract)"), sentence by sentence."""
import itertools

import numpy as np
import pytest

import symgrad as sg
from symgrad import ir_backward
from symgrad.errors import ShapeError
from symgrad.ir import dims
from symgrad.ir.dims import Symbol, add, dim_from_json, dim_to_json, floordiv, mul, unify
from symgrad.runtime.standalone import dim_size


def _program():
    return sg.Program()


# --- a dim is an int, a name, or None/-1 (a fresh anonymous dim) -----------------------------------
def test_named_and_anonymous_dims_and_what_shape_and_dims_show():
    prog = _program()
    with sg.program_guard(prog):
        x = sg.data("x", ["batch", 784], "float32")
        a = sg.data("a", [None, -1, 3], "float32")
    assert x.shape == (None, 784) and a.shape == (None, None, 3)
    assert x.dims == (Symbol("batch"), 784)
    first, second, three = a.dims
    assert first.anonymous and second.anonymous and first != second and three == 3
    assert str(prog).splitlines()[1:3] == ["  %x = data() : float32[batch, 784]",
                                           "  %a = data() : float32[?0, ?1, 3]"]
    assert x.type_str == "float32[batch, 784]"


def test_the_same_name_is_the_same_size():
    prog = _program()
    with sg.program_guard(prog):
        x = sg.data("x", ["n", 4], "float32")
        y = sg.data("y", ["n", 4], "float32")
        z = x + y
    assert z.dims == x.dims == y.dims
    assert prog.dim_constraints == []     # nothing left to check at run time


def test_a_named_dim_must_be_an_identifier():
    with sg.program_guard(_program()):
        with pytest.raises(sg.ShapeError, match="identifier"):
            sg.data("x", ["two words"], "float32")


# --- two different names, or a name and a constant other than 1, meeting: a ShapeError --------------
def _meets(build):
    prog = _program()
    with sg.program_guard(prog):
        with pytest.raises(sg.ShapeError) as info:
            build()
    return str(info.value)


def test_different_names_meeting_in_broadcasting():
    message = _meets(lambda: sg.data("x", ["n"], "float32") + sg.data("y", ["m"], "float32"))
    assert message.startswith("add:") and "'n'" in message and "'m'" in message


def test_a_name_meeting_a_constant_other_than_one():
    message = _meets(lambda: sg.data("x", ["n", 3], "float32") * sg.data("y", [5, 3], "float32"))
    assert message.startswith("multiply:") and "'n'" in message and "5" in message
    prog = _program()
    with sg.program_guard(prog):                 # 1 broadcasts
        y = sg.data("x", ["n", 3], "float32") * sg.data("y", [1, 3], "float32")
    assert y.dims == (Symbol("n"), 3)


def test_different_names_meeting_in_matmul():
    message = _meets(lambda: sg.data("x", [2, "k"], "float32") @ sg.data("w", ["j", 3],
                                                                          "float32"))
    assert message.startswith("matmul:") and "'k'" in message and "'j'" in message


def test_different_names_meeting_in_concatenation_of_other_axes():
    message = _meets(lambda: sg.concatenate([sg.data("x", [2, "n"], "float32"),
                                             sg.data("y", [3, "m"], "float32")]))
    assert message.startswith("concatenate:") and "'n'" in message and "'m'" in message


def test_different_names_meeting_in_grad_outputs():
    prog = _program()
    with sg.program_guard(prog):
        x = sg.data("x", ["n"], "float32")
        seed = sg.data("seed", ["m"], "float32")
        y = sg.tanh(x)
        ops_before = len(prog.ops)
        with pytest.raises(sg.ShapeError, match="grad_outputs.*'m'.*'n'"):
            ir_backward.grad(y, [x], grad_outputs=[seed])
    assert len(prog.ops) == ops_before      # a failed grad leaves the program unchanged


def test_different_names_meeting_in_a_loop_carry():
    prog = _program()
    with sg.program_guard(prog):
        x = sg.data("x", ["n"], "float32")
        other = sg.data("y", ["m"], "float32")
        with pytest.raises(sg.ShapeError, match="while_loop.*'n'.*'m'"):
            sg.while_loop(lambda i, v: i < 3, lambda i, v: [i + 1, other],
                          [sg.constant(0), x])


def test_a_carry_that_cannot_keep_its_size_is_refused_naming_the_loop_and_the_carry():
    prog = _program()
    with sg.program_guard(prog):
        x = sg.data("x", [None], "float32")
        with pytest.raises(sg.ShapeError, match=r"scan: carry 0 has dim .\?0. .* .\?0\*2."):
            sg.scan(lambda c, _: (sg.concatenate([c, c]), None), x, length=3)
        with pytest.raises(sg.ShapeError, match="while_loop: loop variable 1"):
            sg.while_loop(lambda i, v: i < 3,
                          lambda i, v: [i + 1, sg.concatenate([v, v])], [sg.constant(0), x])


# --- anonymous dims unify with what they meet --------------------------------------------------------
def test_anonymous_dims_unify_with_what_they_meet_and_leave_a_run_time_check():
    prog = _program()
    with sg.program_guard(prog):
        x = sg.data("x", ["batch", 8], "float64")
        t = sg.data("t", [None], "float64")
        r = sg.sum(x, axis=1) - t
        u = sg.data("u", [None], "float64") + sg.ones([4], "float64")
    assert r.dims == (Symbol("batch"),) and u.dims == (4,)
    checked = [(c.left, c.right) for c, _ in prog.dim_constraints]
    assert (Symbol("batch"), t.dims[0]) in checked
    assert any(4 in pair for pair in checked)


# --- derived dims: sums, products, floor division by a constant ---------------------------------------
def test_concatenate_sums_reshape_multiplies_and_divides_back():
    prog = _program()
    with sg.program_guard(prog):
        x = sg.data("x", ["batch", 784], "float32")
        flat = sg.reshape(x, [-1])
        images = sg.reshape(flat, [-1, 28, 28])
        joined = sg.concatenate([sg.data("a", ["n"], "float32"), sg.data("b", ["m"], "float32")])
    assert str(flat.dims[0]) == "batch*784"
    assert images.dims == (Symbol("batch"), 28, 28)
    assert str(joined.dims[0]) == "m + n"
    assert "float32[batch*784]" in str(prog)


def test_strided_windows_divide_by_a_constant():
    prog = _program()
    with sg.program_guard(prog):
        x = sg.data("x", ["batch", 3, "h", "w"], "float32")
        pooled = sg.nn.max_pool2d(x, 2)
    assert pooled.dims[:2] == (Symbol("batch"), 3)
    assert str(pooled.dims[2]) == "h//2" and str(pooled.dims[3]) == "w//2"
    assert pooled.shape == (None, 3, None, None)


def test_where_no_exact_expression_exists_the_op_gets_a_fresh_anonymous_dim():
    prog = _program()
    with sg.program_guard(prog):
        x = sg.data("x", ["n"], "float32")
        piece = x[1::2]                        # a strided slice of a symbolic dim
    assert piece.dims[0].anonymous and piece.dims[0] not in x.dims


def test_dim_expressions():
    n, m = Symbol("n"), Symbol("m")
    assert floordiv(mul(n, 784), 784) == n
    assert str(add(mul(n, 2), 3)) == "n*2 + 3"
    assert str(floordiv(add(n, 1), 2)) == "(n + 1)//2"
    assert add(n, m) == add(m, n) and hash(add(n, m)) == hash(add(m, n))
    assert add(n, mul(n, -1)) == 0
    assert dim_size(dim_to_json(floordiv(add(mul(n, m), 1), 2)), {"n": 3, "m": 5}) == 8
    anonymous = {}
    for dim in (n, floordiv(add(mul(n, m), 1), 2), 7):
        assert dim_from_json(dim_to_json(dim), anonymous) == dim
    loaded = dim_from_json(dim_to_json(Symbol(None, 4)), anonymous)   # a new symbol, ?4
    assert loaded.anonymous and str(loaded) == "?4" and anonymous == {4: loaded}
    assert dim_from_json({"anonymous": 4}, anonymous) is loaded


@pytest.mark.parametrize("reverse", [False, True], ids=["made-in-order", "made-in-reverse"])
@pytest.mark.parametrize("first_id", [None, 10**9 - 1], ids=["any-count", "at-a-digit-boundary"])
def test_an_expression_orders_its_terms_by_what_they_are_not_by_when_they_were_made(
        monkeypatch, reverse, first_id):
    """One canonical form: anonymous dims by number, then names, then floor divisions, however
    many symbols the process made before and in whichever order (the order once followed a
    process-wide creation count compared as text, so a sum printed ``?1 + ?0`` after the
    symbols crossed 10, 100... and a loaded program printed differently from the saved one)."""
    if first_id is not None:   # ?0 and ?1 get identities 999999999 and 1000000000
        monkeypatch.setattr(dims, "_anonymous_ids", itertools.count(first_id))
    if reverse:
        one, zero = Symbol(None, 1), Symbol(None, 0)
    else:
        zero, one = Symbol(None, 0), Symbol(None, 1)
    n = Symbol("n")
    assert str(add(zero, one)) == str(add(one, zero)) == "?0 + ?1"
    assert str(one + n + zero) == "?0 + ?1 + n"
    assert str(mul(one, zero) + mul(n, one)) == "?0*?1 + ?1*n"
    halves = floordiv(one + 1, 2) + floordiv(zero + 1, 2) + 1
    assert str(halves) == "(?0 + 1)//2 + (?1 + 1)//2 + 1"
    assert dim_to_json(add(one, zero)) == {"sum": [[[{"anonymous": 0}], 1],
                                                   [[{"anonymous": 1}], 1]]}
    # loading meets ?1 first and still builds the canonical sum
    loaded = dim_from_json({"sum": [[[{"anonymous": 1}], 1], [[{"anonymous": 0}], 1]]}, {})
    assert str(loaded) == "?0 + ?1" and dim_to_json(loaded) == dim_to_json(add(zero, one))


def test_unify_rules():
    n, m, anon = Symbol("n"), Symbol("m"), Symbol(None, 0)
    assert unify(n, n) == n and unify(anon, n) == n and unify(n, anon) == n
    assert unify(anon, 5) == 5
    for a, b in ((n, m), (n, 5), (5, n), (3, 4)):
        with pytest.raises(sg.ShapeError):
            unify(a, b)


# --- grad, passes and serialization keep the dims -----------------------------------------------------
def test_grad_seeds_and_unbroadcasting_keep_the_dims():
    prog = _program()
    with sg.program_guard(prog):
        x = sg.data("x", ["batch", 4], "float32")
        b = sg.parameter("b", [4], "float32", init=np.zeros(4, "float32"))
        y = sg.tanh(x + b)
        gx, gb = ir_backward.grad(y, [x, b])
    assert gx.dims == x.dims and gb.dims == (4,)
    for op in prog.ops:
        for value in op.results:
            assert all(not isinstance(d, Symbol) or not d.anonymous for d in value.dims), op


def test_passes_and_serialization_keep_the_dims():
    from symgrad.ir.serialize import program_from_json, program_to_json
    from symgrad.ops import op_table

    prog = _program()
    with sg.program_guard(prog):
        x = sg.data("x", ["batch", 4], "float32")
        y = sg.sum(sg.tanh(sg.reshape(x, [-1])) * 2.0)
    fn = sg.compile(prog, [y])
    assert "batch*4" in fn.ir and "batch" in fn.ir
    arrays = {}

    def sink(array):
        arrays[str(len(arrays))] = array
        return str(len(arrays) - 1)

    loaded = program_from_json(program_to_json(prog, sink), arrays.__getitem__, op_table())
    assert str(loaded).splitlines()[1:] == str(prog).splitlines()[1:]


@pytest.mark.parametrize("left, right", [
    (lambda n, m: n + 1, lambda n, m: n),
    (lambda n, m: n * 2 + 2, lambda n, m: n * 2),
    (lambda n, m: n // 2 + 1, lambda n, m: n // 2),
    (lambda n, m: n + m, lambda n, m: n + m + 3),
])
def test_dims_that_differ_by_a_constant_never_unify(left, right):
    n, m = Symbol(), Symbol("m")
    with pytest.raises(ShapeError, match="they always differ by"):
        unify(left(n, m), right(n, m), "here")


def test_a_loop_carry_that_grows_by_a_constant_is_refused_when_built():
    prog = sg.Program()
    with sg.program_guard(prog):
        c0, row = sg.data("c0", [None, 3]), sg.data("row", [1, 3])
        with pytest.raises(ShapeError, match="carry"):
            sg.fori_loop(0, 3, lambda i, c: sg.concatenate([c, row], axis=0), c0)
