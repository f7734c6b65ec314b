"""Naming native addresses offline (:mod:`instrumenter.builtin.samples.symbols`), checked on this very process:
its own memory map and the addresses ctypes gives for functions it has loaded."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import subprocess
from pathlib import Path

import pytest

from instrumenter.builtin.samples.samplefile import Mapping, parse_maps
from instrumenter.builtin.samples.symbols import ElfSymbols, Symbolizer, demangle, elf_symbols, library_name


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
    assert symbols.lookup(0x1010) == (None, "[anon]", 0x10, None, False)  # JIT code
    assert symbols.lookup(0x3010) == (None, "[vdso]", 0x10, None, False)
    assert symbols.lookup(0x5010) == (None, "libgone.so", 0x10, None, False)  # a library since removed
    assert symbols.lookup(0x2010) == (None, None, 0x2010, None, False)  # in no mapping at all
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


#: A library with a function of its own (static: in .symtab only) that its exported one calls.
HIDDEN = """
__attribute__((noinline)) static int hidden_work(int x) { int s = 0; for (int i = 0; i < x; i++) s += i * x; return s; }
int api(int x) { return hidden_work(x) + 1; }
"""


@pytest.fixture
def stripped_library(tmp_path):
    """(a stripped library, its separate debug file, the address of its static function hidden_work)."""
    (tmp_path / "hidden.c").write_text(HIDDEN)
    library, debug = tmp_path / "libhidden.so", tmp_path / "libhidden.debug"
    subprocess.run(["gcc", "-shared", "-fPIC", "-O1", "-Wl,--build-id", "-o", str(library), str(tmp_path / "hidden.c")],
                   check=True)
    subprocess.run(["objcopy", "--only-keep-debug", str(library), str(debug)], check=True)
    hidden = ElfSymbols(str(library))
    start = next(int(v) for v, i in zip(hidden.values, range(len(hidden))) if hidden.lookup(int(v))[0] == "hidden_work")
    subprocess.run(["strip", "--strip-all", str(library)], check=True)
    return library, debug, start


def test_a_stripped_librarys_static_function_has_no_name_without_its_symbols(stripped_library, monkeypatch, tmp_path):
    library, _debug, start = stripped_library
    monkeypatch.setattr("instrumenter.builtin.samples.symbols.DEBUG_DIRECTORY", str(tmp_path / "none"))
    assert ElfSymbols(str(library)).lookup(start + 2) is None


def test_a_stripped_librarys_static_functions_are_named_from_its_minidebuginfo(stripped_library, monkeypatch, tmp_path):
    # .gnu_debugdata: the symbol table as an xz-compressed ELF inside the library (Fedora, manylinux: torch's libgomp)
    import lzma

    library, debug, start = stripped_library
    monkeypatch.setattr("instrumenter.builtin.samples.symbols.DEBUG_DIRECTORY", str(tmp_path / "none"))
    (tmp_path / "mini.xz").write_bytes(lzma.compress(debug.read_bytes(), format=lzma.FORMAT_XZ))
    subprocess.run(["objcopy", "--add-section", f".gnu_debugdata={tmp_path / 'mini.xz'}", str(library)], check=True)
    assert ElfSymbols(str(library)).lookup(start + 2) == ("hidden_work", start)


def test_a_stripped_librarys_static_functions_are_named_from_its_debug_file_by_build_id(stripped_library,
                                                                                          monkeypatch, tmp_path):
    # Debian's -dbgsym packages: /usr/lib/debug/.build-id/ab/cdef....debug
    library, debug, start = stripped_library
    notes = subprocess.run(["readelf", "-n", str(library)], capture_output=True, text=True, check=True).stdout
    build_id = notes.split("Build ID:")[1].split()[0]
    folder = tmp_path / "debug" / ".build-id" / build_id[:2]
    folder.mkdir(parents=True)
    debug.rename(folder / f"{build_id[2:]}.debug")
    monkeypatch.setattr("instrumenter.builtin.samples.symbols.DEBUG_DIRECTORY", str(tmp_path / "debug"))
    assert ElfSymbols(str(library)).lookup(start + 2) == ("hidden_work", start)


def test_an_address_in_a_plt_stub_is_a_stub_whose_time_is_its_callers():
    from instrumenter.builtin.samples.stacks import _native

    symbols = this_process()
    library = symbols.mapping(address(ctypes.pythonapi, "PyList_Append")).path
    elf = elf_symbols(library)
    if not elf.plt:
        pytest.skip(f"{library} has no PLT")
    plt_start = elf.plt[0][0]
    mapping = next(m for m in symbols.maps if m.path == library and elf.vaddr(m.offset) is not None
                   and elf.vaddr(m.offset) <= plt_start < elf.vaddr(m.offset) + m.end - m.start)
    process_address = mapping.start + plt_start - elf.vaddr(mapping.offset) + 4
    assert symbols.lookup(process_address).plt
    assert _native(symbols, process_address)[0] is None  # dropped from the stack: its caller holds the sample


def test_a_name_gnus_demangler_refuses_is_made_readable_with_its_clone_suffix():
    # GCC writes it for a lambda inside a function template in an OpenMP region; c++filt refuses it too
    name = ("_ZN2at8internal15invoke_parallelIZNS_12parallel_forIZ11compute_cpuIiEvPKT_PKlPS4_llEUlllE_EEvlllRS5_"
            "EUlllE_EEvlllSB_._omp_fn.0")
    assert demangle(name) == ("at::internal::invoke_parallel<parallel_for, compute_cpu, …> [clone ._omp_fn.0] "
                              "(partly demangled)")


def test_a_name_the_demangler_reads_is_its_own():
    assert demangle("_ZN2at8internal3fooEv._omp_fn.0") == "at::internal::foo() [clone ._omp_fn.0]"


def test_a_private_extension_module_is_named_with_its_package():
    assert library_name("/venv/lib/python3.11/site-packages/optree/_C.cpython-311-x86_64-linux-gnu.so") == \
        "optree/_C.cpython-311-x86_64-linux-gnu.so"
    assert library_name("/venv/lib/python3.11/site-packages/torch/lib/libtorch_cpu.so") == "libtorch_cpu.so"
