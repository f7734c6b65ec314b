"""Scripts that make ITT calls of their own: autoitt adds its tasks only where they cannot cross them.

Their own resume/pause decide what is collected, so autoitt adds no resume,
pause, ``emit_itt`` or collection window; a region that holds one of the
script's ITT calls, or calls a function of the file that makes any, is left
to the script's markers, with a note.
"""

from __future__ import annotations

import pytest

import transforms
from transforms import Mode, Outcome, instrument_source

HEADER = "import ittapi.compat as itt\ndomain = itt.domain_create('mine')\n"


def _regions(source, mode=Mode()):
    result = instrument_source((HEADER + source).encode(), "mine.py", mode)
    return result, [(r.line, r.role) for r in result.regions]


def test_a_loop_holding_the_scripts_own_task_is_left_to_it_with_a_note():
    result, found = _regions("for step in range(3):\n    itt.task_begin(domain, 's')\n    loss.backward()\n"
                             "    itt.task_end(domain)\n")
    assert found == []
    assert result.outcome is Outcome.ALREADY_INSTRUMENTED
    assert any("step loop left to the script's own markers: it holds itt.task_begin() at line 4" in n.message
               for n in result.plan.notes)


def test_a_loop_inside_the_scripts_own_task_is_marked():
    result, found = _regions("itt.task_begin(domain, 'all')\nfor step in range(3):\n    loss.backward()\n"
                             "itt.task_end(domain)\n")
    assert found == [(4, "step")]
    assert result.outcome is Outcome.INSTRUMENTED


def test_a_loop_calling_a_function_that_makes_itt_calls_is_left_to_the_script():
    result, found = _regions("def step():\n    with itt.task('s', domain=domain):\n        loss.backward()\n"
                             "for i in range(3):\n    step()\n")
    assert found == []
    assert any("it holds step(), which makes ITT calls" in n.message for n in result.plan.notes)


def test_torch_itt_ranges_count_as_the_scripts_own_markers():
    _, found = _regions("import torch\nfor step in range(3):\n    torch.profiler.itt.range_push('s')\n"
                        "    loss.backward()\n    torch.profiler.itt.range_pop()\n")
    assert found == []


def test_autoitt_neither_resumes_pauses_nor_wraps_emit_itt_in_a_hand_made_script():
    result, _ = _regions("import torch\nitt.resume()\nfor step in range(3):\n    loss.backward()\nitt.pause()\n")
    inserted = {line.strip() for line in result.output.decode().splitlines()} - {
        line.strip() for line in (HEADER).splitlines()}
    assert not any(line.startswith("_autoitt_itt.resume") or line.startswith("_autoitt_itt.pause") for line in inserted)
    assert not any("emit_itt" in line for line in inserted)
    assert sum(line.startswith("_autoitt_itt.task_begin") for line in inserted) == 2


def test_a_collection_window_is_not_applied_to_a_hand_made_script():
    result, found = _regions("for step in range(3):\n    loss.backward()\n", Mode(skip_steps=1))
    assert found == [(3, "step")]
    assert b"CollectionWindow" not in result.output
    assert any("--skip-steps/--steps not applied" in n.message for n in result.plan.notes)


@pytest.mark.parametrize("first", [True, False], ids=["scripts-import-first", "scripts-import-later"])
def test_the_copy_strips_back_to_the_script_with_its_own_import(first):
    body = "for step in range(3):\n    loss.backward()\n"
    own = "import ittapi.compat as itt\n"
    source = ("import os\n" + own + body) if first else ("import os\n" + body + own + "itt.resume()\n")
    result = instrument_source(source.encode(), "mine.py")
    assert result.outcome is Outcome.INSTRUMENTED
    assert transforms.strip_markers(result.output, "mine_itt.py") == source.encode()


def test_instrumenting_the_copy_again_changes_nothing():
    source = HEADER + "for step in range(3):\n    loss.backward()\n"
    copy = instrument_source(source.encode(), "mine.py").output
    again = instrument_source(copy, "mine_itt.py")
    assert again.outcome is Outcome.ALREADY_INSTRUMENTED and again.detection.already_instrumented == "autoitt"
