"""The samples file reader (:mod:`instrumenter.builtin.samples.samplefile`) against its own format documentation.

Files here are written by a small writer following the module docstring, record by record, so
each test states one rule of the format; tests/test_sampling.py reads files the real collector
wrote.
"""

from __future__ import annotations

import json
import struct
import sys
import textwrap
import types
from pathlib import Path
from typing import List, Sequence, Tuple

import pytest

from instrumenter.builtin.samples import samplefile
from instrumenter.builtin.samples.samplefile import (Code, SampleFormatError, line_ranges, merge_frames, parse_maps,
                                             read_sample_dir, read_sample_file)

TID = 4242
EVAL = 0x7000_0000_1000  # in libpython's mapping below: where _PyEval_EvalFrameDefault is, in these files: [EVAL, EVAL + 0x1000)
MAPS = ("555500000000-555500001000 r-xp 00001000 08:01 11 /usr/bin/python3.11\n"
        "7f0000000000-7f0000800000 r-xp 00000000 08:01 12 /usr/lib/libtorch_cpu.so\n"
        "700000000000-700000100000 r-xp 00000000 08:01 13 /usr/lib/libpython3.11.so.1.0\n"
        "7f1000000000-7f1000001000 rwxp 00000000 00:00 0 \n")


class Writer:
    """Writes a samples file record by record, as the module docstring describes it."""

    def __init__(self, pid: int = 100, ppid: int = 1, flags: int = 0, ticks: int = 1_000, mono: int = 1_000) -> None:
        self.data = bytearray(struct.pack("<8sIIIIIIQQ", b"AITSAMPL", 2, 48, pid, ppid, flags, 0, ticks, mono))

    def record(self, kind: int, payload: bytes) -> "Writer":
        self.data += struct.pack("<II", kind, len(payload)) + payload + b"\0" * (-len(payload) % 8)
        return self

    def info(self, hz=1000, mechanism=1, signal=23, python=1, eval_start=EVAL, eval_size=0x1000,
             py_version=0x030B07F0, cold_start=0, cold_size=0) -> "Writer":
        return self.record(1, struct.pack("<IIIIQQQIIIIQQ", hz, mechanism, signal, python, 10**9 // hz, eval_start,
                                          eval_size, py_version, 128, 64, 64, cold_start, cold_size))

    def clock(self, ticks: int, mono: int) -> "Writer":
        return self.record(3, struct.pack("<QQ", ticks, mono))

    def code(self, code_id: int, code: types.CodeType) -> "Writer":
        fn, qn = code.co_filename.encode(), code.co_qualname.encode()
        return self.record(5, struct.pack("<IiIIII", code_id, code.co_firstlineno, len(fn), len(qn),
                                          len(code.co_linetable), 0) + fn + qn + code.co_linetable)

    @staticmethod
    def frames(native: Sequence[int], python: Sequence[Tuple[int, int, bool]]) -> bytes:
        """native and python innermost first, python as (code id, lasti, is_entry)."""
        words = list(native) + [c << 32 | (lasti + 1) << 1 | int(entry) for c, lasti, entry in python]
        return struct.pack(f"<{len(words)}Q", *words)

    def stack(self, stack_id: int, native: Sequence[int], python: Sequence[Tuple[int, int, bool]] = ()) -> "Writer":
        return self.record(6, struct.pack("<IHH", stack_id, len(python), len(native)) + self.frames(native, python))

    @staticmethod
    def entry(ticks: int, stack: int, tid: int = TID, flags: int = 0, weight: int = 1, task=(0, 0),
              autoitt=(0, 0)) -> bytes:
        return struct.pack("<QIIIIQQQQ", ticks, tid, stack, flags, weight, *task, *autoitt)

    def samples(self, *entries: bytes) -> "Writer":
        return self.record(7, b"".join(entries))

    def raw_sample(self, entry: bytes, native, python=()) -> "Writer":
        return self.record(8, entry + struct.pack("<HHI", len(python), len(native), 0) + self.frames(native, python))

    def maps(self, seq: int, text: str) -> "Writer":
        return self.record(9, struct.pack("<II", seq, 1) + text.encode())

    def write(self, path: Path) -> Path:
        path.write_bytes(bytes(self.data))
        return path


def busy():  # a function whose code object the files below name
    total = 0
    for i in range(10):
        total += i
    return total


BUSY_LOOP = busy.__code__.co_firstlineno + 3  # "total += i"


