"""Naming native addresses offline (:mod:`instrumenter.builtin.symbols`), checked on this very process:
its own memory map and the addresses ctypes gives for functions it has loaded."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import subprocess
from pathlib import Path

import pytest

from instrumenter.builtin.samplefile import Mapping, parse_maps
from instrumenter.builtin.symbols import ElfSymbols, Symbolizer, demangle, elf_symbols


def this_process() -> Symbolizer:
    return Symbolizer(parse_maps(Path("/proc/self/maps").read_text()))


def address(library: ctypes.CDLL, name: str) -> int:
    return ctypes.cast(getattr(library, name), ctypes.c_void_p).value


def test_a_c_function_is_named_with_its_library():
    symbols = this_process()
    start = address(ctypes.pythonapi, "PyList_Append")
    for where in (start, start + 5):  # its first instruction, one inside it
        found = symbols.lookup(where)
        assert found.name == "PyList_Append"
        library = symbols.mapping(start).path
        assert found.library == os.path.basename(library)  # libpython3.11.so.1.0, or python3.11 if static


def test_a_cpp_function_is_named_demangled():
    libstdcxx = ctypes.CDLL(ctypes.util.find_library("stdc++") or "libstdc++.so.6")
    found = this_process().lookup(address(libstdcxx, "_ZNSt6chrono3_V212system_clock3nowEv"))
    assert found.name == "std::chrono::_V2::system_clock::now()"
    assert found.library.startswith("libstdc++.so")


def test_the_offset_is_the_address_in_the_librarys_own_numbering():
    symbols = this_process()
    start = address(ctypes.pythonapi, "PyList_Append")
    elf = elf_symbols(symbols.mapping(start).path)
    found = symbols.lookup(start + 3)
    name, symbol_start = elf.lookup(found.offset)
    assert name == "PyList_Append" and found.offset == symbol_start + 3


def test_code_outside_any_library_file_has_no_name():
    symbols = Symbolizer([Mapping(0x1000, 0x2000, 0, ""), Mapping(0x3000, 0x4000, 0, "[vdso]"),
                          Mapping(0x5000, 0x6000, 0, "/nonexistent/libgone.so")])
    assert symbols.lookup(0x1010) == (None, "[anon]", 0x10, None)  # JIT code
    assert symbols.lookup(0x3010) == (None, "[vdso]", 0x10, None)
    assert symbols.lookup(0x5010) == (None, "libgone.so", 0x10, None)  # a library since removed
    assert symbols.lookup(0x2010) == (None, None, 0x2010, None)  # in no mapping at all
    assert symbols.lookup(0x1010).text() == "[anon]+0x10"


def test_demangling_leaves_c_names_and_garbage_alone():
    assert demangle("_ZN2at6native3addEv") == "at::native::add()"
    assert demangle("_ZN3foo3barEv.cold") == "foo::bar() [clone .cold]"
    assert demangle("PyList_Append") == "PyList_Append"
    assert demangle("_Znot_a_mangled_name") == "_Znot_a_mangled_name"


def test_a_library_is_read_once_per_process():
    libc = next(m.path for m in parse_maps(Path("/proc/self/maps").read_text()) if "libc.so" in m.path)
    assert elf_symbols(libc) is elf_symbols(libc)
    assert len(elf_symbols(libc)) > 1000  # .dynsym at least


def test_a_file_that_is_not_elf_is_no_library(tmp_path):
    (tmp_path / "fake.so").write_bytes(b"not an ELF file at all" * 10)
    assert elf_symbols(str(tmp_path / "fake.so")) is None
    with pytest.raises(ValueError):
        ElfSymbols(str(tmp_path / "fake.so"))


STRIPPED = """
static volatile int sink;
__attribute__((noinline)) static void first(int n) { for (int i = 0; i < n; i++) sink += i; }
__attribute__((noinline)) static void second(int n) { for (int i = 0; i < n; i++) sink -= i; }
void (*table[2])(int) = {first, second};
"""


def test_a_stripped_librarys_function_is_named_once_by_its_start(tmp_path):
    """A library without static symbols (Debian's python3.X binaries): every instruction of one function gets
    one name, the library and the function's start from its unwind table."""
    (tmp_path / "s.c").write_text(STRIPPED)
    library = tmp_path / "libstripped.so"
    subprocess.run(["gcc", "-O1", "-shared", "-fPIC", "-s", "-o", str(library), str(tmp_path / "s.c")], check=True)
    loaded = ctypes.CDLL(str(library))
    table = (ctypes.c_void_p * 2).in_dll(loaded, "table")
    symbols = this_process()
    first, second = symbols.lookup(table[0]), symbols.lookup(table[1])
    assert first.name is None and first.library == "libstripped.so" and first.start == first.offset
    assert symbols.lookup(table[0] + 4).text() == first.text() == f"libstripped.so+{first.offset:#x}"
    assert second.text() != first.text()
