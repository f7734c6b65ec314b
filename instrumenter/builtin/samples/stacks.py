"""From a process's samples (:mod:`.samplefile`) to stacks of hotspot frames (:class:`.hotspots.Frame`).

Python frames already name the original script's file and lines: the
launcher compiles each copy under its original's name with the original's
line numbers, so the markers' code shows as the line it was inserted at and
never as a line of its own. Here, frames of the launcher and of ``runpy``
are dropped; what profiling itself costs (the copies' runtime, ittapi,
autoitt's collector, and PyTorch's ITT ranges and RecordFunction callbacks
under ``emit_itt``) is one frame, :data:`AUTOITT`, in place of that frame and
every frame it calls, so that autoitt's cost is a line of its own; a file of the
profiled project is named as the project names it (``train.py``,
``models/net.py``), a library's from its package (``torch/nn/modules/
module.py``); native frames are named by :mod:`.symbols`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from ...profile.instrumentation import Instrumentation
from .hotspots import Frame
from .mixedstacks import CUT
from .samplefile import SampleFile
from .symbols import Symbolizer

#: autoitt's own Python: the launcher and the copies' runtime.
_OWN = str(Path(__file__).resolve().parents[2]) + os.sep  # instrumenter/ (this file: builtin/samples/)
_LAUNCHER = _OWN + "launch" + os.sep
#: What profiling costs, as one frame: where a stack enters it, the frames it calls are folded into it.
AUTOITT = Frame(function="[profiling: markers, ITT, collector]", library="autoitt")
#: Where the collector cut the middle of a deep Python stack (its outermost frames, the script's, are kept).
DEEP_STACK_CUT = Frame(function="[frames of a deep stack left out]")
#: Native code that is profiling's own: autoitt's collector (not its hooks, ``h_*``: they run the program's
#: threads and calls), ittapi's, and PyTorch's ITT path (emit_itt's callbacks run inside RecordFunction, from
#: the dispatcher). Not _around: it calls the user's closure.
_PROFILING_LIBRARIES = ("_collector.",)
_PROFILING_FUNCTIONS = ("at::RecordFunction", "c10::Dispatcher::runRecordFunction", "torch::profiler::",
                        "at::(anonymous namespace)::LocalCallbackManager")
_HIDDEN = ("<frozen runpy>", "<frozen importlib._bootstrap>", "<frozen importlib._bootstrap_external>")
_PACKAGES = ("site-packages", "dist-packages")


class Resolver:
    """Names frames for one run: the project's files by their relative names."""

    def __init__(self, instrumentation: Optional[Instrumentation]) -> None:
        self.project: Dict[str, str] = {}
        if instrumentation is not None:
            for record in instrumentation.files:
                self.project[os.path.realpath(record.path)] = record.relative
                if record.program:
                    self.project[os.path.realpath(record.program)] = record.relative
        self.own_names = set(self.project.values())
        self._names: Dict[str, Optional[str]] = {}

    def file_name(self, filename: str) -> Optional[str]:
        """How a Python file is shown; ``None``: a frame of autoitt's own, hidden."""
        found = self._names.get(filename, "")
        if found != "":
            return found
        if filename in _HIDDEN or filename.startswith(_OWN):
            found = None
        else:
            real = os.path.realpath(filename) if filename.startswith("/") else filename
            found = self.project.get(real) or _short(filename)
            if real.startswith(_OWN):
                found = None
        self._names[filename] = found
        return found

    def stacks(self, samples: SampleFile) -> List[Tuple[Frame, ...]]:
        """Each of the file's distinct stacks as frames, outermost first; profiling's own frames folded into
        :data:`AUTOITT` (see :func:`_fold`)."""
        symbolizer = Symbolizer.for_file(samples)
        native: Dict[int, Tuple[Optional[Frame], bool]] = {}
        python: Dict[Tuple[int, Optional[int]], Tuple[Optional[Frame], bool]] = {}
        resolved = []
        for stack in samples.stacks:
            entries = []
            for frame in stack:
                if frame == CUT:
                    entries.append((DEEP_STACK_CUT, False, False))
                elif frame[0] == "py":
                    key = (frame[1], frame[2])
                    if key not in python:
                        python[key] = self._python(samples, frame[1], frame[2])
                    shown, profiling = python[key]
                    entries.append((shown, profiling, shown is not None))
                else:
                    if frame[1] not in native:
                        native[frame[1]] = _native(symbolizer, frame[1])
                    shown, profiling = native[frame[1]]
                    entries.append((shown, profiling, False))
            resolved.append(_fold(entries))
        return resolved

    def _python(self, samples: SampleFile, code_id: int, line: Optional[int]) -> Tuple[Optional[Frame], bool]:
        """(the frame shown, None: hidden; whether it is profiling's own: the copies' runtime)."""
        code = samples.codes.get(code_id)
        if code is None:
            return Frame(function=f"<code {code_id}>", file="?", line=line), False
        name = self.file_name(code.filename)
        if name is None:
            real = os.path.realpath(code.filename) if code.filename.startswith("/") else code.filename
            return None, real.startswith(_OWN) and not real.startswith(_LAUNCHER)
        return Frame(function=code.qualname, file=name, line=line, own=name in self.own_names), False


