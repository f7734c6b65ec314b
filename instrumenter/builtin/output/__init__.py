"""What the built-in backend writes and shows: ``trace.json`` (``chrome_trace.py``), ``steps.svg``
(``plot.py``), the notes (``notes.py``) and the summary on a terminal (``render.py``)."""
