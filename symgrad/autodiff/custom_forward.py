"""How a custom op's NumPy forward gets into generated code, and the checks around it.

A generated module must contain everything it runs, so :func:`forward_helper` copies a
forward into it when the copy is certain to be the same function: a module-level ``def``, not
decorated, whose source is the code that runs, that reads no module-level names except NumPy
(or ``math``) modules and builtins. The copy is wrapped in a factory under the namespaced name
``_custom_<op name>``, so its own name can never clash with the module's names or with another
forward named alike::

    # The forward of custom op 'sq': a copy of mymodel.square (mymodel.py:12).
    def _make_custom_sq():
        import numpy as np

        def square(x):
            return x * x

        return square


    _custom_sq = _make_custom_sq()

Any other forward (a lambda, a closure, a method, a decorated function, one reading module
globals, a NumPy ufunc, a callable object) runs *by reference*: the module calls
``_custom_<name>``, which symgrad binds to the function when it loads the module. That works
on every backend in the process that compiled it; ``save()`` refuses such a program, with the
reason and the fix (see ``docs/custom-ops.md``).

Results are checked where the forward runs: the interpreter checks them against
``infer_shape`` on the run-time input types, generated code against the op's result types
(:func:`_sg_custom_result`, copied into the module). ``infer_shape`` itself is checked when
the op is built (:func:`checked_infer`).
"""
from __future__ import annotations

import ast
import builtins
import dis
import inspect
import io
import os
import textwrap
import tokenize
import types

import numpy as np

from ..errors import DTypeError, ShapeError
from ..ops.core import ELEMENTWISE, HelperReference, HelperSource, code_int

COPYABLE_MODULES = ("numpy", "math")   # modules a copied forward may read (and their submodules)
FIX = ("to run it in saved artifacts, define the forward as a module-level `def` (no "
       "decorator) that uses only its arguments, NumPy (or math) and builtins")


class NotCopyable(Exception):
    """The forward cannot be copied into generated code; the message says why."""


# --- the forward in generated code --------------------------------------------------------------
def helper_name(op_name: str) -> str:
    """The module-level name the generated code calls a custom op's forward by."""
    return f"_custom_{op_name}"


def forward_helper(op_name: str, forward):
    """The NumPy lowering's helper for custom op ``op_name``: a :class:`HelperSource` holding
    a copy of ``forward`` when it can be copied, else a :class:`HelperReference`."""
    name = helper_name(op_name)
    try:
        return HelperSource(name, _copied_source(op_name, name, forward))
    except NotCopyable as exc:
        return HelperReference(name, forward, f"the forward of custom op {op_name!r} runs by "
                                              f"reference because {exc}")


def _copied_source(op_name, name, forward) -> str:
    if not inspect.isfunction(forward):
        raise NotCopyable(f"it is a {type(forward).__name__}, not a function defined with def")
    if forward.__name__ == "<lambda>":
        raise NotCopyable("it is a lambda")
    if forward.__code__.co_freevars:
        raise NotCopyable(f"it is a closure (it reads {', '.join(forward.__code__.co_freevars)} "
                          f"of an enclosing function)")
    if forward.__qualname__ != forward.__name__:
        raise NotCopyable(f"it is defined inside a function or class ({forward.__qualname__})")
    try:
        source = textwrap.dedent(inspect.getsource(forward))
    except (OSError, TypeError):
        raise NotCopyable("its source code is not available (made with exec, or typed "
                          "interactively)") from None
    definition = _single_def(source, forward.__name__)
    imports = [f"import {module} as {alias}" if module != alias else f"import {module}"
               for alias, module in _module_imports(forward)]
    where = f"{os.path.basename(inspect.getsourcefile(forward) or '?')}:" \
            f"{forward.__code__.co_firstlineno}"
    note = _comment_text(f"The forward of custom op {op_name!r}: a copy of "
                         f"{forward.__module__}.{forward.__name__} ({where}).")
    lines = [*(f"# {line}" for line in textwrap.wrap(note, 92)),
             f"def _make{name}():", *("    " + i for i in imports),
             *([""] if imports else []),
             _indented(definition), "", f"    return {forward.__name__}", "", "",
             f"{name} = _make{name}()"]
    text = "\n".join(lines)
    _check_copy(text, name, forward, [*imports, definition])
    return text


def _comment_text(text: str) -> str:
    """``text`` safe for a ``#`` comment: ASCII, no line breaks."""
    return text.encode("ascii", "backslashreplace").decode("ascii").replace("\r", "\\r") \
        .replace("\n", "\\n")


