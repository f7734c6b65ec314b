"""autoitt's runtime: what runs inside the user's process, imported by the instrumented copies.

``collection.py`` (what ``itt`` is in a copy), ``window.py`` (the ``--skip-steps``/``--steps`` window),
``libraries.py`` (tasks inside library training calls), ``closures.py`` (an optimizer's closure as a task)
and ``around.c`` (``_around``: wrappers that leave no frame). Standard library only, and nothing here: a copy
made by ``autoitt instrument`` imports ``instrumenter.runtime.collection``, so this package; a copy the
launcher runs imports the same files as ``_autoitt.collection`` (``instrumenter/launch/copies.py``).
"""
