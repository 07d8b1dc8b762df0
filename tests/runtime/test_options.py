"""Compile options: declared by the pipeline and each backend, validated from declarations."""
import ast
import pathlib

import numpy as np
import pytest

import symgrad as sg
from symgrad.backends import available_backends, backend_options, get_backend
from symgrad.passes import PIPELINE_OPTIONS, FusionPolicy, PassOptions
from symgrad.runtime.options import CompileOptions, option_schema

PACKAGE = pathlib.Path(sg.__file__).parent


def _program():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 4], "float64")
        y = sg.sum(sg.tanh(x) * 2.0)
    return prog, y


@pytest.mark.parametrize("wrong, meant", [("chunksize", "chunk_size"), ("thread", "threads"),
                                          ("fuse", "fusion"), ("max_group", "max_group_size")])
def test_unknown_compile_keyword_suggests_the_option(wrong, meant):
    prog, y = _program()
    with pytest.raises(TypeError, match=f"unknown option '{wrong}'; did you mean '{meant}'"):
        sg.compile(prog, [y], **{wrong: 1})
    with pytest.raises(TypeError, match=f"did you mean '{meant}'"):
        sg.CompileOptions(**{wrong: 1})
    with pytest.raises(TypeError, match=f"did you mean '{meant}'"):
        sg.Executor("numpy", **{wrong: 1}).run(prog, feed={"x": np.ones((2, 4))}, fetch_list=[y])


def test_unknown_backend_and_pass_suggest_a_name():
    prog, y = _program()
    with pytest.raises(ValueError, match="unknown backend 'nmupy'; did you mean 'numpy'"):
        sg.compile(prog, [y], backend="nmupy")
    with pytest.raises(ValueError, match="unknown value 'fuse'; did you mean 'fusion'"):
        sg.compile(prog, [y], passes=["fuse"])


@pytest.mark.parametrize("name, value", [("threads", 0), ("chunk_size", -1), ("fusion", 1),
                                         ("max_group_size", True), ("passes", "cse"),
                                         ("cache_dir", 3), ("return_numpy", None)])
def test_bad_values_name_the_option(name, value):
    with pytest.raises(ValueError, match=f"option {name}:"):
        CompileOptions(**{name: value})


def test_every_option_is_declared_once_with_a_type_default_and_doc():
    schema = option_schema()
    assert set(schema) == {o.name for o in PIPELINE_OPTIONS} | set(backend_options())
    for option in schema.values():
        assert option.doc and option.problem(option.default) is None, option
    assert CompileOptions().as_dict() == {name: o.default for name, o in schema.items()}


def test_each_backend_declares_what_it_reads():
    def reads(backend):
        return {o.name for o in get_backend(backend).options}

    assert reads("interpreter") == set()
    assert {"chunk_size", "threads"} <= reads("numpy")
    assert {"chunk_size", "threads"} <= reads("c")
    assert "return_numpy" in reads("cuda")
    assert "return_numpy" not in reads("numpy")


def test_options_are_immutable_values():
    options = CompileOptions(threads=2, passes=["cse", "fusion"])
    assert options.passes == ("cse", "fusion")
    assert options == CompileOptions(threads=2, passes=("cse", "fusion"))
    assert hash(options) == hash(options.replace())
    assert options.replace(threads=1).threads == 1 and options.threads == 2
    with pytest.raises(AttributeError):
        options.threads = 3
    with pytest.raises(AttributeError, match="did you mean 'threads'"):
        options.thread


def test_cache_key_ignores_where_the_cache_is():
    assert CompileOptions(cache_dir="/tmp/a").key() == CompileOptions().key()
    assert CompileOptions(threads=1).key() != CompileOptions().key()


def test_fusion_policy_comes_from_the_backend():
    options = CompileOptions(chunk_size=64)
    assert get_backend("numpy").fusion_policy(options) == FusionPolicy(alone_min_elements=256)
    assert get_backend("c").fusion_policy(options.replace(threads=1)) == FusionPolicy()
    assert get_backend("interpreter").fusion_policy(options) == FusionPolicy()
    passed = PassOptions.of(options, FusionPolicy(7))
    assert (passed.fusion, passed.max_group_size, passed.policy) == (True, 64, FusionPolicy(7))


def test_passes_read_no_backend_option():
    """Passes see a PassOptions: no module under passes/ reads a backend's option."""
    backend_only = set(backend_options()) - {o.name for o in PIPELINE_OPTIONS}
    for path in (PACKAGE / "passes").glob("*.py"):
        tree = ast.parse(path.read_text())
        read = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
        assert not read & backend_only, (path.name, read & backend_only)


def test_cli_lists_the_registered_backends():
    from symgrad.cli import make_parser

    parser = make_parser()
    actions = {a.dest: a for a in parser._subparsers._group_actions}
    commands = actions["command"].choices
    backend_choices = {name: next(a.choices for a in commands[name]._actions
                                  if a.dest == "backend") for name in ("dump", "compile", "run")}
    assert backend_choices["compile"] == backend_choices["run"] == available_backends()
    assert backend_choices["dump"] == [b for b in available_backends()
                                       if get_backend(b).generates_code]
    assert "interpreter" not in backend_choices["dump"] and "c" in backend_choices["dump"]


def test_artifact_options_are_checked_against_the_declarations(tmp_path):
    import json

    prog, y = _program()
    path = tmp_path / "artifact"
    sg.compile(prog, [y], chunk_size=128).save(str(path))
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["options"]["chunk_size"] == 128
    assert sg.load(str(path))(x=np.ones((2, 4)))[0] == pytest.approx(16 * np.tanh(1.0))
    manifest["options"]["chunksize"] = manifest["options"].pop("chunk_size")
    (path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(sg.ArtifactError, match="did you mean 'chunk_size'"):
        sg.load(str(path))


def test_the_codegen_page_lists_every_option_and_who_reads_it():
    page = (PACKAGE.parent / "docs" / "codegen.md").read_text()
    table = page[page.index("<!-- options-table -->"):].split("\n\n")[0]
    rows = {}
    for line in table.splitlines()[3:]:
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        rows[cells[0].strip("`")] = (cells[1], cells[2].strip("`"))
    assert set(rows) == set(option_schema())
    for name, option in option_schema().items():
        pipeline = name in {o.name for o in PIPELINE_OPTIONS}
        expected = "pipeline" if pipeline else ", ".join(
            b for b in available_backends() if option in get_backend(b).options)
        assert rows[name] == (expected, repr(option.default)), name