def _fold(entries: List[Tuple[Optional[Frame], bool, bool]]) -> Tuple[Frame, ...]:
    """One stack from its entries (frame shown or None, profiling's own, a Python frame of the program's),
    outermost first: from the outermost profiling frame that calls no Python of the program's, the frames are
    one :data:`AUTOITT`. A profiling frame that does call the program's Python (a library call's wrapper, the
    runtime running a Keras fit) is a way through, not a cost: hidden, and the frames it calls stay."""
    cut, calls_program = len(entries), False
    for i in range(len(entries) - 1, -1, -1):
        _shown, profiling, program = entries[i]
        if profiling and not calls_program:
            cut = i
        calls_program = calls_program or program
    frames = [shown for shown, profiling, _ in entries[:cut] if shown is not None and not profiling]
    return tuple(frames + [AUTOITT]) if cut < len(entries) else tuple(frames)


#: Code in no file (JIT-compiled kernels: oneDNN's, XLA's): one frame for all of it, as its addresses mean
#: nothing from one run to the next.
ANONYMOUS = Frame(function="[JIT or anonymous code]", library="[anon]")


def _native(symbolizer: Symbolizer, address: int) -> Tuple[Optional[Frame], bool]:
    """(the frame of a native address, None for a PLT stub, whose time is its caller's: it only jumps on;
    whether it is profiling's own: autoitt's collector but its hooks, ittapi, PyTorch's ITT path)."""
    symbol = symbolizer.lookup(address)
    if symbol.plt:
        return None, False
    mapping = symbolizer.mapping(address)
    library_file = os.path.basename(mapping.path) if mapping is not None else ""
    profiling = (library_file.startswith(_PROFILING_LIBRARIES) and not (symbol.name or "").startswith("h_")
                 or (symbol.name or "").startswith(_PROFILING_FUNCTIONS)
                 or (mapping is not None and f"{os.sep}ittapi{os.sep}" in mapping.path))
    if symbol.library == "[anon]" and not symbol.name:
        return ANONYMOUS, False
    return Frame(function=symbol.text(), library=symbol.library or "?"), profiling


def _short(filename: str) -> str:
    """A library file from its package on: ``.../site-packages/torch/nn/module.py`` -> ``torch/nn/module.py``."""
    parts = Path(filename).parts
    for marker in _PACKAGES:
        if marker in parts:
            return "/".join(parts[len(parts) - parts[::-1].index(marker):])
    if "lib" in parts and len(parts) > 2 and parts[-2].startswith("python"):
        return parts[-1]  # the standard library
    return filename
