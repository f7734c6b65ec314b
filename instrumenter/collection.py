"""The name copies made by ``autoitt instrument`` before the runtime had its own package import:
``from instrumenter.collection import Collection``. It is :mod:`instrumenter.runtime.collection` itself (one
module under two names, so nothing more is imported in the user's process); new copies import that name."""

import sys

from .runtime import collection

sys.modules[__name__] = collection
