"""OpSamples of the random ops and dropout (see tests/ops/samples.py), against the independent
reference of tests/ops/random_reference.py (stream 0, the step each sample feeds). Each
sample's numbers take the dtype of its input, so the backends' dtype variants run them in
float64, float32 and float16. Random ops carry no gradient; dropout's and dropout2d's are
checked (the fed step keeps their masks fixed under finite differences)."""
import numpy as np

import symgrad as sg

from . import random_reference as ref
from .samples import OpSample

_R = np.random.default_rng(53)


def _dropout(x, p, seed, step, mask_shape=None):
    mask_shape = x.shape if mask_shape is None else mask_shape
    keep = ref.uniform(mask_shape, "float32", seed=seed, step=step) >= np.float32(p)
    return np.where(keep, x * x.dtype.type(1 / (1 - p)), x.dtype.type(0))


SAMPLES = [
    OpSample("random_uniform", lambda x: sg.random.uniform(x, dtype=x.dtype, seed=7),
             [np.zeros((3, 5))], lambda x: ref.uniform(x.shape, x.dtype, seed=7),
             grad=False, grad2=False, dynamic=(0,), step=0, id="random_uniform-like-dynamic"),
    OpSample("random_uniform",
             lambda x: x + sg.random.uniform([7], -1.0, 3.0, dtype=x.dtype, seed=2 ** 40 + 5),
             [_R.uniform(size=7)],
             lambda x: x + ref.uniform((7,), x.dtype, seed=2 ** 40 + 5, step=3, low=-1.0,
                                       high=3.0),
             grad=False, grad2=False, step=3, id="random_uniform-static-range"),
    OpSample("random_normal", lambda x: sg.random.normal(x, 1.0, 2.0, dtype=x.dtype, seed=3),
             [np.zeros((3, 3))],
             lambda x: ref.normal(x.shape, x.dtype, seed=3, step=2 ** 33 + 1, mean=1.0, std=2.0),
             grad=False, grad2=False, dynamic=(0,), rtol=1e-12, atol=1e-12, step=2 ** 33 + 1,
             id="random_normal-like-dynamic"),
    OpSample("random_normal", lambda x: x * sg.random.normal([5], dtype=x.dtype, seed=11),
             [_R.uniform(size=5)], lambda x: x * ref.normal((5,), x.dtype, seed=11),
             grad=False, grad2=False, rtol=1e-12, atol=1e-12, step=0, id="random_normal-static"),
    OpSample("random_uniform", lambda x: sg.nn.dropout(x, 0.3, seed=5), [_R.normal(size=(4, 6))],
             lambda x: _dropout(x, 0.3, 5, 1), dynamic=(0,), step=1, id="dropout"),
    # dropout2d: one number per (n, c), from x's shape at run time or from the static shape
    OpSample("random_uniform", lambda x: sg.nn.dropout2d(x, 0.4, seed=9),
             [_R.normal(size=(4, 5, 2, 3))],
             lambda x: _dropout(x, 0.4, 9, 2, x.shape[:2] + (1, 1)), dynamic=(0,), step=2,
             id="dropout2d-dynamic"),
    OpSample("random_uniform", lambda x: sg.nn.dropout2d(x, 0.5, seed=2 ** 35),
             [_R.normal(size=(3, 4, 3, 2))],
             lambda x: _dropout(x, 0.5, 2 ** 35, 7, x.shape[:2] + (1, 1)), step=7,
             id="dropout2d-static"),
]
