"""Accuracy of the C prelude's own float ``tanh`` (``sg_tanhf``) over every float.

Run: python benchmarks/c_tanh_accuracy.py
Renders the prelude as the C backend does, compiles its ``sg_pick``/``sg_tanhf`` with the
backend's own flags into a small program that evaluates all 2^32 bit patterns in
``omp simd`` loops, and prints the largest error in ulp against ``tanh`` in double (rounded
to float), where it occurs, and any NaN or sign mismatch. About 30 s on one core. The test
suite sweeps 2^22 of the patterns (``tests/backends/test_c_math.py``).
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile

from symgrad.backends.c_backend import compiler
from symgrad.backends.c_backend.host import render_prelude

MAIN = r"""
#include <math.h>
#include <stdio.h>
#include <string.h>
#define BATCH 4096
int main(void)
{
    static float in[BATCH], out[BATCH];
    double worst = 0;
    uint32_t worst_bits = 0;
    long bad = 0;
    for (uint64_t base = 0; base < (1ull << 32); base += BATCH) {
        for (int j = 0; j < BATCH; j++) {
            uint32_t bits = (uint32_t)(base + j);
            memcpy(&in[j], &bits, 4);
        }
        #pragma omp simd
        for (int j = 0; j < BATCH; j++)
            out[j] = sg_tanhf(in[j]);
        for (int j = 0; j < BATCH; j++) {
            float x = in[j], got = out[j];
            if (isnan(x) || isnan(got)) {
                bad += isnan(x) != isnan(got);
                continue;
            }
            double exact = tanh((double)x);
            float rounded = (float)exact;
            if (got == rounded)
                continue;
            if (signbit(got) != signbit(rounded)) {
                bad++;
                continue;
            }
            double ulp = nextafterf(fabsf(rounded), INFINITY) - fabsf(rounded);
            double error = fabs(got - exact) / ulp;
            if (error > worst) {
                worst = error;
                memcpy(&worst_bits, &x, 4);
            }
        }
    }
    float at;
    memcpy(&at, &worst_bits, 4);
    printf("sg_tanhf over all 2^32 floats: at most %.3f ulp (at %.9g), %ld NaN or sign "
           "mismatches\n", worst, at, bad);
    return bad != 0;
}
"""


def own_math_source() -> str:
    """The prelude's ``sg_pick`` and ``sg_tanhf`` (with the declarations they need)."""
    prelude = render_prelude()
    start = prelude.index("/* `condition ? when_true : otherwise`")
    end = prelude.index("#endif", prelude.index("static inline float sg_tanhf")) + len("#endif")
    return ("#include <stdint.h>\nfloat fabsf(float);\n" + prelude[start:end] + "\n")


def main() -> int:
    tools = compiler.toolchain()
    flags = [flag for flag in tools.flags if flag not in ("-shared", "-fPIC")]
    with tempfile.TemporaryDirectory() as folder:
        source, program = os.path.join(folder, "tanh.c"), os.path.join(folder, "tanh")
        with open(source, "w", encoding="utf-8") as handle:
            handle.write(own_math_source() + MAIN)
        subprocess.run([tools.compiler, *flags, source, "-o", program, *tools.libraries],
                       check=True)
        return subprocess.run([program]).returncode


if __name__ == "__main__":
    sys.exit(main())
