"""The crash hunt in the suite: each real training shape of ``benchmarks/crash_hunt.py`` profiled with
the built-in collector's sampler, at the default rate and, for the shapes that stress the signal
handler most, at 10 kHz.  One run each: the benchmark script makes the many runs that give rates
(its table is in ``benchmarks/README.md``).  Left to the benchmark: the torchrun gloo pair
(``tests/test_processes.py`` profiles one in the suite, with its own handling of gloo's abort at exit,
pytorch#179291), Lightning validate-then-fit and the Hugging Face trainer (profiled by
``tests/test_sampler_guest.py`` and ``tests/test_libraries.py``).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _load_crash_hunt():
    name = "autoitt_crash_hunt"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / "crash_hunt.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


hunt = _load_crash_hunt()

#: Lightning validate-then-fit and the Hugging Face trainer are profiled in the suite already
#: (tests/test_sampler_guest.py, tests/test_libraries.py)
IN_SUITE_ELSEWHERE = ("torchrun_gloo_ddp", "lightning_validate_fit", "hf_trainer")
CASES = [(name, 1000) for name in hunt.SCENARIOS if name not in IN_SUITE_ELSEWHERE] + [
    (name, 10000) for name in ("library_reload", "thread_churn", "generators_recursion_exceptions")]


@pytest.mark.slow
@pytest.mark.parametrize("name,rate", CASES, ids=[f"{n}-{r}Hz" for n, r in CASES])
def test_a_profiled_training_shape_runs_to_its_end(tmp_path, name, rate):
    scenario = hunt.SCENARIOS[name]
    folder = hunt.prepared(scenario, tmp_path)
    outcome = hunt.run_once(scenario, rate, folder)
    assert outcome.ok, f"exit {outcome.returncode}: {outcome.why}"