def lasti_of_line(code: types.CodeType, line: int) -> List[int]:
    """Every instruction (in code units) on line."""
    return [offset // 2 for start, end, ln in code.co_lines() if ln == line for offset in range(start, end, 2)]


# --------------------------------------------------------------------------- lines


def all_code_objects(code: types.CodeType):
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from all_code_objects(const)


@pytest.mark.skipif(sys.version_info < (3, 11), reason="3.11's location table")
def test_lines_are_computed_as_the_interpreter_computes_them():
    checked = 0
    for module in (samplefile, json.decoder, textwrap):
        source = Path(module.__file__).read_text()
        for code in all_code_objects(compile(source, module.__file__, "exec")):
            ours = Code(code.co_filename, code.co_qualname, code.co_firstlineno, code.co_linetable)
            for start, end, line in code.co_lines():
                for offset in range(start, end, 2):
                    assert ours.line(offset // 2) == line, (code.co_qualname, offset)
                    checked += 1
    assert checked > 5_000  # 9,996 instructions on 3.13, more on 3.11


def test_line_ranges_cover_the_code_without_gaps():
    ranges = line_ranges(busy.__code__.co_linetable, busy.__code__.co_firstlineno)
    assert ranges[0][0] == 0 and all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
    assert ranges[-1][1] == len(busy.__code__.co_code)


def test_the_instruction_before_the_first_is_on_the_first_line():
    code = busy.__code__
    assert Code(code.co_filename, code.co_qualname, code.co_firstlineno, code.co_linetable).line(-1) == code.co_firstlineno


# --------------------------------------------------------------------------- merging


def is_eval(address: int) -> bool:
    return 0x100 <= address < 0x200


def is_interpreter(address: int) -> bool:
    return 0x100 <= address < 0x300


def test_each_run_of_python_frames_replaces_the_eval_loop_call_that_ran_it():
    # outermost first: _start, Py_RunMain, eval, call plumbing, an extension, eval, call plumbing, torch, leaf
    native = [0x11, 0x211, 0x111, 0x221, 0x401, 0x121, 0x231, 0x501, 0x600]
    python = [(1, 10, True), (2, 20, False), (3, 30, True)]  # 2 inlined in 1's C call; 3 from the extension
    assert merge_frames(native, python, is_eval, is_interpreter) == (
        ("native", 0x10), ("py", 1, 10), ("py", 2, 20), ("native", 0x400), ("py", 3, 30), ("native", 0x500),
        ("native", 0x600))


def test_python_frames_beyond_the_native_walk_go_first():
    native = [0x401, 0x121, 0x501]  # the walk stopped inside the extension: one eval call seen
    python = [(1, 10, True), (2, 20, True), (3, 30, True)]
    assert merge_frames(native, python, is_eval, is_interpreter) == (
        ("py", 1, 10), ("py", 2, 20), ("native", 0x400), ("py", 3, 30), ("native", 0x501))


def test_interpreter_frames_under_the_innermost_python_frame_are_kept():
    native = [0x11, 0x111, 0x251, 0x260]  # eval -> a dict lookup, interrupted in it
    python = [(1, 10, True)]
    assert merge_frames(native, python, is_eval, is_interpreter) == (
        ("native", 0x10), ("py", 1, 10), ("native", 0x250), ("native", 0x260))


def test_native_frames_are_call_sites_and_the_innermost_the_interrupted_instruction():
    assert merge_frames([0x1001, 0x2001, 0x3001], [], is_eval, is_interpreter) == (
        ("native", 0x1000), ("native", 0x2000), ("native", 0x3001))


def test_a_thread_without_python_keeps_its_native_frames():
    native = [0x11, 0x401, 0x501]
    assert merge_frames(native, [], is_eval, is_interpreter) == (
        ("native", 0x10), ("native", 0x400), ("native", 0x501))


# --------------------------------------------------------------------------- files


def test_samples_are_read_into_per_sample_arrays_with_their_stacks(tmp_path):
    code = busy.__code__
    lasti = lasti_of_line(code, BUSY_LOOP)[0]
    path = (Writer(pid=7, ppid=3).info().clock(1_000, 1_000).code(1, code).maps(1, MAPS)
            .record(4, struct.pack("<II", TID, 0) + b"python")
            .stack(5, [0x7f00_0000_0100, EVAL + 0x11, 0x5555_0000_0101], [(1, lasti, True)])
            .samples(Writer.entry(2_000, 5, task=(0xD, 0xE), autoitt=(0xA, 0xB)),
                     Writer.entry(3_000, 5, flags=samplefile.F_PAUSED | samplefile.F_INHERITED, weight=4))
            .record(10, struct.pack("<IIQQQ", TID, 1, 2, 1, 5_000))
            .record(11, b"").write(tmp_path / "samples-7.bin"))
    sf = read_sample_file(path)
    assert (sf.pid, sf.ppid, sf.forked, sf.complete, sf.warnings) == (7, 3, False, True, [])
    assert (sf.rate_hz, sf.period_ns, sf.mechanism, sf.signal, sf.python, sf.python_version) == (
        1000, 10**6, "perf", 23, "frames", (3, 11))
    assert sf.ns.tolist() == [2_000, 3_000] and sf.tid.tolist() == [TID, TID]
    assert sf.stack.tolist() == [0, 0] and sf.weight.tolist() == [1, 4]
    assert sf.paused.tolist() == [False, True] and sf.inherited.tolist() == [False, True]
    assert (sf.task_domain[0], sf.task_name[0], sf.autoitt_domain[0], sf.autoitt_name[0]) == (0xD, 0xE, 0xA, 0xB)
    assert sf.native_stacks == [(0x5555_0000_0101, EVAL + 0x11, 0x7f00_0000_0100)]  # outermost first
    assert sf.python_stacks == [((1, BUSY_LOOP, True),)]
    assert sf.stacks == [(("native", 0x5555_0000_0100), ("py", 1, BUSY_LOOP), ("native", 0x7f00_0000_0100))]
    assert sf.codes[1].qualname == "busy" and sf.codes[1].filename == __file__
    assert sf.frame_text(("py", 1, BUSY_LOOP)) == f"busy (test_samplefile.py:{BUSY_LOOP})"
    assert sf.thread_names == {TID: "python"}
    assert (sf.counts[TID].samples, sf.counts[TID].dropped, sf.counts[TID].handler_ns) == (2, 1, 5_000)
    assert sf.dropped == 1 and sf.reason is None
    assert sf.mapping(0x7f00_0000_0100).path == "/usr/lib/libtorch_cpu.so"
    assert sf.is_interpreter(EVAL + 0x500) and not sf.is_interpreter(0x7f00_0000_0100)


def test_frames_in_the_evaluators_cold_part_are_evaluator_frames(tmp_path):
    # Debian's CPython 3.13/3.14: most of _PyEval_EvalFrameDefault is a symbol-less ".cold" part elsewhere
    cold = EVAL + 0x8000
    code = busy.__code__
    lasti = lasti_of_line(code, BUSY_LOOP)[0]
    path = (Writer().info(cold_start=cold, cold_size=0x2000).code(1, code).maps(1, MAPS)
            .stack(1, [EVAL + 0x20000, cold + 0x11, 0x5555_0000_0101], [(1, lasti, True)])
            .samples(Writer.entry(10, 1)).write(tmp_path / "s.bin"))
    sf = read_sample_file(path)
    assert sf.eval_ranges == ((EVAL, EVAL + 0x1000), (cold, cold + 0x2000))
    # the Python frame takes the cold part's place; the interpreter's code under it stays (what the line did)
    assert sf.stacks == [(("native", 0x5555_0000_0100), ("py", 1, BUSY_LOOP), ("native", EVAL + 0x20000))]


def test_samples_on_the_same_line_share_one_stack(tmp_path):
    code = busy.__code__
    first, second = lasti_of_line(code, BUSY_LOOP)[:2]
    path = (Writer().info().code(1, code)
            .stack(1, [0x10], [(1, first, True)]).stack(2, [0x10], [(1, second, True)])
            .stack(3, [0x10], [(1, -1, True)])
            .samples(Writer.entry(10, 1), Writer.entry(20, 2), Writer.entry(30, 3)).write(tmp_path / "s.bin"))
    sf = read_sample_file(path)
    assert sf.stack.tolist() == [0, 0, 1]
    assert sf.python_stacks == [((1, BUSY_LOOP, True),), ((1, code.co_firstlineno, True),)]


def test_a_sample_written_from_a_fatal_signal_reads_like_any_other(tmp_path):
    path = (Writer().info().stack(1, [0x10, 0x20])
            .samples(Writer.entry(10, 1))
            .raw_sample(Writer.entry(20, 0, tid=9), [0x10, 0x20])
            .raw_sample(Writer.entry(30, 0, tid=9), [0x30]).write(tmp_path / "s.bin"))
    sf = read_sample_file(path)
    assert sf.tid.tolist() == [TID, 9, 9] and sf.stack.tolist() == [0, 0, 1]
    assert sf.native_stacks == [(0x20, 0x10), (0x30,)] and not sf.complete


def test_tsc_ticks_become_monotonic_nanoseconds_through_the_clock_pairs(tmp_path):
    # header: tick 1000 at 5000 ns; 2 ticks per ns afterwards
    path = (Writer(flags=1, ticks=1_000, mono=5_000).info().clock(201_000, 105_000)
            .samples(Writer.entry(101_000, 0)).write(tmp_path / "s.bin"))
    assert read_sample_file(path).ns.tolist() == [55_000]


def test_a_file_cut_short_is_read_up_to_its_last_complete_record(tmp_path):
    complete = Writer().info().stack(1, [0x10]).samples(Writer.entry(10, 1), Writer.entry(20, 1))
    last_record_at = len(complete.data)
    whole = complete.samples(Writer.entry(30, 1)).data
    path = tmp_path / "samples-100.bin"
    path.write_bytes(bytes(whole[:-20]))
    sf = read_sample_file(path)
    assert sf.ns.tolist() == [10, 20]
    assert sf.warnings == [f"samples-100.bin: cut short in a record at byte {last_record_at}; read up to there"]


def test_unknown_record_kinds_are_skipped(tmp_path):
    path = (Writer().info().record(99, b"from a later collector").stack(1, [0x10])
            .samples(Writer.entry(10, 1)).write(tmp_path / "s.bin"))
    sf = read_sample_file(path)
    assert len(sf) == 1 and sf.warnings == []


def test_reasons_say_why_sampling_was_degraded_or_off(tmp_path):
    path = (Writer().info(mechanism=0).record(2, "perf_event_open was refused (...)".encode())
            .record(2, "no CPU-time sampling: ...".encode()).write(tmp_path / "s.bin"))
    sf = read_sample_file(path)
    assert sf.mechanism == "none" and len(sf) == 0
    assert sf.reasons == ["perf_event_open was refused (...)", "no CPU-time sampling: ..."]
    assert sf.reason == "no CPU-time sampling: ..."


def test_an_address_is_looked_up_in_the_latest_map_holding_it(tmp_path):
    later = "7f0000000000-7f0000400000 r-xp 00000000 08:01 99 /usr/lib/libother.so\n"
    sf = read_sample_file(Writer().info().maps(1, MAPS).maps(2, later).write(tmp_path / "s.bin"))
    assert sf.mapping(0x7f00_0000_0100).path == "/usr/lib/libother.so"  # the newer snapshot
    assert sf.mapping(0x7f00_0050_0000).path == "/usr/lib/libtorch_cpu.so"  # only the older one has it
    assert sf.mapping(0x7f10_0000_0010).path == ""  # anonymous code (JIT)
    assert sf.mapping(0x1000) is None


def test_maps_text_gives_the_executable_mappings():
    assert parse_maps(MAPS + "7f2000000000-7f2000001000 rw-p 00000000 00:00 0 [heap]\n") == [
        samplefile.Mapping(0x5555_0000_0000, 0x5555_0000_1000, 0x1000, "/usr/bin/python3.11"),
        samplefile.Mapping(0x7000_0000_0000, 0x7000_0010_0000, 0, "/usr/lib/libpython3.11.so.1.0"),
        samplefile.Mapping(0x7f00_0000_0000, 0x7f00_0080_0000, 0, "/usr/lib/libtorch_cpu.so"),
        samplefile.Mapping(0x7f10_0000_0000, 0x7f10_0000_1000, 0, "")]


def test_a_file_that_is_not_a_samples_file_raises(tmp_path):
    (tmp_path / "samples-1.bin").write_bytes(b"AITTRACE" + bytes(100))
    (tmp_path / "samples-2.bin").write_bytes(b"AITSAMPL")
    for name in ("samples-1.bin", "samples-2.bin"):
        with pytest.raises(SampleFormatError):
            read_sample_file(tmp_path / name)
    Writer(pid=3).info().write(tmp_path / "samples-3.bin")
    assert [s.pid for s in read_sample_dir(tmp_path)] == [3]  # the others are skipped
