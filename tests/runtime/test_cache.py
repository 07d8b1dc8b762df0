"""The compile cache uses a cached file only when it holds exactly the generated source, its
compiled code only when the code file's header matches that source and its payload, and a
binary (a C library) only when the record written when it was built matches it and this
machine; the C toolchain record is kept per compiler and CPU, and rebuilt when damaged."""
import json
import marshal
import os
import platform
import re
import shutil
import subprocess
import sys
import warnings

import numpy as np
import pytest

import symgrad as sg
from symgrad.backends import cache
from symgrad.backends.c_backend import compiler


def test_cached_source_hits_only_on_identical_text(tmp_path, monkeypatch):
    monkeypatch.setenv("SYMGRAD_CACHE_DIR", str(tmp_path))
    path, hit = cache.cached_source("demo", "ab" * 32, "x = 1\n")
    assert not hit and open(path).read() == "x = 1\n"
    assert cache.cached_source("demo", "ab" * 32, "x = 1\n") == (path, True)
    with open(path, "w") as handle:
        handle.write("x = 2\n")
    assert cache.cached_source("demo", "ab" * 32, "x = 1\n") == (path, False)
    assert open(path).read() == "x = 1\n"


def test_load_module_checks_the_code_file(tmp_path):
    path = str(tmp_path / "m.py")
    source = "VALUE = 41 + 1\n"
    with open(path, "w") as handle:
        handle.write(source)
    assert cache.load_module(path, source).VALUE == 42
    [code_path] = [str(p) for p in tmp_path.iterdir() if p.suffix == ".code"]
    data = open(code_path, "rb").read()
    assert data.startswith(cache.CODE_MAGIC)
    # a valid code object of other source, with the old header: refused, recompiled
    other = marshal.dumps(compile("VALUE = 0\n", path, "exec"))
    with open(code_path, "wb") as handle:
        handle.write(data[:len(cache.CODE_MAGIC) + 64] + other)
    assert cache.load_module(path, source).VALUE == 42
    # the header names the source: another source never reuses it
    assert cache.load_module(path, "VALUE = 7\n").VALUE == 7
    assert os.path.getsize(code_path) > len(cache.CODE_MAGIC) + 64


# --- binaries: checked against the record written when they were built (issue #24 item 6) ------
def test_a_sealed_binary_is_used_only_while_its_record_holds(tmp_path):
    built, path = tmp_path / "built.tmp", str(tmp_path / "c_demo.so")
    built.write_bytes(b"\x7fELF" + bytes(range(256)) * 4)
    cache.seal_binary(str(built), path, ["machine:demo", "avx2"])
    have = ("machine:demo", "avx2", "sse2")
    assert not built.exists() and cache.check_binary(path, have)
    record = json.loads(open(cache.record_path(path)).read())
    assert record["name"] == "c_demo.so" and record["needs"] == ["avx2", "machine:demo"]
    assert not cache.check_binary(str(tmp_path / "missing.so"), have)   # absent: no warning
    with pytest.warns(cache.CacheWarning, match="lacks avx2"):
        assert not cache.check_binary(path, ("machine:demo", "sse2"))
    data = open(path, "rb").read()
    with open(path, "wb") as handle:
        handle.write(data[:100])
    with pytest.warns(cache.CacheWarning, match="does not match the sha256"):
        assert not cache.check_binary(path, have)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not cache.check_binary(path, have)    # said once
    with open(path, "wb") as handle:
        handle.write(data)
    assert cache.check_binary(path, have)
    other = str(tmp_path / "c_other.so")
    shutil.copy(path, other)
    shutil.copy(cache.record_path(path), cache.record_path(other))
    with pytest.warns(cache.CacheWarning, match="not its own"):   # a record names its file
        assert not cache.check_binary(other, have)
    for text in ("", "[1, 2]", '{"name": "c_demo.so", "sha256": 3, "needs": []}'):
        open(cache.record_path(path), "w").write(text)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert not cache.check_binary(path, have)
        assert all("build record" in str(w.message) for w in caught)   # (each problem once)
    cache.discard_binary(path)
    assert sorted(os.listdir(tmp_path)) == ["c_other.so", "c_other.so.json"]


def _c_program(scale):
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None], "float64")
        y = sg.tanh(x) * scale + 1.0
    return prog, [y]


DAMAGE = {
    "empty": lambda own, other: {"": b""},
    "garbage": lambda own, other: {"": bytes(range(256)) * 64},
    "another_library": lambda own, other: {"": other[""]},
    "another_library_and_record": lambda own, other: other,
}


@pytest.fixture(scope="module")
def two_libraries(tmp_path_factory):
    """A cache holding the C libraries of two programs: (its folder, their paths)."""
    folder = str(tmp_path_factory.mktemp("two-libraries"))
    return folder, [sg.compile(*_c_program(scale), backend="c",
                               cache_dir=folder)._executable.library for scale in (1.5, 2.5)]


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_c_library_is_built_again_and_said_once(damage, two_libraries, tmp_path):
    """An empty, garbage or planted library (with or without the record of the library it
    was) is never loaded: the next compile says so once, builds it again and runs."""
    first, paths = two_libraries
    prog, fetches = _c_program(1.5)
    own, other = ({suffix: open(path + suffix, "rb").read() for suffix in ("", ".json")}
                  for path in paths)
    shutil.copytree(first, tmp_path / damage)
    library = str(tmp_path / damage / os.path.basename(paths[0]))
    for suffix, data in DAMAGE[damage](own, other).items():
        with open(library + suffix, "wb") as handle:
            handle.write(data)
    with pytest.warns(cache.CacheWarning, match=re.escape(library)):
        fn = sg.compile(prog, fetches, backend="c", cache_dir=str(tmp_path / damage))
    assert fn._executable.library == library
    np.testing.assert_allclose(fn(x=np.arange(3.0))[0], np.tanh(np.arange(3.0)) * 1.5 + 1.0)
    assert open(library, "rb").read() == own[""]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sg.compile(prog, fetches, backend="c", cache_dir=str(tmp_path / damage))


