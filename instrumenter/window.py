"""The name copies made by ``autoitt instrument --skip-steps/--steps`` before the runtime had its own package
import: ``from instrumenter.window import CollectionWindow``. It is :mod:`instrumenter.runtime.window` itself
(one module under two names); new copies import that name."""

import sys

from .runtime import window

sys.modules[__name__] = window
