"""Backends are peers registered in one place: a new one is its own module plus one entry of
the registration table, and the options, the CLI, custom ops and artifacts take it from
there (symgrad.backends)."""
import sys
import types

import numpy as np
import pytest

import symgrad as sg
from symgrad import backends
from symgrad.backends import Backend, CustomLowering, interpreter
from symgrad.option_schema import Option


@pytest.fixture
def fourth_backend(monkeypatch):
    """A backend module ``fake`` (running programs as the interpreter does) with an option of
    its own and custom lowerings, registered by one table entry."""
    received = {}
    module = types.ModuleType("tests_fake_backend")

    def build(program, fetches, options):
        received["knob"] = options.fake_knob
        return interpreter.InterpreterExecutable(program, fetches, options)

    def check(name, spec, category):
        if not isinstance(spec, str):
            raise TypeError(f"custom_op {name!r}: fake= must be a str")

    module.BACKEND = Backend(
        "fake", build, lowers=lambda opdef: True, default_passes=(),
        options=(Option("fake_knob", int, 3, "a knob only this backend reads", minimum=1),),
        custom_lowering=CustomLowering(check, lambda opdef, spec: received.update(
            lowering=(opdef.name, spec))))
    monkeypatch.setitem(sys.modules, "tests_fake_backend", module)
    monkeypatch.setitem(backends._BACKEND_MODULES, "fake", "tests_fake_backend")
    return received


def test_a_fourth_backend_needs_only_its_module_and_one_registration_line(fourth_backend):
    from symgrad.cli import make_parser

    prog = sg.Program()
    with sg.program_guard(prog):
        y = sg.tanh(sg.data("x", ["n"], "float64")) * 2.0
    fn = sg.compile(prog, [y], backend="fake", fake_knob=7)      # its own option, validated
    np.testing.assert_allclose(fn(x=np.zeros(3))[0], np.zeros(3))
    assert fourth_backend["knob"] == 7
    with pytest.raises(ValueError, match="option fake_knob: must be at least 1"):
        sg.compile(prog, [y], backend="fake", fake_knob=0)
    with pytest.raises(TypeError, match="did you mean 'fake_knob'"):
        sg.compile(prog, [y], backend="fake", fake_knb=2)
    assert "fake" in backends.available_backends()
    commands = {a.dest: a for a in make_parser()._subparsers._group_actions}["command"].choices
    assert "fake" in next(a.choices for a in commands["run"]._actions if a.dest == "backend")
    cube = sg.custom_op("fake_cube", lambda x: x ** 3, lambda t: t, None,
                        category="elementwise", fake="cube({0})")
    assert fourth_backend["lowering"] == ("fake_cube", "cube({0})")
    with pytest.raises(TypeError, match="fake= must be a str"):
        sg.custom_op("fake_cube", lambda x: x ** 3, lambda t: t, None, fake=3)
    assert cube.opdef.name == "fake_cube"


def test_an_unknown_lowering_keyword_of_a_custom_op_suggests_the_backend():
    with pytest.raises(TypeError, match="'cdua'; did you mean 'cuda'"):
        sg.custom_op("typo_op", lambda x: x, lambda t: t, None, cdua="{0}")
    assert "typo_op" not in sg.ops.op_table()


def test_no_backend_imports_another_backend_runtime_or_the_front_end():
    """Backends are peers over the host layer (``backends/host``): none imports another, and
    none imports runtime/ (the layer below them) or the front end."""
    import ast
    import pathlib

    root = pathlib.Path(backends.__file__).parent
    peers = {"numpy_backend", "c_backend", "cuda_backend", "interpreter"}
    for path in root.rglob("*.py"):
        own = path.relative_to(root).parts[0].removesuffix(".py")
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom):
                continue
            module = node.module or ""
            names = [module.split(".")[0]] if module else [a.name for a in node.names]
            if node.level == 1 and path.parent != root:     # within its own package
                continue
            base = path.parent if path.parent == root else path.parent.parent
            if node.level >= 1 and base == root:
                assert not set(names) & (peers - {own}), (path, module, names)
            assert not module.startswith(("runtime", "symgrad.runtime")), path
            assert not (node.level >= 2 and names[0] in
                        ("runtime", "registry", "nn", "optimizer", "cli")), (path, module)
