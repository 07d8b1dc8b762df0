"""A ``.cu`` source as C++ for ``cuda_on_cpu.h``, line for line.

The text stays as written except for three rewrites on the lines where they apply (so compiler
and sanitizer messages cite the ``.cu`` file's own lines, through a ``#line`` directive):

* inline PTX ``asm("OP %0, %1;" : "=c"(out) : "c"(in));`` becomes ``SG_PTX_OP(out, in);`` (the
  shim defines the instructions it knows; any other ``asm`` is a :class:`TranslationError`);
* each ``__shared__`` declaration is followed by ``SG_SHARED(name);`` (poisoned per block);
* ``extern "C"`` is dropped: every program lives in a namespace of its own, so programs with
  the same kernel names share one library; after the program come its launchers,
  ``extern "C" int <prefix><entry>(grid x, y, z, block x, y, z, schedule, args, error)``.

:func:`entry_points` reads the parameters of each ``extern "C" __global__`` function, which is
also what the NumPy stand-in for CuPy checks launch arguments against.
"""
from __future__ import annotations

import dataclasses
import hashlib
import re

from symgrad.errors import SymgradError

_ENTRY = re.compile(r'extern\s+"C"\s+__global__\s+void\s+(?:__launch_bounds__\([^)]*\)\s+)?'
                    r'(\w+)\s*\(([^)]*)\)')
_ASM = re.compile(r'\basm\s*(?:volatile\s*)?\(\s*"([a-z0-9.]+) %0, %1;"\s*:\s*"=\w"\(([^()]*)\)'
                  r'\s*:\s*"\w"\(([^()]*)\)\s*\)\s*;')
_SHARED = re.compile(r"\b__shared__\s+[^;{}()]*?\b(\w+)\s*(?:\[[^;{}]*\])?\s*;")
_EXTERN_C = re.compile(r'\bextern\s+"C"\s+')
C_DTYPES = {"bool": "bool", "signed char": "int8", "unsigned char": "uint8", "short": "int16",
            "unsigned short": "uint16", "int": "int32", "unsigned int": "uint32",
            "unsigned": "uint32", "long long": "int64", "unsigned long long": "uint64",
            "float": "float32", "double": "float64", "sg_half": "float16"}


class TranslationError(SymgradError, ValueError):
    """The ``.cu`` text uses something the CPU emulation does not model."""


@dataclasses.dataclass(frozen=True)
class Parameter:
    """One kernel parameter: ``pointer`` (to ``dtype`` elements) or a value of ``dtype``."""

    name: str
    ctype: str        # as declared, without __restrict__ ("const float*", "int")
    dtype: str        # NumPy dtype name of the value or of the elements pointed to
    pointer: bool


def _parameter(text: str, entry: str) -> Parameter:
    declaration = " ".join(text.replace("__restrict__", " ").split())
    ctype, _, name = declaration.rpartition(" ")
    if ctype.endswith("*") is False and name.startswith("*"):
        ctype, name = ctype + "*", name[1:]
    base = ctype.replace("const ", "").replace("*", "").strip()
    if base not in C_DTYPES or ctype.count("*") > 1:
        raise TranslationError(f"kernel {entry}: parameter {text.strip()!r} has a type the "
                               f"emulation does not pass ({ctype!r})")
    return Parameter(name, ctype, C_DTYPES[base], ctype.endswith("*"))


def entry_points(source: str) -> dict[str, tuple[Parameter, ...]]:
    """``{name: parameters}`` of every ``extern "C" __global__`` function of ``source``."""
    out = {}
    for name, params in _ENTRY.findall(source):
        out[name] = tuple(_parameter(p, name) for p in params.split(",") if p.strip())
    return out


def source_key(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()[:16]


def launcher_name(source: str, entry: str) -> str:
    return f"sg_launch_{source_key(source)}_{entry}"


def _rewrite_asm(match) -> str:
    instruction, out, value = match.groups()
    return f"SG_PTX_{instruction.replace('.', '_')}({out.strip()}, {value.strip()});"


def translate(source: str, filename: str = "program.cu") -> str:
    """``source`` as one C++ namespace for ``cuda_on_cpu.h``, with its launchers."""
    entries = entry_points(source)
    text = _ASM.sub(_rewrite_asm, source)
    left = re.search(r"\basm\b.*", text)
    if left:
        raise TranslationError(f"{filename}: inline PTX the emulation does not know: "
                               f"{left.group(0).strip()}")
    text = _SHARED.sub(lambda m: f"{m.group(0)} SG_SHARED({m.group(1)});", text)
    if len(re.findall(r"\b__shared__\b", text)) != text.count("SG_SHARED("):
        raise TranslationError(f"{filename}: a __shared__ declaration the emulation cannot "
                               "poison (one declaration per statement, please)")
    text = _EXTERN_C.sub("", text)
    key = source_key(source)
    lines = [f"namespace sg_program_{key} {{", f'#line 1 "{filename}"', text,
             f'#line 1 "{filename} (launchers)"']
    for entry, params in entries.items():
        casts = ", ".join(f"*({p.ctype}*)args[{i}]" for i, p in enumerate(params))
        lines.append(f"static void call_{entry}(void** args) {{ {entry}({casts}); }}")
        lines.append(
            f'extern "C" int {launcher_name(source, entry)}(unsigned gx, unsigned gy, '
            f"unsigned gz, unsigned bx, unsigned by, unsigned bz, int schedule, void** args, "
            f"const char** error) {{ return sg_emu::launch(dim3(gx, gy, gz), dim3(bx, by, bz), "
            f"schedule, call_{entry}, args, error); }}")
    lines.append("}")
    return "\n".join(lines) + "\n"
