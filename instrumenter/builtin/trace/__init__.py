"""The built-in collector's trace files and reading them: the format (``tracefile.py``, its only documentation),
its clock (``clock.py``), reading in blocks (``scan.py``; ``events.py`` for small traces as objects) and the
inner loop that pairs each block's begins and ends (``pairing.py`` over ``pairing.c``)."""
