"""Reading trace files (the format: :mod:`.tracefile`) block by block, in bounded memory whatever their size."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple

import numpy as np

from .clock import Clock
from .tracefile import (_COUNTER_KINDS, _HEADER, _RECORD, _STATS_HEAD, CHUNK_MAGIC, KIND_BEGIN, KIND_COUNTERS,
                        KIND_DOMAIN_NAME, KIND_END, KIND_HARDWARE, KIND_HARDWARE2, KIND_NOTE, KIND_PAUSE,
                        KIND_PAUSED_BEGINS, KIND_STATS,
                        KIND_STRING_NAME, RECORD, _EVENT_KINDS, _NAME_KINDS, ProcessTrace, Stats, TraceFormatError,
                        FLAG_COUNTED_FROM, _decode, _header)

#: How much of a file is read at a time: what bounds the reader's memory, whatever the file's size.
BLOCK_BYTES = 16 << 20

Block = Dict[int, np.ndarray]
#: A file being read: its header (names and the rest filled as the blocks are consumed), and its blocks.
Scan = Tuple[ProcessTrace, Iterator[Block]]


def scan_trace_file(path: Path, block_bytes: int = BLOCK_BYTES) -> Tuple[ProcessTrace, Iterator[Block]]:
    """The header of one ``itt-<pid>.bin`` (:class:`TraceFormatError` if it has none), and its blocks.

    Each block maps a thread id to that thread's begin and end records (:data:`RECORD`) in the part of
    the file read, in program order. Damage after the header ends the blocks and becomes a warning.
    """
    path = Path(path)
    handle = open(path, "rb")
    try:
        trace, header_size, clock, chunk = _header(path, handle.read(_HEADER.size))
        size = path.stat().st_size
        if header_size > size:
            raise TraceFormatError(f"{path}: bad header size {header_size}")
    except BaseException:
        handle.close()
        raise
    handle.seek(header_size)
    return trace, _blocks(trace, handle, header_size, block_bytes, clock, chunk)


def _blocks(trace: ProcessTrace, handle, offset: int, block_bytes: int, clock: Clock,
            chunk: struct.Struct) -> Iterator[Block]:
    label = trace.path.name
    thread_names: Dict[int, Tuple[int, str]] = {}
    damage: Optional[str] = None
    data = b""  # what is read and not yet parsed: the file from byte ``offset`` on
    with handle:
        while damage is None:
            more = handle.read(block_bytes)
            data += more
            if not data:
                break
            # per thread, its records' bytes and (record clock: TSC) their converted timestamps
            per_thread: Dict[int, Tuple[List, List[np.ndarray]]] = {}
            view = memoryview(data)
            pos, end = 0, len(data)
            while damage is None and pos < end:
                if end - pos < chunk.size:
                    if not more:
                        damage = f"truncated at byte {offset + pos}: partial chunk header"
                    break
                cmagic, tid, length, _seq, *pair = chunk.unpack_from(data, pos)
                if cmagic != CHUNK_MAGIC:
                    damage = f"damaged at byte {offset + pos}: bad chunk magic {cmagic:#x}"
                    break
                body = pos + chunk.size
                if pair:
                    clock.add(*pair)
                if body + length > end:
                    if more:
                        break  # the chunk goes on in the next block
                    damage = (f"truncated at byte {offset + end}: chunk at byte {offset + pos} announces "
                              f"{length} bytes, {end - body} present")
                records, found = _chunk(trace, data, body, min(body + length, end), tid, thread_names, offset,
                                        clock)
                damage = damage or found
                trace.threads.add(tid)
                if len(records):
                    pieces, times = per_thread.setdefault(tid, ([], []))
                    pieces.append(view[body:body + records.nbytes] if records.base is data else records.tobytes())
                    if clock.tsc:
                        # chunk by chunk, with the pairs up to this one's: what a file holds converts the
                        # same whatever follows it (a file cut short, a run still writing)
                        times.append(clock.to_ns(records["ts"]))
                pos = min(body + length, end)
            block = {}
            for tid, (pieces, times) in per_thread.items():
                # one copy of the bytes, into a buffer numpy may write (a structured concatenate is slow)
                records = np.frombuffer(bytearray().join(pieces), RECORD)
                if times:
                    records["ts"] = np.concatenate(times)
                counted = records["kind"] >= KIND_COUNTERS
                if counted.any():
                    _add_counters(trace, records[counted], _counted_spans(records))
                    records = records[~counted]
                control = records["kind"] >= KIND_PAUSE
                if control.any():
                    trace.controls.extend(zip(records["ts"][control].tolist(), records["kind"][control].tolist(),
                                              [tid] * int(control.sum())))
                    records = records[~control]
                trace.event_count += int(control.sum()) + len(records)
                if len(records):
                    block[tid] = records
            if block:
                yield block
            del view, per_thread
            data, offset = data[pos:], offset + pos
            if not more:
                break
    if damage is not None:
        trace.cut = damage
        trace.warnings.append(f"{label}: {damage}: read {trace.event_count} events before the damage")
    trace.thread_names = {tid: name for tid, (_ts, name) in thread_names.items()}


def _chunk(trace: ProcessTrace, data: bytes, body: int, body_end: int, tid: int,
           thread_names: Dict[int, Tuple[int, str]], base: int, clock: Clock) -> Tuple[np.ndarray, Optional[str]]:
    """One chunk's event records; name and statistics records go to ``trace``; the damage found, if any."""
    length = body_end - body
    if length % RECORD.itemsize == 0:
        records = np.frombuffer(data, RECORD, count=length // RECORD.itemsize, offset=body)
        kinds = records["kind"]
        if len(kinds) == 0 or (kinds.min() >= KIND_BEGIN and kinds.max() <= KIND_HARDWARE2):
            return records, None  # the usual chunk: events only
    # a chunk with names in it (a thread's first, mostly) or damage: record by record
    kept: List[Tuple] = []
    damage = None
    pos = body
    while pos < body_end:
        if body_end - pos < _RECORD.size:
            damage = f"damaged at byte {base + pos}: partial record"
            break
        record = _RECORD.unpack_from(data, pos)
        kind, name_len, ts, a = record[0], record[2], record[4], record[5]
        if kind in _EVENT_KINDS or kind in _COUNTER_KINDS:
            kept.append(record)
            pos += _RECORD.size
        elif kind in _NAME_KINDS:
            padded = (name_len + 7) & ~7
            if pos + _RECORD.size + padded > body_end:
                damage = f"damaged at byte {base + pos}: name record runs past its chunk"
                break
            name = _decode(data[pos + _RECORD.size:pos + _RECORD.size + name_len])
            if kind == KIND_DOMAIN_NAME:
                trace.domains[a] = name
            elif kind == KIND_STRING_NAME:
                trace.strings[a] = name
            elif kind == KIND_NOTE:
                if name not in trace.notes:
                    trace.notes.append(name)
            elif kind == KIND_PAUSED_BEGINS:
                trace.paused_begins[name] = trace.paused_begins.get(name, 0) + a
            else:
                previous = thread_names.get(tid)
                if previous is None or ts >= previous[0]:
                    thread_names[tid] = (ts, name)
            pos += _RECORD.size + padded
        elif kind == KIND_STATS:
            padded = (name_len + 7) & ~7
            if name_len < _STATS_HEAD.size or pos + _RECORD.size + padded > body_end:
                damage = f"damaged at byte {base + pos}: statistics record runs past its chunk"
                break
            start = pos + _RECORD.size
            pairs = np.frombuffer(data, "<u4", count=(name_len - _STATS_HEAD.size) // 4,
                                  offset=start + _STATS_HEAD.size).reshape(-1, 2)
            at = int(clock.to_ns(np.array([ts], np.uint64))[0])
            trace.stats.append(Stats(tid, at, a, record[6], _STATS_HEAD.unpack_from(data, start), pairs.copy()))
            pos += _RECORD.size + padded
        else:
            damage = f"damaged at byte {base + pos}: unknown record kind {kind}"
            break
    return np.array(kept, dtype=RECORD), damage


def _counted_spans(records: np.ndarray) -> np.ndarray:
    """For each counters record of a thread's block (every record, in program order), the wall time (ns) of the
    span its counts cover, or -1 where it is not known: a record of an older collector (no counted-from flag),
    or one whose task's end record is not right before it (in the block before)."""
    kinds = records["kind"]
    at = np.flatnonzero(kinds == KIND_COUNTERS)
    before = np.maximum(at - 1, 0)
    known = ((records["flags"][at] & FLAG_COUNTED_FROM) != 0) & (at > 0) & (kinds[before] == KIND_END)
    span = records["ts"][before].astype(np.int64) - records["ts"][at].astype(np.int64)
    return np.where(known, np.maximum(span, 0), -1)


def _add_counters(trace: ProcessTrace, records: np.ndarray, spans: np.ndarray) -> None:
    """A thread's counters records of one block, in program order, added to the trace's sums per task;
    ``spans``: each counters record's counted span (:func:`_counted_spans`)."""
    kinds = records["kind"]
    at = np.flatnonzero(kinds == KIND_COUNTERS)
    if not len(at):
        return
    following = np.append(kinds, [0, 0])
    hardware = following[at + 1] == KIND_HARDWARE
    second = hardware & (following[at + 2] == KIND_HARDWARE2)
    a, b = records["a"].astype(np.int64), records["b"]
    one, two = np.minimum(at + 1, len(kinds) - 1), np.minimum(at + 2, len(kinds) - 1)
    columns = (np.ones(len(at), np.int64), a[at], records["aux"][at].astype(np.int64),
               records["name_len"][at].astype(np.int64), hardware.astype(np.int64),
               np.where(hardware, a[one], 0), np.where(hardware, b[one].astype(np.int64), 0),
               np.where(second, a[two], 0), np.where(second, b[two].astype(np.int64), 0),
               (spans >= 0).astype(np.int64), np.maximum(spans, 0))
    tasks, which = np.unique(b[at], return_inverse=True)
    for column, values in enumerate(columns):
        summed = np.zeros(len(tasks), np.int64)
        np.add.at(summed, which, values)
        for task, value in zip(tasks.tolist(), summed.tolist()):
            trace.counters.setdefault(task, [0] * len(columns))[column] += value


def each_file(directory: Path, open_one) -> Tuple[list, List[str]]:
    opened, skipped = [], []
    for path in sorted(Path(directory).glob("itt-*.bin")):
        try:
            opened.append(open_one(path))
        except TraceFormatError as exc:
            skipped.append(f"{path.name}: {str(exc).replace(str(path) + ': ', '')}; skipped")
        except OSError as exc:
            skipped.append(f"{path.name}: cannot read: {exc.strerror or exc}; skipped")
    return opened, skipped


def scan_trace_dir(directory: Path) -> Tuple[List[Tuple[ProcessTrace, Iterator[Block]]], List[str]]:
    """:func:`scan_trace_file` for every ``itt-*.bin`` in ``directory``, by pid; and the files skipped."""
    scans, skipped = each_file(directory, scan_trace_file)
    return sorted(scans, key=lambda scan: scan[0].pid), skipped
