"""autoitt's command line and everything around a rewrite, in rooms by job (the README's Layout): ``cli/``,
``builtin/`` and ``vtune/``, ``profile/``, ``sources/``, ``launch/``, ``collector/``, ``runtime/``.

Kept import-light: instrumented copies import :mod:`instrumenter.runtime.collection` (or
:mod:`instrumenter.runtime.window`; earlier copies the same modules as :mod:`instrumenter.collection`,
:mod:`instrumenter.window`), and so this package.
"""

__version__ = "0.1.0"
