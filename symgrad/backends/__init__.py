"""Backends: each exposes ``build(program, fetches, options) -> executable`` where the
executable has ``run(feeds: dict[Value, ndarray]) -> list[ndarray]``, ``source``,
``kernels`` and ``stats``. Backends are looked up by name and imported on first use."""
from __future__ import annotations

import importlib

_BACKEND_MODULES = {
    "interpreter": "symgrad.backends.interpreter",
    "numpy": "symgrad.backends.numpy_backend",
    "cuda": "symgrad.backends.cuda_backend",
}


def get_backend(name: str):
    if not isinstance(name, str) or name not in _BACKEND_MODULES:
        raise ValueError(f"unknown backend {name!r}; choose one of {sorted(_BACKEND_MODULES)}")
    return importlib.import_module(_BACKEND_MODULES[name])


def available_backends() -> list[str]:
    return list(_BACKEND_MODULES)
