"""What the built-in backend computes from the traces: the streaming pass (``aggregate.py``, keeping task
instances as ``intervals.py`` arrays), task and step statistics (``taskstats.py``; a step's phases:
``phases.py``), ranks (``ranks.py``), counters per task (``counters.py``), the epoch and evaluation marks
(``step_marks.py``), the timeline's window of steps (``timeline.py``) and the summary type that holds it all
(``summary.py``: ``BuiltinSummary``)."""
