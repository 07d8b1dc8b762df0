"""symgrad's version (``symgrad.__version__``), in a module of its own so that every layer can
read it without importing the package's front door."""

__version__ = "0.1.0"
