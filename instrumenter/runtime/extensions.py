"""The runtime's C extensions (``_around``, ``_markers``), loaded from this folder by path.

In a copy's process the runtime is the launcher's ``_autoitt`` package, not
``instrumenter.runtime`` (``instrumenter/launch/copies.py``): an extension is
found beside this file whatever the package is called, and registered under
that package's name.
"""

from __future__ import annotations

import sys
from typing import Any


def load(stem: str) -> Any:
    """The extension ``stem`` (``_around``: callables that leave no frame; ``_markers``: the copies' markers)."""
    name = f"{__package__}.{stem}" if __package__ else stem
    module = sys.modules.get(name)
    if module is None:
        import importlib.machinery
        import importlib.util
        import os

        folder = os.path.dirname(os.path.abspath(__file__))
        path = next(p for p in (os.path.join(folder, stem + suffix)
                                for suffix in importlib.machinery.EXTENSION_SUFFIXES) if os.path.exists(p))
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules[name] = module
    from .guest import programs

    module.set_programs(programs)  # whose an error is (guest.h): handed over, never imported by name
    return module
