"""Name native addresses of a samples file offline (:mod:`.samplefile`): function, library, offset.

An address is looked up in the process's executable mappings (the file's map
records), turned into the library's own virtual address (the ELF ``PT_LOAD``
segment holding that file offset) and found among the library's function
symbols (``.symtab`` when the library has one, and ``.dynsym``), by binary
search over a sorted numpy array.  The ELF reader is a small one here (struct
and numpy over an ``mmap`` of the file; no dependency).  C++ names are
demangled with libstdc++'s ``__cxa_demangle`` (through ctypes; mangled names
stay as they are where it is missing), and the names it refuses made readable
(:func:`readable`). A private extension module (``_C...so``) is named with its
package (:func:`library_name`).

Each library's table is built once per process and kept (:func:`elf_symbols`
caches by path, size and modification time); libtorch_cpu.so, the largest
(434 MB, 0.5 M symbols in ``.symtab``), takes about a second: see
``benchmarks/README.md``.

Addresses are lookup addresses as :attr:`.samplefile.SampleFile.stacks` gives
them (a return address minus one, the interrupted instruction's own).  A JIT
frame (an anonymous executable mapping, e.g. oneDNN's kernels) has no library
file: it gets ``name`` None and ``library`` ``"[anon]"``; an address in no
mapping gets ``library`` None.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
import re
import struct
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from .samplefile import Mapping

__all__ = ["NativeSymbol", "ElfSymbols", "Symbolizer", "elf_symbols", "demangle", "library_name", "readable"]


class NativeSymbol(NamedTuple):
    """What an address is: ``name`` (demangled; None where no symbol covers it), ``library`` (the file's
    basename; ``"[anon]"`` for anonymous code, None outside every mapping), ``offset`` (the address in the
    library's own virtual addresses, what ``addr2line -e library`` takes; the process address when there is
    no library) and, where no symbol covers it, ``start``: the start of the function holding it as the
    library's unwind table (``.eh_frame_hdr``) gives it, if it does.  So a stripped library's function
    (Debian's interpreters keep no static symbols) is one function, ``python3.14+0x599660``, not one name
    per sampled instruction."""

    name: Optional[str]
    library: Optional[str]
    offset: int
    start: Optional[int] = None
    #: a PLT stub: the jump from its library to another's function, no function of its own
    plt: bool = False

    def text(self) -> str:
        if self.name:
            return self.name
        if self.library:
            return f"{self.library}+{self.offset if self.start is None else self.start:#x}"
        return f"{self.offset:#x}"


_SYM = np.dtype([("name", "<u4"), ("info", "u1"), ("other", "u1"), ("shndx", "<u2"), ("value", "<u8"),
                 ("size", "<u8")])
_EHDR = struct.Struct("<16sHHIQQQIHHHHHH")
_PHDR = struct.Struct("<IIQQQQQQ")
_SHDR = struct.Struct("<IIQQQQIIQQ")
SHT_SYMTAB, SHT_DYNSYM, PT_LOAD, PT_GNU_EH_FRAME = 2, 11, 1, 0x6474E550
#: .eh_frame_hdr's encodings (DWARF's DW_EH_PE_*): the table is datarel sdata4 pairs in every toolchain's output
_EH_SIZES = {0x02: 2, 0x03: 4, 0x04: 8, 0x0A: 2, 0x0B: 4, 0x0C: 8}
_EH_TABLE_DATAREL_SDATA4 = 0x3B
STT_FUNC, STT_GNU_IFUNC = 2, 10


class ElfSymbols:
    """The function symbols of one ELF file (x86-64, little-endian, 64-bit)."""

    def __init__(self, path: str) -> None:
        self.path = path
        with open(path, "rb") as f:
            self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        data = self._map
        ident, _type, _machine, _version, _entry, phoff, shoff, _flags, _ehsize, phentsize, phnum, shentsize, \
            shnum, _shstrndx = _EHDR.unpack_from(data, 0)
        if ident[:4] != b"\x7fELF" or ident[4] != 2 or ident[5] != 1:
            raise ValueError(f"{path}: not a 64-bit little-endian ELF file")
        #: PT_LOAD segments: (file offset, file size, virtual address)
        self.segments: List[Tuple[int, int, int]] = []
        #: the functions' starts from the unwind table, sorted (empty where there is none)
        self.function_starts = np.zeros(0, np.uint64)
        for i in range(phnum):
            p_type, _pflags, offset, vaddr, _paddr, filesz, _memsz, _align = _PHDR.unpack_from(data, phoff + i * phentsize)
            if p_type == PT_LOAD:
                self.segments.append((offset, filesz, vaddr))
            elif p_type == PT_GNU_EH_FRAME:
                self.function_starts = _function_starts(data, offset, filesz, vaddr)
        sections = [_SHDR.unpack_from(data, shoff + i * shentsize) for i in range(shnum)] if shoff else []
        named = _section_names(data, sections, _shstrndx)
        #: the PLT's stubs (``.plt``, ``.plt.sec``, ``.plt.got``): (start, end) virtual addresses
        self.plt = [(sh[3], sh[3] + sh[5]) for name, sh in named.items() if name in _PLT_SECTIONS]
        tables = _function_tables(data, sections)
        if not any(kind == SHT_SYMTAB for kind, _syms, _strtab in tables):
            # a stripped library: its static functions from MiniDebugInfo or an installed debug file
            tables += _separate_symbols(data, named)
        values, sizes, names, table_ids, binds = [], [], [], [], []
        self._strtabs: List[Tuple[object, int, int]] = []
        for _kind, syms, strtab in tables:
            self._strtabs.append(strtab)
            values.append(syms["value"])
            sizes.append(syms["size"])
            names.append(syms["name"])
            table_ids.append(np.full(len(syms), len(self._strtabs) - 1, np.uint8))
            binds.append(syms["info"] >> 4)
        if values:
            value = np.concatenate(values)
            order = np.lexsort((-(np.concatenate(binds).astype(np.int16)), value))  # by address, global first
            value = value[order]
            first = np.ones(len(value), bool)
            first[1:] = value[1:] != value[:-1]
            pick = order[first]
            self.values = value[first]
            self.sizes = np.concatenate(sizes)[pick]
            self._names = np.concatenate(names)[pick]
            self._tables = np.concatenate(table_ids)[pick]
        else:
            self.values = self.sizes = np.zeros(0, np.uint64)
            self._names = np.zeros(0, np.uint32)
            self._tables = np.zeros(0, np.uint8)
        self._name_cache: Dict[int, str] = {}

    def __len__(self) -> int:
        return len(self.values)

    def vaddr(self, file_offset: int) -> Optional[int]:
        """The virtual address of a file offset (in a PT_LOAD segment), or None."""
        for offset, filesz, vaddr in self.segments:
            if offset <= file_offset < offset + filesz:
                return vaddr + file_offset - offset
        return None

    def lookup(self, vaddr: int) -> Optional[Tuple[str, int]]:
        """The (mangled) name and start of the function holding ``vaddr``, or None."""
        i = int(np.searchsorted(self.values, np.uint64(vaddr), side="right")) - 1
        if i < 0:
            return None
        start, size = int(self.values[i]), int(self.sizes[i])
        if size and vaddr >= start + size:
            return None
        if not size and (self.function_start(vaddr) or 0) > start:
            return None  # a marker with no size (_init, _fini): the unwind table says another function begins
        name = self._name_cache.get(i)
        if name is None:
            buffer, table_offset, table_size = self._strtabs[int(self._tables[i])]
            begin = table_offset + int(self._names[i])
            end = buffer.find(b"\0", begin, table_offset + table_size)
            name = self._name_cache[i] = bytes(buffer[begin:end if end >= 0 else begin]).decode("utf-8", "replace")
        return name, start

    def in_plt(self, vaddr: int) -> bool:
        """Whether ``vaddr`` is in a PLT stub (the jump to another library's function)."""
        return any(start <= vaddr < end for start, end in self.plt)


    def function_start(self, vaddr: int) -> Optional[int]:
        """The start of the function holding ``vaddr`` by the unwind table (the last FDE starting at or before
        it), or None."""
        i = int(np.searchsorted(self.function_starts, np.uint64(vaddr), side="right")) - 1
        return int(self.function_starts[i]) if i >= 0 else None


_PLT_SECTIONS = (".plt", ".plt.sec", ".plt.got")
#: Where distributions install separate debug files, by the library's build ID (``.note.gnu.build-id``).
DEBUG_DIRECTORY = "/usr/lib/debug"
NT_GNU_BUILD_ID = 3


def _section_names(data, sections, shstrndx: int) -> Dict[str, tuple]:
    """Section header by name (the first of a name)."""
    if not sections or shstrndx >= len(sections):
        return {}
    table_offset, table_size = sections[shstrndx][4], sections[shstrndx][5]
    named = {}
    for sh in sections:
        end = data.find(b"\0", table_offset + sh[0], table_offset + table_size)
        name = bytes(data[table_offset + sh[0]:end if end >= 0 else table_offset + sh[0]]).decode("latin-1")
        named.setdefault(name, sh)
    return named


def _function_tables(data, sections) -> List[Tuple[int, np.ndarray, Tuple[object, int, int]]]:
    """Each symbol table of an ELF image (``.symtab``, ``.dynsym``): its kind, its function symbols, and where
    its names are (buffer, offset, size)."""
    tables = []
    for _name, sh_type, _f, _addr, sh_offset, sh_size, sh_link, _info, _align, sh_entsize in sections:
        if sh_type not in (SHT_SYMTAB, SHT_DYNSYM) or sh_entsize != _SYM.itemsize or sh_link >= len(sections):
            continue
        syms = np.frombuffer(data, _SYM, count=sh_size // _SYM.itemsize, offset=sh_offset)
        kind = syms["info"] & 0xF
        keep = ((kind == STT_FUNC) | (kind == STT_GNU_IFUNC)) & (syms["shndx"] != 0) & (syms["value"] != 0)
        strtab = sections[sh_link]
        tables.append((sh_type, syms[keep], (data, strtab[4], strtab[5])))
    return tables


def _separate_symbols(data, named: Dict[str, tuple]) -> List[Tuple[int, np.ndarray, Tuple[object, int, int]]]:
    """The ``.symtab`` a stripped library keeps elsewhere: in its ``.gnu_debugdata`` section (MiniDebugInfo: an
    xz-compressed ELF holding it, as Fedora, RHEL and manylinux builds ship, PyTorch's libgomp among them), or
    in a debug file installed under :data:`DEBUG_DIRECTORY` by its build ID (Debian's ``-dbgsym`` packages).
    Their addresses are the library's own."""
    compressed = named.get(".gnu_debugdata")
    if compressed is not None:
        import lzma

        try:
            image = lzma.decompress(bytes(data[compressed[4]:compressed[4] + compressed[5]]))
            return [table for table in _image_tables(image) if table[0] == SHT_SYMTAB]
        except (lzma.LZMAError, ValueError, struct.error):
            pass
    note = named.get(".note.gnu.build-id")
    if note is not None:
        namesz, descsz, kind = struct.unpack_from("<III", data, note[4])
        if kind == NT_GNU_BUILD_ID and 0 < descsz <= 64:
            start = note[4] + 12 + (namesz + 3) // 4 * 4
            build_id = bytes(data[start:start + descsz]).hex()
            path = os.path.join(DEBUG_DIRECTORY, ".build-id", build_id[:2], build_id[2:] + ".debug")
            try:
                with open(path, "rb") as f:
                    image = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
                return [table for table in _image_tables(image) if table[0] == SHT_SYMTAB]
            except (OSError, ValueError, struct.error):
                pass
    return []


def _image_tables(image) -> List[Tuple[int, np.ndarray, Tuple[object, int, int]]]:
    """The symbol tables of another ELF image (a debug file, MiniDebugInfo's)."""
    ident, *_rest = _EHDR.unpack_from(image, 0)
    if ident[:4] != b"\x7fELF" or ident[4] != 2 or ident[5] != 1:
        raise ValueError("not a 64-bit little-endian ELF image")
    fields = _EHDR.unpack_from(image, 0)
    shoff, shentsize, shnum = fields[6], fields[11], fields[12]
    return _function_tables(image, [_SHDR.unpack_from(image, shoff + i * shentsize) for i in range(shnum)])


def _function_starts(data, offset: int, size: int, vaddr: int) -> np.ndarray:
    """The sorted FDE start addresses of an ``.eh_frame_hdr`` at file ``offset`` (its virtual address ``vaddr``):
    its binary search table.  Empty for a table in another encoding than the usual one."""
    if size < 12:
        return np.zeros(0, np.uint64)
    version, pointer_encoding, count_encoding, table_encoding = data[offset:offset + 4]
    if version != 1 or table_encoding != _EH_TABLE_DATAREL_SDATA4 or pointer_encoding & 0x0F not in _EH_SIZES \
            or count_encoding not in (0x03, 0x0B, 0x04, 0x0C):
        return np.zeros(0, np.uint64)
    at = offset + 4 + _EH_SIZES[pointer_encoding & 0x0F]
    count_size = _EH_SIZES[count_encoding]
    (count,) = struct.unpack_from("<I" if count_size == 4 else "<Q", data, at)
    at += count_size
    if count <= 0 or at + 8 * count > offset + size:
        return np.zeros(0, np.uint64)
    table = np.frombuffer(data, "<i4", count=2 * count, offset=at)[0::2]
    return np.sort((table.astype(np.int64) + vaddr).astype(np.uint64))


_ELF_CACHE: Dict[Tuple[str, int, int], Optional[ElfSymbols]] = {}


def elf_symbols(path: str) -> Optional[ElfSymbols]:
    """The symbols of the ELF file at ``path``, read once per process (None if it cannot be read)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    key = (path, st.st_size, st.st_mtime_ns)
    if key not in _ELF_CACHE:
        try:
            _ELF_CACHE[key] = ElfSymbols(path)
        except (OSError, ValueError, struct.error):
            _ELF_CACHE[key] = None
    return _ELF_CACHE[key]


_DEMANGLED: Dict[str, str] = {}
_demangler = None


def _load_demangler():
    global _demangler
    if _demangler is None:
        try:
            lib = ctypes.CDLL(ctypes.util.find_library("stdc++") or "libstdc++.so.6")
            libc = ctypes.CDLL(None)
            demangle_fn = lib.__cxa_demangle
            demangle_fn.restype = ctypes.c_void_p
            demangle_fn.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
            libc.free.argtypes = [ctypes.c_void_p]
            _demangler = (demangle_fn, libc.free)
        except (OSError, AttributeError):
            _demangler = False
    return _demangler


def demangle(name: str) -> str:
    """A C++ symbol's demangled name (``__cxa_demangle``); where that fails, :func:`readable`'s."""
    if not name.startswith("_Z"):
        return name
    found = _DEMANGLED.get(name)
    if found is None:
        found = name
        tools = _load_demangler()
        if tools:
            demangle_fn, free = tools
            status = ctypes.c_int(0)
            raw = demangle_fn(name.encode(), None, None, ctypes.byref(status))
            if raw:
                try:
                    if status.value == 0:
                        found = ctypes.string_at(raw).decode("utf-8", "replace")
                finally:
                    free(raw)
        if found == name:
            found = readable(name)
        _DEMANGLED[name] = found
    return found


#: a source name, ``<length><identifier>``: its digits not those of a substitution or template parameter
#: (``S4_``, ``T0_``) nor of a longer number
_SOURCE_NAME = re.compile(r"(?<![0-9ST])([1-9]\d*)([A-Za-z_])")


def readable(name: str) -> str:
    """A mangled name GNU's demangler refuses, made readable: GCC writes some it cannot read back (a lambda
    inside a function template, in PyTorch's OpenMP regions: ``_ZN2at8internal15invoke_parallelIZNS_12parallel_
    forIZ11compute_cpuIiE...._omp_fn.0``; ``c++filt`` gives up on it too). Its leading nested name up to the
    first template arguments, then the other names it mentions, and its clone suffix:
    ``at::internal::invoke_parallel<parallel_for, compute_cpu, …> [clone ._omp_fn.0] (partly demangled)``.
    A name with no source name in it is returned as it is."""
    body, dot, suffix = name.partition(".")
    names, at, first_template = [], 0, None
    while True:
        found = _SOURCE_NAME.search(body, at)
        if found is None:
            break
        length, start = int(found.group(1)), found.start(2)
        identifier = body[start:start + length]
        if len(identifier) < length or not re.fullmatch(r"[A-Za-z_]\w*", identifier):
            at = found.end()
            continue
        if first_template is None and "I" in body[at:found.start()]:
            first_template = len(names)
        names.append(identifier)
        at = start + length
    if not names:
        return name
    head = names[:first_template] if first_template else names[:1]
    inner = [n for n in dict.fromkeys(names[len(head):]) if n not in head]
    text = "::".join(head) + (f"<{', '.join(inner)}, …>" if inner else "")
    return text + (f" [clone {dot}{suffix}]" if dot else "") + " (partly demangled)"


def library_name(path: str) -> str:
    """How a library is named in the hotspots: its file name, but a private extension module's (``_C``,
    ``_pywrap_tensorflow_internal``: a name many packages share) with its package's folder before it,
    ``optree/_C.cpython-311-x86_64-linux-gnu.so``: which package is what the reader wants to know."""
    name = os.path.basename(path)
    package = os.path.basename(os.path.dirname(path))
    return f"{package}/{name}" if name.startswith("_") and package else name


class Symbolizer:
    """Names addresses of one process, from its executable mappings (a samples file's latest snapshot, or
    any list of :class:`~.samplefile.Mapping`); answers are cached per address."""

    def __init__(self, maps: Sequence[Mapping]) -> None:
        self.maps = sorted(maps, key=lambda m: m.start)
        self._starts = np.array([m.start for m in self.maps], np.uint64)
        self._cache: Dict[int, NativeSymbol] = {}

    @classmethod
    def for_file(cls, sample_file) -> "Symbolizer":
        """For a :class:`~.samplefile.SampleFile`: its map snapshots merged, later ones winning."""
        merged: Dict[Tuple[int, int], Mapping] = {}
        for snapshot in sample_file.maps:
            for m in snapshot:
                merged[(m.start, m.end)] = m
        return cls(list(merged.values()))

    def mapping(self, address: int) -> Optional[Mapping]:
        i = int(np.searchsorted(self._starts, np.uint64(address), side="right")) - 1
        if i >= 0 and address < self.maps[i].end:
            return self.maps[i]
        return None

    def lookup(self, address: int) -> NativeSymbol:
        found = self._cache.get(address)
        if found is None:
            found = self._cache[address] = self._lookup(address)
        return found

    def _lookup(self, address: int) -> NativeSymbol:
        m = self.mapping(address)
        if m is None:
            return NativeSymbol(None, None, address)
        if not m.path.startswith("/"):
            return NativeSymbol(None, m.path or "[anon]", address - m.start)
        library = library_name(m.path)
        elf = elf_symbols(m.path)
        file_offset = address - m.start + m.offset
        vaddr = elf.vaddr(file_offset) if elf is not None else None
        if vaddr is None:
            return NativeSymbol(None, library, file_offset)
        if elf.in_plt(vaddr):
            return NativeSymbol(None, library, vaddr, plt=True)
        hit = elf.lookup(vaddr)
        if hit:
            return NativeSymbol(demangle(hit[0]), library, vaddr)
        return NativeSymbol(None, library, vaddr, elf.function_start(vaddr))
