"""The user's sources: a script and the local modules it imports, notebooks, and writing files without losing
the user's work (``files.py``, the one write path)."""
