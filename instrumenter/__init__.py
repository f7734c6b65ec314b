"""autoitt's command line and everything around a rewrite: files, diffs, reports.

Kept import-light: instrumented copies import :mod:`instrumenter.runtime.collection` (or
:mod:`instrumenter.runtime.window`), and so this package.
"""

__version__ = "0.1.0"
