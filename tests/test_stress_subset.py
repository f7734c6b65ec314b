"""A CI-sized slice of ``benchmarks/stress_run.py``: real framework sources through autoitt.

A fixed, seeded sample of the ``.py`` files of the installed torch, keras and
numpy packages goes through ``instrument_source`` (in two worker processes, in
memory); none may crash and every instrumented copy must pass the safety
checks (``RewriteError``, ``compile()``, ``strip_markers`` gives back the
original bytes, the copy is recognised as already instrumented). Files
Python cannot parse are not autoitt's fault and only counted.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("torch", "keras", "numpy")
SAMPLE = 200
SEED = 20240601
#: larger files cost seconds each in libcst; the whole set (benchmarks/stress_run.py) covers them
MAX_BYTES = 40_000


def _load_stress_run():
    name = "autoitt_stress_run"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / "stress_run.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # the worker processes (fork) find check_file by this name
    spec.loader.exec_module(module)
    return module


def _show(items) -> str:
    return "\n".join(f"{item['path']}: [{item.get('check')}] {item['message']}\n{item.get('traceback') or ''}"
                      for item in items)


@pytest.mark.slow
def test_a_seeded_sample_of_framework_files_instruments_cleanly():
    # One test, not four over a shared fixture: under pytest-xdist a module fixture
    # would run the sample once per worker.
    stress = _load_stress_run()
    for package in PACKAGES:
        if importlib.util.find_spec(package) is None:
            pytest.skip(f"{package} is not installed")
    files = stress.select_files(PACKAGES, sample=SAMPLE, seed=SEED, max_bytes=MAX_BYTES)
    assert len(files) == SAMPLE
    # Beside them, the samples: files with training loops whatever versions are installed (the seeded sample is
    # another set of files on each version; on 3.14's keras-nightly it held no loop autoitt marks)
    samples = [("samples", path) for path in sorted((ROOT / "samples").glob("*.py"))]
    summary = stress.run_stress(files + samples, jobs=2, timeout=30.0, progress=False)

    assert not summary.crashes, "crashes:\n" + _show(summary.crashes)
    assert not summary.safety_failures, "safety-check failures:\n" + _show(summary.safety_failures)
    assert not summary.timeouts and not summary.unfinished, (summary.timeouts, summary.unfinished)
    # Otherwise the checks above would pass on a run where nothing was rewritten: the samples' loops at least were.
    assert summary.files_read == SAMPLE + len(samples)
    assert summary.files_with_loops >= len(samples), summary.to_json()
    assert sum(summary.regions_instrumented_by_role.values()) >= 2 * len(samples), summary.regions_instrumented_by_role
