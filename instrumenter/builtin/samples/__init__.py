"""The built-in collector's CPU-time samples: the samples file (``samplefile.py``, the format's only
documentation, over ``mixedstacks.py``: line tables, native and Python frames merged), native symbols
(``symbols.py``), stacks as frames of the user's files (``stacks.py``), hotspots (``hotspots.py``) and the
samples per task and outside collection (``sampling.py``)."""
