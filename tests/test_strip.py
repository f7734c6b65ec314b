"""Strip is the exact inverse of instrument, and every rewrite is checked against it."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from instrumenter.cli import cli
from tests.conftest import SCRIPTS, script_id
from transforms import Mode, RewriteError, SourceError, instrument_source, strip_markers

MODES = {
    "default": Mode(),
    "window": Mode(skip_steps=2, steps=3),
    "pt-regions": Mode(pt_regions=True),
    "no-torch-ops": Mode(torch_ops="off"),
    "sampled-torch-ops": Mode(torch_ops="sampled"),
}


@pytest.mark.parametrize("mode", list(MODES), ids=list(MODES))
@pytest.mark.parametrize("script", SCRIPTS, ids=script_id)
def test_strip_gives_back_the_original_byte_for_byte(script, mode):
    original = script.read_bytes()
    copy = instrument_source(original, script.name, MODES[mode]).output
    assert strip_markers(copy, f"{script.stem}_itt.py") == original


def test_strip_keeps_crlf_tabs_and_comments():
    original = b"# top\r\nimport torch\r\n\r\ndef f(loader):\r\n\tfor x in loader:  # batches\r\n\t\t# step\r\n\t\tloss.backward()\r\n"
    copy = instrument_source(original, "t.py").output
    assert copy.count(b"\n") == copy.count(b"\r\n")
    assert b"\r\n\t\t\t\titt.task_begin(_autoitt_domain, \"step\")\r\n" in copy
    assert strip_markers(copy, "t_itt.py") == original


def test_strip_refuses_a_file_autoitt_did_not_write():
    with pytest.raises(SourceError, match="not instrumented by autoitt"):
        strip_markers(b"for x in y:\n    loss.backward()\n", "plain.py")


@pytest.mark.parametrize("added", ["        if x: itt.resume()\n", "        calls = [itt.pause()]\n",
                                   "        print(_autoitt_domain)\n"])
def test_strip_refuses_a_marker_added_by_hand_anywhere(added):
    copy = instrument_source(b"for x in y:\n    loss.backward()\n", "t.py").output.decode()
    edited = copy.replace("            loss.backward()\n", "            loss.backward()\n    " + added, 1)
    with pytest.raises(SourceError, match="edited by hand"):
        strip_markers(edited.encode(), "t_itt.py")


def test_strip_keeps_comments_and_strings_that_merely_name_the_markers():
    source = b"# see itt.resume() and _autoitt_domain\nfor x in y:\n    loss.backward('_autoitt_domain')\n"
    assert strip_markers(instrument_source(source, "t.py").output, "t_itt.py") == source


def test_strip_refuses_a_copy_whose_markers_were_edited_by_hand():
    copy = instrument_source(b"for x in y:\n    loss.backward()\n", "t.py").output.decode()
    edited = copy.replace("        finally:\n            itt.task_end(_autoitt_domain)\n",
                          "        except Exception:\n            raise\n", 1)
    assert edited != copy
    with pytest.raises(SourceError, match="edited by hand") as info:
        strip_markers(edited.encode(), "t_itt.py")
    assert info.value.line is not None


def test_strip_command_prints_the_original(tmp_path):
    original = b"import torch\nfor x in y:\n    loss.backward()\n"
    copy = tmp_path / "t_itt.py"
    copy.write_bytes(instrument_source(original, "t.py").output)
    result = CliRunner().invoke(cli, ["strip", str(copy)])
    assert result.exit_code == 0, result.output
    assert result.stdout_bytes == original


def test_strip_command_writes_in_place_with_a_backup(tmp_path):
    original = b"for x in y:\n    loss.backward()\n"
    copy = tmp_path / "t_itt.py"
    instrumented = instrument_source(original, "t.py").output
    copy.write_bytes(instrumented)
    result = CliRunner().invoke(cli, ["strip", "--in-place", str(copy)])
    assert result.exit_code == 0, result.output
    assert copy.read_bytes() == original
    assert (tmp_path / "t_itt.py.orig").read_bytes() == instrumented


def test_strip_command_on_a_plain_script_exits_2_and_changes_nothing(tmp_path):
    script = tmp_path / "plain.py"
    script.write_bytes(b"print(1)\n")
    result = CliRunner().invoke(cli, ["strip", "--in-place", str(script)])
    assert result.exit_code == 2
    assert "not instrumented by autoitt" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plain.py"]


def test_a_failed_safety_check_writes_nothing_exits_123_and_names_the_loop(tmp_path, monkeypatch):
    import transforms._strip as strip_module

    real = strip_module.strip_module

    def lossy(module, untouched=frozenset()):
        stripped = real(module, untouched)
        return stripped.with_changes(body=stripped.body[:-1])  # drops the user's last statement

    monkeypatch.setattr(strip_module, "strip_module", lossy)
    script = tmp_path / "train.py"
    script.write_bytes(b"import torch\n\nfor x in y:\n    loss.backward()\n")
    result = CliRunner().invoke(cli, ["instrument", str(script)])
    assert result.exit_code == 123
    assert "safety check failed" in result.stderr
    assert "step loop at line 3" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.py"]


def test_safety_check_failure_is_a_rewrite_error(monkeypatch):
    import transforms._strip as strip_module

    monkeypatch.setattr(strip_module, "strip_module", lambda module, untouched=frozenset(): module)
    with pytest.raises(RewriteError, match="safety check failed"):
        instrument_source(b"for x in y:\n    loss.backward()\n", "t.py")


TRICKY = {
    "crlf-elif": b"import torch\r\nfor e in range(3):\r\n    for x in y:\r\n        loss.backward()\r\n"
                 b"    if a:\r\n        pass\r\n    elif b:\r\n        for z in w:\r\n            loss.backward()\r\n"
                 b"    else:\r\n        x = 1\r\n",
    "tabs-and-strings": b"def f():\n\tfor e in range(3):\n\t\tfor x in y:\n\t\t\tloss.backward()\n\t\t\t# c\n"
                        b"\t\t\topt.step()\n\t\tx = (1,\n\t\t  2)\n\t\ts = '''a\n  b'''\n\treturn 1\n",
    "mixed-indent": b"def f():\n  for e in range(3):\n      for x in y:\n         loss.backward()\n  return 1\n# end\n",
    "no-final-newline": b"for e in range(3):\n    for x in y:\n        loss.backward()\n    print(e)",
    "block-footer": b"for x in y:\n    loss.backward()\n    # trailing comment in block\n\n# module footer\n",
    "try-match": b"try:\n    for x in y:\n        loss.backward()\nexcept E:\n    pass\nfinally:\n    for q in y:\n"
                 b"        loss.backward(); opt.step()\nmatch v:\n    case 1:\n        for x in y:\n"
                 b"            loss.backward()\n",
}


@pytest.mark.parametrize("source", [*TRICKY.values(), *(s.read_bytes() for s in SCRIPTS)],
                         ids=[*TRICKY, *(script_id(s) for s in SCRIPTS)])
def test_the_safety_check_generates_the_same_bytes_as_libcst(source):
    # It reuses the copy's code of every statement the stripped tree shares with it; a slip there
    # could pass a copy that does not strip back, so it must equal a whole code generation.
    from transforms import detect, make_plan, parse_source
    from transforms._codegen import generate_reusing
    from transforms._rewrite import rewrite_module
    from transforms._strip import strip_module

    for mode in MODES.values():
        plan = make_plan(detect(parse_source(source, "t.py")), mode, "t.py", "t")
        rewritten = rewrite_module(source, plan)
        copy, shared = rewritten.instrumented, rewritten.shared
        assert shared
        stripped = strip_module(copy, rewritten.untouched)
        assert generate_reusing(stripped, copy, shared) == stripped.bytes == source
        assert generate_reusing(copy, copy, shared) == rewritten.output
        assert generate_reusing(rewritten.original, copy, shared) == source
