"""``python -m symgrad``: the command line (see :mod:`symgrad.cli`)."""
from .cli import main

raise SystemExit(main())
