"""The compile cache uses a cached file only when it holds exactly the generated source, and
its compiled code only when the code file's header matches that source and its payload."""
import marshal
import os

from symgrad.backends import cache


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
