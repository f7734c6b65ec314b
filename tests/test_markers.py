"""The marker vocabulary: what the plan builds is exactly what strip recognises, and nothing of the user's."""

from __future__ import annotations

import importlib

import libcst as cst
from pathlib import Path

import pytest

from transforms import WINDOW_CLASS, WINDOW_MODULE
from transforms._markers import LAUNCHED_RUNTIME_PACKAGE, RUNTIME_CLASS, RUNTIME_MODULE
from transforms._markers import ITT_NAMES, Markers, MarkerMatcher, free_name

MARKERS = Markers(itt="itt", domain="_autoitt_domain", torch="torch")
MATCHER = MarkerMatcher("itt", "_autoitt_domain", (MARKERS.runtime,))


def statement(code: str) -> cst.BaseStatement:
    return cst.parse_statement(code + "\n")


@pytest.mark.parametrize("code", [MARKERS.resume(), MARKERS.pause(), MARKERS.task_begin("step"), MARKERS.task_end(),
                                  MARKERS.pt_region_begin("_autoitt_pt_0"), MARKERS.pt_region_end("_autoitt_pt_0"),
                                  MARKERS.range_push("training"), MARKERS.range_pop()])
def test_every_marker_built_is_recognised_as_one(code):
    assert MATCHER.is_marker(statement(code))


@pytest.mark.parametrize("code", [MARKERS.task_begin("step"), MARKERS.task_end()])
def test_task_markers_are_told_apart(code):
    assert MATCHER.is_task_marker(statement(code))
    assert not MATCHER.is_task_marker(statement(MARKERS.resume()))


def test_the_emit_itt_context_is_recognised():
    assert MATCHER.is_marker_with(statement(f"with {MARKERS.emit_itt()}:\n    pass"))
    assert not MATCHER.is_marker_with(statement(f"with {MARKERS.emit_itt()} as p:\n    pass"))


@pytest.mark.parametrize("code", [
    "import ittapi.compat as itt", f"from {WINDOW_MODULE} import {WINDOW_CLASS}",
    f"from {RUNTIME_MODULE} import {RUNTIME_CLASS}", MARKERS.collection(),
    MARKERS.window(1, 2, ("step",)), MARKERS.domain_create("autoitt.train"),
    "from instrumenter.runtime.collection import Collection as _autoitt_Collection",
    MARKERS.pt_region_create("_autoitt_pt_0", "step"),
])
def test_every_header_statement_built_is_recognised_as_one(code):
    assert MATCHER.is_header(statement(code))


@pytest.mark.parametrize("code", [
    "itt2.resume()", "other.task_begin(_autoitt_domain, 'x')", "x = itt.resume()",
    "torch.profiler.itt.range_push('x'); y = 1", "import ittapi", "_autoitt_domain = 1", "model.itt.resume()",
])
def test_the_users_code_is_not_a_marker(code):
    line = statement(code)
    assert (MATCHER.is_marker(line), MATCHER.is_task_marker(line), MATCHER.is_header(line)) == (False, False, False)


def test_the_users_own_task_on_another_domain_is_a_marker_call_but_not_autoitts_task():
    """The call's shape is a marker's (strip may take it into a run of markers); its domain is not autoitt's, so it
    is no task marker of autoitt's, and a run holding only such calls is left to the user (transforms/_strip.py)."""
    line = statement("itt.task_begin(domain, 'x')")
    assert (MATCHER.is_marker(line), MATCHER.is_task_marker(line), MATCHER.is_header(line)) == (True, False, False)


@pytest.mark.parametrize("module, name", [(RUNTIME_MODULE, RUNTIME_CLASS), (WINDOW_MODULE, WINDOW_CLASS)])
def test_the_runtime_the_vocabulary_names_exists(module, name):
    assert hasattr(importlib.import_module(module), name)


@pytest.mark.parametrize("module, runtime_module", [("instrumenter.collection", RUNTIME_MODULE),
                                                    ("instrumenter.window", WINDOW_MODULE)])
def test_the_names_earlier_copies_import_are_the_runtimes_modules_themselves(module, runtime_module):
    assert importlib.import_module(module) is importlib.import_module(runtime_module)


def test_a_name_the_script_uses_is_never_chosen():
    assert free_name(ITT_NAMES, {"print"}) == "itt"
    assert free_name(ITT_NAMES, {"itt"}) == "_autoitt_itt"
    assert free_name(ITT_NAMES, {"itt", "_autoitt_itt", "_autoitt_itt_2"}) == "_autoitt_itt_3"


def test_the_launcher_provides_the_runtime_package_launched_copies_import():
    import instrumenter.launch
    from instrumenter.launch import __main__ as launcher

    assert launcher.RUNTIME_PACKAGE == LAUNCHED_RUNTIME_PACKAGE
    # The launcher cannot import its package: the names of its variables, its files and what the placeholder .pyc
    # says are written twice.
    names = ("EXIT_DIR_VARIABLE", "INSTRUMENTATION_VARIABLE", "ENTRY_VARIABLE", "MAIN_VARIABLE", "SCRIPT_VARIABLE",
             "AGAIN_VARIABLE", "FAULT_FILE", "NO_SITECUSTOMIZE")
    assert [getattr(launcher, name) for name in names] == [getattr(instrumenter.launch, name) for name in names]
    assert launcher.SITE_DIR == str(instrumenter.launch.SITE_DIR)
    assert launcher.main_file("/r/t-1/instrumentation.json", "/src/my.train.py") == str(
        instrumenter.launch.main_file(Path("/r/t-1/instrumentation.json"), Path("my.train.py")))


def test_a_launched_copy_imports_the_runtime_from_the_launchers_package_and_is_still_recognised():
    markers = Markers(runtime_package=LAUNCHED_RUNTIME_PACKAGE)
    (_, (module, name, alias)) = markers.imports(windowed=False)
    assert (module, name) == (f"{LAUNCHED_RUNTIME_PACKAGE}.collection", RUNTIME_CLASS)
    (_, (window_module, _, _)) = markers.imports(windowed=True)
    assert window_module == f"{LAUNCHED_RUNTIME_PACKAGE}.window"
    assert MATCHER.is_header(statement(f"from {module} import {name} as {alias}"))