def test_a_truncated_c_library_is_built_again_by_the_next_process(tmp_path):
    """dlopen of a truncated library dies of SIGBUS: the next process checks its sha256 first
    and builds it again (both builds run in child processes, which such a crash would kill,
    and which see the same compiler flags: a test of this process may have changed them)."""
    script = ("import sys, numpy as np, symgrad as sg\n"
              "prog = sg.Program()\n"
              "with sg.program_guard(prog):\n"
              "    x = sg.data('x', [None], 'float64')\n"
              "    y = sg.tanh(x) * 0.5 + 1.0\n"
              "fn = sg.compile(prog, [y], backend='c', cache_dir=sys.argv[1])\n"
              "print(fn._executable.library, fn(x=np.ones(2))[0][1])\n")

    def build():
        done = subprocess.run([sys.executable, "-c", script, str(tmp_path)],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        return done

    library = build().stdout.split()[0]
    data = open(library, "rb").read()
    with open(library, "wb") as handle:
        handle.write(data[:len(data) // 2])
    done = build()
    path, value = done.stdout.split()
    assert path == library and float(value) == pytest.approx(np.tanh(1.0) * 0.5 + 1.0)
    assert "CacheWarning" in done.stderr and "does not match the sha256" in done.stderr
    assert open(library, "rb").read() != data[:len(data) // 2]


def test_a_c_library_built_for_another_cpu_is_built_again(tmp_path):
    prog, fetches = _c_program(3.5)
    library = sg.compile(prog, fetches, backend="c", cache_dir=str(tmp_path))._executable.library
    record = json.loads(open(cache.record_path(library)).read())
    assert set(record["needs"]) <= set(compiler.toolchain().cpu)
    record["needs"].append("sg_feature_of_another_cpu")
    open(cache.record_path(library), "w").write(json.dumps(record))
    with pytest.warns(cache.CacheWarning, match="this one lacks sg_feature_of_another_cpu"):
        fn = sg.compile(prog, fetches, backend="c", cache_dir=str(tmp_path))
    assert fn._executable.library == library
    assert "sg_feature_of_another_cpu" not in open(cache.record_path(library)).read()
    np.testing.assert_allclose(fn(x=np.zeros(2))[0], [1.0, 1.0])


# --- the C toolchain record ------------------------------------------------------------------
@pytest.fixture
def fresh_toolchain(monkeypatch, tmp_path):
    """A toolchain probed into an empty cache, with a probe that builds nothing (it says
    every flag works): ``probes`` counts its compiler runs."""
    monkeypatch.setenv("SYMGRAD_CACHE_DIR", str(tmp_path))
    probes = []
    monkeypatch.setattr(compiler, "_builds", lambda *args: probes.append(args) or True)
    compiler._toolchain.cache_clear()
    yield probes
    compiler._toolchain.cache_clear()


@pytest.mark.parametrize("text", ["", "{", "[1, 2]", '{"flags": 3}',
                                  '{"version": "", "simd": "yes", "native": true, "mvec": null, '
                                  '"cpu": []}'])
def test_a_damaged_toolchain_record_is_probed_again(text, fresh_toolchain, tmp_path):
    tools = compiler.toolchain()
    [record] = tmp_path.glob("c_toolchain_*.json")
    found = json.loads(record.read_text())
    record.write_text(text)
    compiler._toolchain.cache_clear()
    runs = len(fresh_toolchain)
    with pytest.warns(cache.CacheWarning, match="toolchain record"):
        assert compiler.toolchain() == tools
    assert len(fresh_toolchain) > runs and json.loads(record.read_text()) == found
    compiler._toolchain.cache_clear()
    assert compiler.toolchain() == tools and len(fresh_toolchain) == runs * 2   # read back


def test_the_toolchain_record_and_libraries_are_per_cpu(fresh_toolchain, monkeypatch, tmp_path):
    """Machines sharing a cache (an NFS home) with CPUs of other features each get their own
    toolchain record, and libraries keyed by what they need: an AVX library never reaches a
    CPU without AVX."""
    tools = {}
    for name, cpu in {"avx": ("machine:x86_64", "avx", "sse2"),
                      "plain": ("machine:x86_64", "sse2")}.items():
        monkeypatch.setattr(compiler, "this_cpu", lambda compiler_path, cpu=cpu: cpu)
        compiler._toolchain.cache_clear()
        tools[name] = compiler.toolchain()
        assert tools[name].cpu == tools[name].needs == cpu   # -march=native: needs them all
    assert len(list(tmp_path.glob("c_toolchain_*.json"))) == 2
    assert compiler.library_key("int x;", tools["avx"]) != \
        compiler.library_key("int x;", tools["plain"])


def test_cpu_features_come_from_the_compiler_where_the_system_does_not_list_them(monkeypatch):
    tools = compiler.toolchain()
    monkeypatch.setattr(compiler, "cpu_features", lambda: None)
    compiler.this_cpu.cache_clear()
    try:
        cpu = compiler.this_cpu(tools.compiler)
    finally:
        compiler.this_cpu.cache_clear()
    assert cpu[0] == f"machine:{platform.machine()}"
    if "-march=native" in tools.flags:
        assert "cc:__x86_64__" in cpu or len(cpu) > 1
        assert all(feature.startswith("cc:") for feature in cpu[1:])