def _indented(source: str) -> str:
    """``source`` indented by four spaces, except the continuation lines of multi-line
    string literals (whose text indenting would change)."""
    inside = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        (first, _), (last, _) = token.start, token.end
        inside.update(range(first + 1, last + 1))
    return "\n".join(line if number in inside or not line else "    " + line
                     for number, line in enumerate(source.split("\n"), start=1))


def _single_def(source, function_name) -> str:
    """The source of the one undecorated ``def function_name`` in ``source``."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        raise NotCopyable("its source could not be parsed on its own") from None
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.FunctionDef) \
            or tree.body[0].name != function_name:
        raise NotCopyable("its source is not a single def statement")
    node = tree.body[0]
    if node.decorator_list:
        raise NotCopyable("it is decorated")
    if any(isinstance(inner, (ast.Global, ast.Nonlocal)) for inner in ast.walk(node)):
        raise NotCopyable("it declares global or nonlocal names")
    return source.strip()


def _global_names(code):
    """Names ``code`` (and the code nested in it) reads or writes as globals."""
    names, stores = set(), set()
    stack = [code]
    while stack:
        current = stack.pop()
        for instruction in dis.get_instructions(current):
            if instruction.opname in ("LOAD_GLOBAL", "LOAD_NAME"):
                names.add(instruction.argval)
            elif instruction.opname in ("STORE_GLOBAL", "DELETE_GLOBAL", "STORE_NAME"):
                stores.add(instruction.argval)
        stack.extend(c for c in current.co_consts if isinstance(c, types.CodeType))
    return names, stores


def _module_imports(forward) -> list:
    """``[(alias, module name)]`` of the modules ``forward`` reads; any other global it reads
    (or writes) makes it not copyable."""
    names, stores = _global_names(forward.__code__)
    if stores:
        raise NotCopyable(f"it assigns the global name(s) {', '.join(sorted(stores))}")
    imports, foreign = [], []
    for name in sorted(names - {forward.__name__}):
        value = forward.__globals__.get(name, _MISSING)
        if value is _MISSING and hasattr(builtins, name):
            continue
        module = getattr(value, "__name__", "") if isinstance(value, types.ModuleType) else ""
        if module.split(".")[0] in COPYABLE_MODULES:
            imports.append((name, module))
        else:
            foreign.append(name)
    if foreign:
        raise NotCopyable(f"it reads the module-level name(s) {', '.join(foreign)}, which a "
                          f"copy would not have")
    return imports


_MISSING = object()


def _code_key(code):
    """What a code object computes (bytecode, names, constants, nested code), not where it
    was defined (file, lines)."""
    consts = tuple(_code_key(c) if isinstance(c, types.CodeType) else (type(c), repr(c))
                   for c in code.co_consts)
    return (code.co_code, code.co_names, code.co_varnames, code.co_argcount,
            code.co_kwonlyargcount, code.co_flags, consts)


def _literals(code) -> tuple:
    """The literal constants of ``code`` and of the code nested in it."""
    return tuple(_literals(c) if isinstance(c, types.CodeType) else (type(c), repr(c))
                 for c in code.co_consts)


def _check_copy(text, name, forward, module_lines):
    """Check that the definition in ``module_lines`` (its module's imports, then the ``def``)
    compiles to the code of ``forward`` (its file was not edited since it was imported, no
    decorator replaced it), then run the copy's definition and check it has the same
    constants and defaults (defaults that read module globals do not run on their own)."""
    module_level = compile("\n".join(module_lines), "<source>", "exec", dont_inherit=True)
    original = next(c for c in module_level.co_consts if isinstance(c, types.CodeType))
    if _code_key(original) != _code_key(forward.__code__):
        raise NotCopyable("its source file no longer matches the code that runs (edited since "
                          "it was imported?)")
    namespace: dict = {}
    try:
        exec(compile(text, f"<copy of {forward.__name__}>", "exec", dont_inherit=True),  # noqa: S102
             namespace)
    except Exception as exc:  # a default or an annotation reads something the copy lacks
        raise NotCopyable(f"its definition does not run on its own ({type(exc).__name__}: "
                          f"{exc})") from None
    copy = namespace[name]
    if _literals(copy.__code__) != _literals(forward.__code__) or \
            repr((copy.__defaults__, copy.__kwdefaults__)) != \
            repr((forward.__defaults__, forward.__kwdefaults__)):
        raise NotCopyable("its copy would differ from it (constants or default values)")


# --- checks ---------------------------------------------------------------------------------------
def checked_infer(op_name, infer_shape):
    """``infer(types, attrs)`` for the OpDef: ``infer_shape(*types)`` with its result checked
    (shape: a list/tuple of ints >= 0 or None; dtype: anything ``np.dtype`` takes)."""
    def infer(input_types, attrs):
        result = infer_shape(*input_types)
        many = isinstance(result, list)
        for shape, dtype in _result_types(op_name, result if many else [result]):
            _check_shape(op_name, shape)
            _check_dtype(op_name, dtype)
        return [(tuple(s), np.dtype(d)) for s, d in result] if many \
            else (tuple(result[0]), np.dtype(result[1]))
    return infer


def _result_types(op_name, results):
    for item in results:
        if not isinstance(item, (list, tuple)) or len(item) != 2:
            raise ShapeError(f"custom op {op_name!r}: infer_shape must return (shape, dtype) or "
                             f"a list of them, got {item!r}")
        yield item


def _check_shape(op_name, shape):
    bad = not isinstance(shape, (list, tuple)) or any(
        d is not None and (isinstance(d, (bool, np.bool_)) or not isinstance(d, (int, np.integer))
                           or d < 0) for d in shape)
    if bad:
        raise ShapeError(f"custom op {op_name!r}: infer_shape returned the shape {shape!r}; a "
                         f"shape is a list/tuple of ints >= 0 (None for a dim known at run time)")


def _check_dtype(op_name, dtype):
    try:
        np.dtype(dtype)
    except TypeError:
        raise DTypeError(f"custom op {op_name!r}: infer_shape returned {dtype!r}, which is not "
                         f"a dtype") from None


def checked_impl(op_name, forward, infer_shape):
    """The interpreter's implementation: ``forward`` with its results checked against
    ``infer_shape`` on the run-time input types."""
    infer = checked_infer(op_name, infer_shape)

    def impl(*arrays):
        expected = infer([(np.shape(a), np.asarray(a).dtype) for a in arrays], {})
        expected = expected if isinstance(expected, list) else [expected]
        return _sg_custom_result(op_name, forward(*arrays),
                                 tuple((s, np.dtype(d).name) for s, d in expected))
    return impl


def forward_emitter(op_name, category):
    """The NumPy emitter: the call of ``_custom_<op_name>`` wrapped in the result check. An
    elementwise op may run on chunks of a fused loop, so its result shape is checked against
    its arguments' broadcast shape rather than the op's static shape."""
    name = helper_name(op_name)
    elementwise = category == ELEMENTWISE

    def emit(args, attrs, out=None, types=()):
        expected = tuple((None if elementwise else tuple(shape), np.dtype(dtype).name)
                         for shape, dtype in types)
        shown = "(" + "".join(f"({_shape_code(s)}, {d!r}), " for s, d in expected) + ")"
        extra = "".join(f", {a}" for a in args) if elementwise else ""
        code = f"_sg_custom_result({op_name!r}, {name}({', '.join(args)}), {shown}{extra})"
        return code if out is None else f"{out}[...] = {code}"
    emit.wants_types = True
    return emit


def _shape_code(shape) -> str:
    if shape is None:
        return "None"
    return "(" + "".join(("None" if d is None else code_int(d)) + ", " for d in shape) + ")"


def _sg_custom_result(op, result, expected, *inputs):
    """The result(s) of custom op ``op``'s forward, checked: ``expected`` holds one
    ``(shape, dtype name)`` per result, ``None`` in a shape for a dim known only at run time,
    and ``None`` for the whole shape for the broadcast shape of ``inputs`` (elementwise ops)."""
    results = tuple(result) if isinstance(result, (tuple, list)) else (result,)
    if len(results) != len(expected):
        raise ValueError(f"custom op {op!r}: its forward returned {len(results)} result(s), "
                         f"its infer_shape declares {len(expected)}")
    checked = []
    for index, (array, (shape, dtype)) in enumerate(zip(results, expected)):
        if not hasattr(array, "shape") or not hasattr(array, "dtype"):
            array = np.asarray(array)
        if shape is None:
            shape = np.broadcast_shapes(*(np.shape(a) for a in inputs))
        if len(array.shape) != len(shape) or any(
                d is not None and d != n for d, n in zip(shape, array.shape)):
            shown = tuple("?" if d is None else d for d in shape)
            raise ValueError(f"custom op {op!r}: its forward returned result {index} of shape "
                             f"{tuple(array.shape)}, but infer_shape says {shown}")
        if array.dtype != dtype:
            raise TypeError(f"custom op {op!r}: its forward returned result {index} of dtype "
                            f"{array.dtype}, but infer_shape says {dtype}")
        checked.append(array)
    return checked[0] if len(checked) == 1 else tuple(checked)
