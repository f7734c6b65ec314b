"""The binary contract between the collector (C) and its readers (Python): every record layout, kind, flag,
limit and default they share, defined once, here.

The collector's header ``format.h`` is generated from this module when the package is built
(``setup.py`` loads this file by path and calls :func:`c_header`), with a ``_Static_assert`` for every
struct's size and every field's offset, so a C compiler that lays a struct out otherwise than
:attr:`Layout.struct` reads it fails the build. The readers (:mod:`instrumenter.builtin.trace.tracefile`,
:mod:`instrumenter.builtin.samples.samplefile`, :mod:`instrumenter.builtin.statistics.aggregate`, :mod:`instrumenter.builtin.trace.pairing`)
and the options take their layouts and constants from here. Changing a field, a kind or a limit is one edit;
``tests/test_formats.py`` compiles the header and fails if the two sides disagree.

What the formats *mean* is documented with their readers: the trace file in
:mod:`instrumenter.builtin.trace.tracefile`, the samples file in :mod:`instrumenter.builtin.samples.samplefile`.

Standard library only, and no imports from the package: the build loads this file before the package exists.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from typing import Dict, List, Sequence, Tuple, Union

#: type name -> (struct code, C type, numpy type, alignment)
_TYPES: Dict[str, Tuple[str, str, str, int]] = {
    "u8": ("B", "uint8_t", "u1", 1),
    "u16": ("H", "uint16_t", "<u2", 2),
    "u32": ("I", "uint32_t", "<u4", 4),
    "i32": ("i", "int32_t", "<i4", 4),
    "u64": ("Q", "uint64_t", "<u8", 8),
    "i64": ("q", "int64_t", "<i8", 8),
    "magic": ("8s", "char", "S8", 1),  # 8 bytes, not terminated: char name[8]
}


@dataclass(frozen=True)
class Layout:
    """A fixed-size record both sides read or write: little-endian, every field at its natural alignment and
    no padding anywhere (checked when defined), so that ``struct``'s packed layout and the C compiler's are
    one. ``c_name``: the C typedef (None: read by Python only, as an earlier version's layout is)."""

    c_name: Union[str, None]
    fields: Tuple[Tuple[str, str], ...]
    doc: str

    def __post_init__(self) -> None:
        offset = 0
        for name, kind in self.fields:
            align = _TYPES[kind][3]
            if offset % align:
                raise ValueError(f"{self.c_name}.{name}: at offset {offset}, not {align}-aligned (padding)")
            offset += struct.calcsize("<" + _TYPES[kind][0])
        widest = max(_TYPES[kind][3] for _, kind in self.fields)
        if offset % widest:
            raise ValueError(f"{self.c_name}: {offset} bytes, not a multiple of {widest} (tail padding)")

    @property
    def struct(self) -> struct.Struct:
        return struct.Struct("<" + "".join(_TYPES[kind][0] for _, kind in self.fields))

    @property
    def size(self) -> int:
        return self.struct.size

    @property
    def dtype_fields(self) -> List[Tuple[str, str]]:
        """The fields as a numpy dtype's list (``np.dtype(layout.dtype_fields)``)."""
        return [(name, _TYPES[kind][2]) for name, kind in self.fields]

    def offsets(self) -> Dict[str, int]:
        out, offset = {}, 0
        for name, kind in self.fields:
            out[name] = offset
            offset += struct.calcsize("<" + _TYPES[kind][0])
        return out


def _layout(c_name, doc, *fields: str) -> Layout:
    return Layout(c_name, tuple(tuple(f.split(":")) for f in fields), doc)  # type: ignore[misc]


# --------------------------------------------------------------------------------------------------------------
# The trace file, itt-<id>.bin (instrumenter/builtin/trace/tracefile.py documents it)

TRACE_MAGIC = b"AITTRACE"
TRACE_VERSION = 2
CHUNK_MAGIC = 0x4B4E4843  # "CHNK" little-endian

FILE_HEADER = _layout("file_header", "the file's first bytes",
                      "magic:magic", "version:u32", "header_size:u32", "pid:u32", "ppid:u32", "start_mono_ns:u64",
                      "start_real_ns:u64", "flags:u32", "rank_plus_one:u32", "start_ticks:u64")
FILE_HEADER_V1 = _layout(None, "version 1's header (no start_ticks)",
                         "magic:magic", "version:u32", "header_size:u32", "pid:u32", "ppid:u32", "start_mono_ns:u64",
                         "start_real_ns:u64", "flags:u32", "rank_plus_one:u32")
CHUNK_HEADER = _layout("chunk_header", "ahead of each flushed buffer's records",
                       "magic:u32", "tid:u32", "length:u32", "seq:u32", "ticks:u64", "mono_ns:u64")
CHUNK_HEADER_V1 = _layout(None, "version 1's chunk header (no clock pair)",
                          "magic:u32", "tid:u32", "length:u32", "seq:u32")
RECORD = _layout("record", "one event, counter or name record (a name's bytes follow, padded to 8)",
                 "kind:u8", "flags:u8", "name_len:u16", "aux:u32", "ts:u64", "a:u64", "b:u64")
STATS_HEAD = _layout("stats_head", "a stats record's totals, then (bucket, count) u32 pairs",
                     "count:u64", "sum:u64", "inside:u64", "self:u64", "min:u64", "max:u64", "outer:u64",
                     "unfinished:u64")

#: record kinds
TRACE_KINDS = {
    "BEGIN": 1, "END": 2, "PAUSE": 3, "RESUME": 4, "DETACH": 5, "LIMIT": 6,
    "COUNTERS": 7, "HARDWARE": 8, "HARDWARE2": 9,
    "DOMAIN_NAME": 16, "STRING_NAME": 17, "THREAD_NAME": 18, "STATS": 19, "NOTE": 20,
    # a name record written at exit: how many tasks of that name, on an own domain, began while collection was
    # paused (a = the count): what ran outside collection (outside every training region)
    "PAUSED_BEGINS": 21,
}
#: record flags
RECORD_FLAGS = {
    "SCOPED": 1,        # pause/resume came from __itt_*_scoped; aux = scope
    "CHILD_NS": 2,      # an end past the limit: b = ns its task spent in child tasks not in the file
    "UNFINISHED": 4,    # an end written at exit for a task still open: it ends at the thread's last record
    "COUNTED_FROM": 8,  # a counters record whose ts is when its counting began (its span ends at the end before it)
}
#: file header flags
TRACE_HEADER_FLAGS = {"START_PAUSED": 1, "TSC": 2}

#: durations are counted in buckets of this ratio (the collector past the trace limit, the reader always):
#: bucket of d ns is floor(log(d) / log(HIST_RATIO)) + 1, 0 for d = 0
HIST_RATIO = 1.02
HIST_BUCKETS = int(math.log(2.0 ** 64) / math.log(HIST_RATIO)) + 2
#: past the limit, open tasks a thread's counts follow; deeper ones are not counted (the collector's alone)
AGG_DEPTH = 256

# --------------------------------------------------------------------------------------------------------------
# The samples file, samples-<id>.bin (instrumenter/builtin/samples/samplefile.py documents it)

SAMPLES_MAGIC = b"AITSAMPL"
SAMPLES_VERSION = 2

SAMPLES_HEADER = _layout("s_file_header", "the file's first bytes",
                         "magic:magic", "version:u32", "header_size:u32", "pid:u32", "ppid:u32", "flags:u32",
                         "reserved:u32", "ticks:u64", "mono_ns:u64")
SAMPLES_RECORD_HEAD = _layout("s_record_head", "ahead of every record; the payload is padded to 8",
                              "kind:u32", "length:u32")
SAMPLES_INFO = _layout("s_info", "how the process samples",
                       "hz:u32", "mechanism:u32", "signal:u32", "python:u32", "period_ns:u64", "eval_start:u64",
                       "eval_size:u64", "py_version:u32", "max_native:u32", "max_py:u32", "ring:u32",
                       "eval_cold_start:u64", "eval_cold_size:u64")
SAMPLES_CLOCK = _layout("s_clock", "a (record clock, CLOCK_MONOTONIC) pair", "ticks:u64", "mono_ns:u64")
SAMPLES_CODE_HEAD = _layout("s_code_head", "a code object; its file name, qualified name and line table follow",
                            "code_id:u32", "firstlineno:i32", "filename_len:u32", "qualname_len:u32",
                            "linetable_len:u32", "reserved:u32")
SAMPLES_STACK_HEAD = _layout("s_stack_head", "a stack: n_native native then n_py Python u64 words follow "
                             "(counts: n_native << STACK_NATIVE_SHIFT | n_py)", "stack_id:u32", "counts:u32")
SAMPLES_RAW_TAIL = _layout("s_raw_tail", "after a raw sample's entry, its stack's counts (as a stack's): its words "
                           "follow", "counts:u32", "reserved:u32")
#: a stack's counts word: native frames in the high half, Python frames in the low, and STACK_PY_CUT where the
#: Python walk cut the middle of the stack (PYTHON_WALK's CUT)
STACK_NATIVE_SHIFT = 16
STACK_PY_CUT = 1 << 15
SAMPLES_STATS = _layout("s_counts", "a thread's sample counts so far", "tid:u32", "serial:u32", "taken:u64",
                        "dropped:u64", "handler_ticks:u64")
SAMPLES_LOST = _layout("s_lost", "samples a thread lost while the signal's handler was not the sampler's",
                       "tid:u32", "serial:u32", "lost:u64")
SAMPLES_MAPS_HEAD = _layout("s_maps_head", "part of /proc/self/maps: its text follows", "seq:u32", "last:u32")
SAMPLES_THREAD_HEAD = _layout("s_thread_head", "a thread's name: its bytes follow", "tid:u32", "reserved:u32")
SAMPLE = _layout("s_entry", "one sample of a samples record",
                 "ticks:u64", "tid:u32", "stack:u32", "flags:u32", "weight:u32", "task_domain:u64", "task_name:u64",
                 "autoitt_domain:u64", "autoitt_name:u64")

#: record kinds
SAMPLES_KINDS = {
    "INFO": 1, "REASON": 2, "CLOCK": 3, "THREAD": 4, "CODE": 5, "STACK": 6, "SAMPLES": 7,
    "RAW_SAMPLE": 8, "MAPS": 9, "STATS": 10, "END": 11, "LOST": 12,
}
#: file header flags
SAMPLES_HEADER_FLAGS = {"TSC": 1, "FORKED": 2}
#: the info record's mechanism and python fields
MECHANISMS = {"NONE": 0, "PERF": 1, "TIMER": 2}
PYTHON_FRAMES = {"NONE": 0, "OK": 1, "UNSUPPORTED": 2}
#: sample flags; the native walk's outcome (UWF_*) is shifted by NATIVE_SHIFT, the Python walk's by PYTHON_SHIFT
SAMPLE_FLAGS = {
    "PAUSED": 1, "DETACHED": 2, "INHERITED": 4, "TASKS_OVERFLOW": 8,
    "NO_STACK_MAP": 16,   # rsp was outside the thread's stack: the interrupted instruction only
    "UNLOADING": 32,      # a library was being unloaded: the interrupted instruction only
    "OFF_CPU": 64,        # an off-CPU sample: the thread was blocked; Python frames only, weight in wall time
}
NATIVE_SHIFT = 8
PYTHON_SHIFT = 12
#: outcomes of the native walk (shifted by NATIVE_SHIFT) and of the Python walk (by PYTHON_SHIFT)
NATIVE_WALK = {"TRUNCATED": 1, "RESTARTED": 2, "NOINFO": 4, "FAILED": 8}
#: Python walk: TRUNCATED, the outermost frame was not reached within PYTHON_WALK_LIMIT (the innermost kept);
#: CUT, frames were dropped from the middle: the last PYTHON_OUTER_FRAMES kept are the outermost ones
PYTHON_WALK = {"TRUNCATED": 1, "INVALID": 2, "UNKNOWN_CODE": 4, "CUT": 8}
#: frames a sample keeps, innermost first
MAX_NATIVE_FRAMES = 128
MAX_PYTHON_FRAMES = 64
#: Of a deeper Python stack, a sample keeps the innermost MAX_PYTHON_FRAMES - this and the outermost this many:
#: the script's own frames are the outermost (an ``import`` 30 modules deep is 180 frames of importlib, and the
#: line of the script that imports is the one a user can act on).
PYTHON_OUTER_FRAMES = 16
#: The most Python frames one walk follows to reach the outermost (a 5,000-deep recursion costs no more).
PYTHON_WALK_LIMIT = 2048

# --------------------------------------------------------------------------------------------------------------
# Limits and defaults of the collector's controls (environment variables read at load)

#: AUTOITT_SAMPLE_HZ when unset, and the most it takes (a larger value is this)
SAMPLE_HZ_DEFAULT = 1000
SAMPLE_HZ_MAX = 10000
#: The rate ``autoitt profile`` gives the collector where it samples with CPU-time timers and the user chose
#: none (instrumenter/collector/mechanism.py): a sample (its signal, the handler's walk of the stacks and the
#: caches the step refills after it) costs a PyTorch step 0.07-0.14 ms in a VM (benchmarks/README.md,
#: bench_step_parts.py). Measured inside one process on the conv sample's 0.45 ms step: 9.8 µs a step (2.2 %)
#: at the tick's 250 a second, 3.2-6.7 µs (median 5.5, 1.1 %) at 100, 2.3-4.0 µs (median 3.8, 0.8 %) at 50.
#: 20 ms of CPU a sample is twice VTune's user-mode sampling interval; a minute of a busy thread still gets
#: 3,000 samples.
SAMPLE_HZ_TIMER = 50

# --------------------------------------------------------------------------------------------------------------
# The C header

LAYOUTS: Tuple[Layout, ...] = (FILE_HEADER, CHUNK_HEADER, RECORD, STATS_HEAD, SAMPLES_HEADER, SAMPLES_RECORD_HEAD,
                               SAMPLES_INFO, SAMPLES_CLOCK, SAMPLES_CODE_HEAD, SAMPLES_STACK_HEAD, SAMPLES_RAW_TAIL, SAMPLES_STATS,
                               SAMPLES_LOST, SAMPLES_MAPS_HEAD, SAMPLES_THREAD_HEAD, SAMPLE)


def c_constants() -> Dict[str, Union[int, float, bytes]]:
    """Every constant the header defines, by its C name (``tests/test_formats.py`` compares them with C's)."""
    out: Dict[str, Union[int, float, bytes]] = {
        "FILE_MAGIC": TRACE_MAGIC, "FORMAT_VERSION": TRACE_VERSION, "CHUNK_MAGIC": CHUNK_MAGIC,
        "HIST_RATIO": HIST_RATIO, "HIST_BUCKETS": HIST_BUCKETS, "AGG_DEPTH": AGG_DEPTH,
        "S_MAGIC": SAMPLES_MAGIC, "S_VERSION": SAMPLES_VERSION,
        "S_MAX_NATIVE": MAX_NATIVE_FRAMES, "S_MAX_PY": MAX_PYTHON_FRAMES,
        "S_PY_OUTER": PYTHON_OUTER_FRAMES, "S_PY_WALK_LIMIT": PYTHON_WALK_LIMIT,
        "SF_UW_SHIFT": NATIVE_SHIFT, "SF_PY_SHIFT": PYTHON_SHIFT, "S_STACK_NATIVE_SHIFT": STACK_NATIVE_SHIFT,
        "S_STACK_PY_CUT": STACK_PY_CUT,
        "S_DEFAULT_HZ": SAMPLE_HZ_DEFAULT, "S_MAX_HZ": SAMPLE_HZ_MAX,
    }
    groups: Sequence[Tuple[str, Dict[str, int]]] = (
        ("K_", TRACE_KINDS), ("F_", RECORD_FLAGS), ("F_", TRACE_HEADER_FLAGS), ("SR_", SAMPLES_KINDS),
        ("S_HEADER_", SAMPLES_HEADER_FLAGS), ("SM_", MECHANISMS), ("PYF_", PYTHON_FRAMES), ("SF_", SAMPLE_FLAGS),
        ("UWF_", NATIVE_WALK), ("PYW_", PYTHON_WALK))
    for prefix, values in groups:
        for name, value in values.items():
            out[prefix + name] = value
    return out


#: constants that are bits, versions or magic numbers: unsigned in C, as the fields they go into; kinds,
#: counts and rates are plain ints there (compared with ints without a sign-compare warning)
_UNSIGNED = ("F_", "SF_", "S_HEADER_", "UWF_", "PYW_", "FORMAT_VERSION", "S_VERSION", "CHUNK_MAGIC")


def _c_value(name: str, value: Union[int, float, bytes]) -> str:
    if isinstance(value, bytes):
        return '"' + value.decode("ascii") + '"'
    if isinstance(value, float):
        return repr(value)
    text = f"{value:#x}" if value >= 0x10000 else str(value)
    return text + "u" if name.startswith(_UNSIGNED) and not name.endswith("_SHIFT") else text


def digest() -> str:
    """A short hash of the whole contract. ``format.h`` defines it as ``FORMAT_DIGEST`` and each library built
    with the header keeps it in its bytes (``AUTOITT_FORMAT_DIGEST``): a library built from another version
    of this file does not hold this one's."""
    import hashlib  # here: the build and the tests ask for it, the command line (which reads the limits) does not

    body = repr((sorted((k, repr(v)) for k, v in c_constants().items()),
                 [(layout.c_name, layout.fields) for layout in LAYOUTS]))
    return "autoitt-format-" + hashlib.sha256(body.encode()).hexdigest()[:16]


def c_header() -> str:
    """``format.h``: the constants as ``#define``s, the layouts as typedefs, each checked by ``_Static_assert``."""
    lines = [
        "/* Generated from instrumenter/collector/formats.py by setup.py: edit that file, not this one. */",
        "#ifndef AUTOITT_FORMAT_H",
        "#define AUTOITT_FORMAT_H",
        "#include <stddef.h>",
        "#include <stdint.h>",
        "",
        f'#define FORMAT_DIGEST "{digest()}"',
        "/* in one unit of each library: the digest among its bytes, for tests/test_formats.py */",
        "#define AUTOITT_FORMAT_DIGEST \\",
        "    __attribute__((used)) static const char autoitt_format_digest[] = FORMAT_DIGEST",
        "",
    ]
    for name, value in c_constants().items():
        lines.append(f"#define {name} {_c_value(name, value)}")
    for layout in LAYOUTS:
        lines += ["", f"/* {layout.doc} */", "typedef struct " + layout.c_name + " {"]
        for name, kind in layout.fields:
            lines.append(f"    char {name}[8];" if kind == "magic" else f"    {_TYPES[kind][1]} {name};")
        lines.append("} " + layout.c_name + ";")
        lines.append(f'_Static_assert(sizeof({layout.c_name}) == {layout.size}, "{layout.c_name}: size");')
        for name, offset in layout.offsets().items():
            lines.append(f'_Static_assert(offsetof({layout.c_name}, {name}) == {offset}, '
                         f'"{layout.c_name}.{name}: offset");')
    lines += ["", "#endif", ""]
    return "\n".join(lines)


if __name__ == "__main__":  # python instrumenter/collector/formats.py > format.h
    print(c_header(), end="")
