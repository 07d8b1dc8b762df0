"""The temporary folder of a pytest session that its pytest-xdist workers share."""
from __future__ import annotations

import os
from pathlib import Path


def session_folder(tmp_path_factory) -> Path:
    """This session's temporary folder: under pytest-xdist the parent of the workers' own
    (their base folders are siblings), new each session."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
