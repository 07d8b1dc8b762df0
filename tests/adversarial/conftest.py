"""The regression tests of issue #12 (an adversarial review: bad inputs, hostile names,
tampered artifacts, killed saves, edge values). Every case either gets the interpreter's
result or a clear error, with the program, the cache and the artifact left intact."""
from tests.autodiff.test_registry import clean_registry  # noqa: F401  (autouse: user ops go)
