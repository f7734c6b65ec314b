"""What every stage of a profile shares: its options (``options.py``, ``--trace-steps``: ``step_window.py``), the
result folder's two records (``instrumentation.py``, ``results.py``) and what every reading takes from them
(``read_context.py``), the backend interface (``backend.py``), the summary and its JSON (``summary.py``), the
machine's other work during the run (``machine.py``) and the terminal (``console.py``). The pipeline that runs
them is ``instrumenter/cli/profiling.py``; the backends are ``instrumenter/builtin/`` and ``instrumenter/vtune/``."""
