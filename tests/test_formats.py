"""The binary contract between the collector and its readers (``instrumenter/collector/formats.py``): defined
once, laid out alike by the C compiler and by Python, and the one the built libraries were built from."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from instrumenter.builtin.statistics import aggregate
from instrumenter.builtin.samples import samplefile
from instrumenter.builtin.trace import tracefile
from instrumenter.collector import formats
from instrumenter.profile.options import DEFAULT_SAMPLE_HZ, MAX_SAMPLE_HZ
from tests.conftest import ROOT

C_SOURCES = sorted(p for p in (ROOT / "instrumenter").rglob("*") if p.suffix in (".c", ".h"))


def _what_c_sees(tmp_path) -> dict:
    """Every layout's size and field offsets, and every constant, as a C program built with format.h prints them."""
    (tmp_path / "format.h").write_text(formats.c_header())
    prints = []
    for layout in formats.LAYOUTS:
        prints.append(f'printf("\\"%s\\": %zu,\\n", "sizeof {layout.c_name}", sizeof({layout.c_name}));')
        for name in layout.offsets():
            prints.append(f'printf("\\"%s\\": %zu,\\n", "{layout.c_name}.{name}", offsetof({layout.c_name}, {name}));')
    for name, value in formats.c_constants().items():
        if isinstance(value, bytes):
            prints.append(f'printf("\\"{name}\\": \\"%s\\",\\n", {name});')
        elif isinstance(value, float):
            prints.append(f'printf("\\"{name}\\": %.17g,\\n", (double){name});')
        else:
            prints.append(f'printf("\\"{name}\\": %llu,\\n", (unsigned long long){name});')
    (tmp_path / "see.c").write_text('#include <stdio.h>\n#include "format.h"\nint main(void)\n{\n    printf("{\\n");\n    '
                                    + "\n    ".join(prints) + '\n    printf("\\"end\\": 0}\\n");\n    return 0;\n}\n')
    compiler = shutil.which("cc") or shutil.which("gcc")
    subprocess.run([compiler, "-std=c11", "-Wall", "-Wextra", "-Werror", "-o", str(tmp_path / "see"),
                    str(tmp_path / "see.c")], check=True, capture_output=True, text=True)
    return json.loads(subprocess.run([str(tmp_path / "see")], check=True, capture_output=True, text=True).stdout)


def test_the_c_compiler_lays_every_record_out_as_the_readers_read_it(tmp_path):
    seen = _what_c_sees(tmp_path)
    for layout in formats.LAYOUTS:
        assert seen[f"sizeof {layout.c_name}"] == layout.size, layout.c_name
        for name, offset in layout.offsets().items():
            assert seen[f"{layout.c_name}.{name}"] == offset, f"{layout.c_name}.{name}"


def test_the_c_side_sees_every_constant_the_python_side_defines(tmp_path):
    seen = _what_c_sees(tmp_path)
    for name, value in formats.c_constants().items():
        assert seen[name] == (value.decode() if isinstance(value, bytes) else value), name


def test_the_readers_and_options_take_their_layouts_and_limits_from_the_contract():
    assert (tracefile._HEADER.size, tracefile._CHUNK.size, tracefile.RECORD.itemsize) == (56, 32, 32)
    assert tracefile._RECORD.size == formats.RECORD.size and tracefile._STATS_HEAD.size == formats.STATS_HEAD.size
    assert samplefile.SAMPLE.itemsize == formats.SAMPLE.size == 56
    assert samplefile._INFO.size == formats.SAMPLES_INFO.size
    assert (aggregate.RATIO, aggregate.BUCKETS) == (formats.HIST_RATIO, formats.HIST_BUCKETS) == (1.02, 2242)
    assert (DEFAULT_SAMPLE_HZ, MAX_SAMPLE_HZ) == (formats.SAMPLE_HZ_DEFAULT, formats.SAMPLE_HZ_MAX)


def _defines(name: str, text: str) -> bool:
    """Whether C source ``text`` defines ``name`` (a macro, an enumerator or a typedef'd struct)."""
    return bool(re.search(rf"#\s*define\s+{name}\b|[{{,]\s*{name}\s*=|}}\s*{name}\s*;", text))


def test_no_c_source_keeps_its_own_copy_of_the_contract():
    names = [*formats.c_constants(), *(layout.c_name for layout in formats.LAYOUTS)]
    copies = [(path.name, name) for path in C_SOURCES for name in names if _defines(name, path.read_text())]
    assert copies == []


def test_a_copy_in_c_source_would_be_found():
    assert _defines("K_BEGIN", "enum { K_BEGIN = 1, K_END = 2 };")
    assert _defines("K_END", "enum { K_BEGIN = 1, K_END = 2 };")
    assert _defines("SF_PAUSED", "#define SF_PAUSED 1u")
    assert _defines("record", "typedef struct record { uint8_t kind; } record;")
    assert not _defines("K_BEGIN", "if (r->kind == K_BEGIN) return;")


@pytest.mark.parametrize("library", ["instrumenter.collector._collector", "instrumenter.builtin.trace._pairing"])
def test_each_built_library_was_built_from_this_contract(library):
    """A library built from another version of formats.py (a stale build) holds another digest."""
    path = Path(importlib.util.find_spec(library).origin)
    built_from_this = formats.digest().encode() in path.read_bytes()
    assert built_from_this, f"{path.name} was built from another formats.py: rebuild it (pip install -e .)"


def test_a_layout_with_padding_is_refused_where_it_is_defined():
    with pytest.raises(ValueError, match="aligned"):
        formats.Layout("bad", (("kind", "u8"), ("ts", "u64")), "a u64 after a u8 would be padded in C")
    with pytest.raises(ValueError, match="tail padding"):
        formats.Layout("bad", (("ts", "u64"), ("kind", "u32")), "a struct of 12 bytes is 16 in C")
    assert formats.Layout("good", (("kind", "u32"), ("aux", "u32"), ("ts", "u64")), "no padding").size == 16
