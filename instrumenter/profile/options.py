"""The options of ``autoitt profile``, parsed once by the CLI into one frozen object handed down.

What is inserted is the :class:`~transforms.Mode`; the rest says where the
results go, which backend collects, and each backend's own options
(:class:`BuiltinOptions`, :class:`VTuneOptions`), which only that backend reads.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Dict, Optional, Sequence, Tuple

from ..collector import formats
from ..runtime.torch_ops import OperatorSampling, with_first

if TYPE_CHECKING:  # the CLI imports these options to build its help; transforms is not needed for that
    from transforms import Mode

    from .step_window import StepWindow

#: The ``--backend`` choices: auto picks VTune where it is installed, else the built-in collector.
BACKENDS = ("auto", "builtin", "vtune")

#: autoitt's VTune analysis names, in the order they always run, and VTune's names for them.
ANALYSES: Dict[str, str] = {"hotspots": "hotspots", "uarch": "uarch-exploration"}
SAMPLING_MODES = ("sw", "hw")

#: ``-data-limit`` in MB; 0 is unlimited. VTune stops collecting when the limit
#: is reached (historic defaults: 100, then 500 MB), and a profile cut off that
#: way covers the first steps only -- the warm-up -- while looking complete.
#: Collection is already narrowed to training by -start-paused, and --steps
#: bounds it further, so autoitt passes "unlimited" unless told otherwise.
DEFAULT_DATA_LIMIT_MB = 0


def parse_analyses(text: str) -> Tuple[str, ...]:
    """``"uarch,hotspots"`` -> ``("hotspots", "uarch")``: known names only, always in run order."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in ANALYSES]
    if unknown or not names:
        raise ValueError(f"expected a comma list of {', '.join(ANALYSES)}; got {text!r}")
    return tuple(name for name in ANALYSES if name in names)


#: ``--trace-limit``'s default, 2G: a process's trace file stops growing there (its statistics do not).
DEFAULT_TRACE_LIMIT = 2 << 30
#: ``--sample-rate auto`` where perf samples: samples per second of each thread's CPU time (1 ms of CPU a
#: sample); the collector's own default (``instrumenter/collector/formats.py``). With CPU-time timers ``auto``
#: is :data:`DEFAULT_TIMER_SAMPLE_HZ`.
DEFAULT_SAMPLE_HZ = formats.SAMPLE_HZ_DEFAULT
DEFAULT_TIMER_SAMPLE_HZ = formats.SAMPLE_HZ_TIMER
#: The highest rate asked for: above it the signal handler's cost would be a sizeable share of the CPU. The
#: collector takes no more either.
MAX_SAMPLE_HZ = formats.SAMPLE_HZ_MAX
_SIZE_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_size(text: str) -> Optional[int]:
    """``--trace-limit``: bytes from ``500M``, ``2G``, ``1.5G``, ``100000`` (K, M, G, T are powers of 1024, a
    trailing ``B`` or ``iB`` is allowed); ``none`` or ``0``: no limit (``None``). ``ValueError`` otherwise."""
    value = text.strip().upper().removesuffix("IB").removesuffix("B")
    if value in ("NONE", "0"):
        return None
    number, unit = (value[:-1], value[-1]) if value[-1:] in _SIZE_UNITS and value[-1:] else (value, "")
    try:
        size = int(float(number) * _SIZE_UNITS[unit])
    except (ValueError, OverflowError):
        raise ValueError(f"{text!r}: expected a size such as 500M, 2G or 100000 (bytes), or none") from None
    if size < 64 * 1024:
        raise ValueError(f"{text!r}: at least 64K (one buffer of the collector), or none")
    return size


def split_args(values: Sequence[str]) -> Tuple[str, ...]:
    """Each value is split as a shell would (``"-knob sampling-interval=5"`` is two arguments)."""
    return tuple(arg for value in values for arg in shlex.split(value))


def _auto_window() -> "StepWindow":
    from .step_window import AUTO

    return AUTO


@dataclass(frozen=True)
class BuiltinOptions:
    """How the built-in collector runs, and what its reading keeps (the VTune backend has its own)."""

    #: which steps trace.json keeps every task of (``--trace-steps``, parsed with the options)
    trace_steps: "StepWindow" = field(default_factory=_auto_window)
    #: bytes a process's trace file may take (``--trace-limit``), None: no limit
    trace_limit: Optional[int] = DEFAULT_TRACE_LIMIT
    #: CPU-time samples per second of each thread (``--sample-rate``), 0: no sampling, None (``auto``): chosen
    #: with the mechanism (:func:`instrumenter.collector.mechanism.choose`)
    sample_hz: Optional[int] = None


@dataclass(frozen=True)
class VTuneOptions:
    """How VTune runs (the built-in backend has its own). ``given``: the flags of these the user typed, named
    in the note that says they are ignored when another backend runs."""

    analyses: Tuple[str, ...] = tuple(ANALYSES)
    sampling_mode: str = "sw"
    data_limit_mb: int = DEFAULT_DATA_LIMIT_MB
    extra_args: Tuple[str, ...] = ()
    given: Tuple[str, ...] = ()


@dataclass(frozen=True)
class ProfileOptions:
    """Everything ``autoitt profile`` was asked, before SCRIPT and its arguments: what every backend uses,
    then each backend's own group (``builtin``, ``vtune``), read by that backend alone.

    ``json_output``: the summary goes to stdout as JSON, so the script's own
    output goes to stderr.
    """

    mode: "Mode"
    backend: str = "auto"
    result_dir: Optional[Path] = None
    #: A launcher the run goes through, e.g. ``("mpirun", "-n", "4")``: one process (one vtune) per rank.
    launcher: Tuple[str, ...] = ()
    json_output: bool = False
    builtin: BuiltinOptions = field(default_factory=BuiltinOptions)
    vtune: VTuneOptions = field(default_factory=VTuneOptions)
    #: whether ``--torch-ops`` was given; if not, ``mode.torch_ops`` is the built-in backend's default
    #: (``sampled``), and a VTune run records every operator instead (its reports cannot be scaled)
    torch_ops_given: bool = True

    @property
    def operator_sampling(self) -> Optional[OperatorSampling]:
        """Which iterations record PyTorch's operators (``--torch-ops sampled``), else None: those of
        ``--trace-steps``' ranges (so the timeline's window has them), the first, and every
        :data:`~instrumenter.runtime.torch_ops.DEFAULT_EVERY`-th to the 200th, every 500th after; with
        ``--trace-steps all``, every one."""
        if not self.mode.operators_sampled:
            return None
        window = self.builtin.trace_steps
        if window.everything:
            return OperatorSampling.every_iteration()
        return OperatorSampling(ranges=with_first(window.ranges))
