"""Stress run: ``instrument_source`` over every ``.py`` file of installed frameworks.

Runs in memory (writes nothing next to the scanned files) over the ``.py``
files of the installed torch, tensorflow, keras and numpy packages (found
with ``importlib.util.find_spec``, without importing them), and reports:

* files read, files with detected regions, regions instrumented by role;
* crashes: any exception other than ``SourceError``/``RewriteError`` (an
  autoitt bug), with the first tracebacks;
* safety-check failures: ``RewriteError`` raised by autoitt's own checks, an
  instrumented copy that does not ``compile()``, a copy that
  ``transforms.strip_markers`` (when it exists) does not turn back into the
  original bytes, or a copy that autoitt does not recognise as already
  instrumented;
* files that failed to parse (``SourceError``: not autoitt's fault, counted
  apart), files over the per-file time limit, the slowest files;
* total time and files per second.

Usage (CI-sized, a fixed seeded subset; the whole set on demand)::

    .venv/bin/python benchmarks/stress_run.py --sample 300 --seed 1
    .venv/bin/python benchmarks/stress_run.py --jobs 2 --json stress.json --list-failures failures.txt

The exit status is 1 when there was any crash, safety-check failure or
time-out, 0 otherwise. ``tests/test_stress_subset.py`` calls
:func:`select_files` and :func:`run_stress` on a small subset.
"""

from __future__ import annotations

import argparse
import collections
import importlib.util
import json
import multiprocessing
import os
import random
import signal
import sys
import threading
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

DEFAULT_PACKAGES = ("torch", "tensorflow", "keras", "numpy")
#: seconds one file may take before it is reported as a time-out (the slowest
#: framework files take ~10 s on an idle core, several times that on a busy one)
DEFAULT_TIMEOUT = 120.0
#: how many tracebacks / failures / slow files are printed in full
SHOW = 5


# ---------------------------------------------------------------------------
# Choosing the files
# ---------------------------------------------------------------------------


def package_roots(package: str) -> List[Path]:
    """The directories of an installed package, without importing it."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise LookupError(f"package {package!r} is not installed (or is a single module)")
    return [Path(location) for location in spec.submodule_search_locations]


def package_files(packages: Sequence[str]) -> List[Tuple[str, Path]]:
    """``(package, path)`` for every ``.py`` file, sorted, each real file once."""
    seen = set()
    found: List[Tuple[str, Path]] = []
    for package in packages:
        for root in package_roots(package):
            for directory, dirs, names in os.walk(root):
                dirs.sort()
                for name in sorted(names):
                    if not name.endswith(".py"):
                        continue
                    path = Path(directory, name)
                    real = os.path.realpath(path)
                    if real in seen or not os.path.isfile(real):
                        continue
                    seen.add(real)
                    found.append((package, path))
    return found


def select_files(
    packages: Sequence[str] = DEFAULT_PACKAGES,
    sample: Optional[int] = None,
    seed: int = 0,
    max_bytes: Optional[int] = None,
) -> List[Tuple[str, Path]]:
    """All files of ``packages``, or a fixed seeded sample of ``sample`` of them.

    The sample depends only on the seed and the sorted file list (so on the
    installed package versions), never on the order of the file system.
    ``max_bytes`` leaves out larger files before sampling (keeps CI quick).
    """
    files = package_files(packages)
    if max_bytes is not None:
        files = [(package, path) for package, path in files if path.stat().st_size <= max_bytes]
    if sample is not None and sample < len(files):
        files = sorted(random.Random(seed).sample(files, sample), key=lambda item: str(item[1]))
    return files


# ---------------------------------------------------------------------------
# One file (runs in the worker processes)
# ---------------------------------------------------------------------------


class FileTimeout(BaseException):
    """Raised by SIGALRM when one file goes over its time limit.

    A ``BaseException`` so that no ``except Exception`` inside autoitt (or
    libcst) can swallow it.
    """


def _on_alarm(signum, frame):  # pragma: no cover - timing dependent
    raise FileTimeout()


def _can_time_out() -> bool:
    return hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()


def check_file(task: Tuple[str, str, float]) -> dict:
    """Instrument one file in memory and run the safety checks on the copy.

    ``status`` is one of ``ok``, ``source_error``, ``safety``, ``crash``,
    ``timeout``, ``unreadable``.
    """
    package, path, timeout = task
    result = {
        "package": package,
        "path": path,
        "bytes": 0,
        "seconds": 0.0,
        "status": "ok",
        "outcome": None,
        "roles": {},
        "regions": 0,
        "check": None,
        "message": None,
        "traceback": None,
    }
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        result["status"], result["message"] = "unreadable", str(exc)
        return result
    result["bytes"] = len(data)

    import transforms
    from transforms import Outcome, RewriteError, SourceError, instrument_source

    timed = timeout and timeout > 0 and _can_time_out()
    if timed:
        previous = signal.signal(signal.SIGALRM, _on_alarm)
        signal.setitimer(signal.ITIMER_REAL, timeout)
    start = time.perf_counter()
    try:
        try:
            outcome = instrument_source(data, path)
            result["outcome"] = outcome.outcome.value
            result["regions"] = len(outcome.detection.regions)
            if outcome.outcome is Outcome.INSTRUMENTED:
                roles = collections.Counter(region.role for region in outcome.plan.regions)
                result["roles"] = dict(roles)
                failure = _safety_checks(transforms, data, path, outcome.output)
                if failure is not None:
                    result["status"], (result["check"], result["message"]) = "safety", failure
        finally:
            if timed:
                signal.setitimer(signal.ITIMER_REAL, 0)
    except FileTimeout:
        result["status"], result["message"] = "timeout", f"over the {timeout:g} s limit"
    except SourceError as exc:
        result["status"], result["message"] = "source_error", str(exc)
    except RewriteError as exc:
        result["status"], result["check"], result["message"] = "safety", "RewriteError", str(exc)
    except Exception as exc:  # noqa: BLE001 - every other exception is an autoitt crash
        result["status"], result["message"] = "crash", f"{type(exc).__name__}: {exc}"[:2000]
        result["traceback"] = traceback.format_exc()[-8000:]
    finally:
        if timed:
            signal.signal(signal.SIGALRM, previous)
    result["seconds"] = time.perf_counter() - start
    return result


def _safety_checks(transforms, data: bytes, path: str, output: bytes) -> Optional[Tuple[str, str]]:
    """``(check, message)`` for the first check the instrumented copy fails."""
    try:
        compile(output, path, "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as exc:
        return "compile", f"the instrumented copy does not compile: {exc}"
    strip = getattr(transforms, "strip_markers", None)
    if strip is not None:
        try:
            stripped = strip(output, path)
        except transforms.SourceError as exc:
            return "strip", f"strip_markers refused the copy: {exc}"
        if stripped != data:
            return "strip", f"strip_markers(copy) differs from the original ({_first_difference(data, stripped)})"
    try:
        again = transforms.instrument_source(output, path)
    except (transforms.SourceError, transforms.RewriteError) as exc:
        return "reinstrument", f"instrumenting the copy again raised {type(exc).__name__}: {exc}"
    if again.outcome is not transforms.Outcome.ALREADY_INSTRUMENTED:
        return "reinstrument", f"the copy is not recognised as already instrumented ({again.outcome.value})"
    return None


def _first_difference(expected: bytes, actual: bytes) -> str:
    for number, (a, b) in enumerate(zip(expected.splitlines(True), actual.splitlines(True)), start=1):
        if a != b:
            return f"line {number}: expected {a[:120]!r}, got {b[:120]!r}"
    return f"{len(expected.splitlines())} lines expected, {len(actual.splitlines())} lines got"


# ---------------------------------------------------------------------------
# Many files
# ---------------------------------------------------------------------------


@dataclass
class Summary:
    """The figures of one stress run (also its ``--json``)."""

    packages: List[str] = field(default_factory=list)
    files_read: int = 0
    bytes_read: int = 0
    files_with_regions: int = 0
    files_with_loops: int = 0
    files_instrumented: int = 0
    outcomes: Dict[str, int] = field(default_factory=dict)
    regions_instrumented_by_role: Dict[str, int] = field(default_factory=dict)
    files_by_package: Dict[str, int] = field(default_factory=dict)
    crashes: List[dict] = field(default_factory=list)
    safety_failures: List[dict] = field(default_factory=list)
    source_errors: List[dict] = field(default_factory=list)
    timeouts: List[dict] = field(default_factory=list)
    unfinished: List[str] = field(default_factory=list)
    slowest: List[Tuple[float, str]] = field(default_factory=list)
    seconds: float = 0.0
    jobs: int = 1
    timeout: float = 0.0

    @property
    def files_per_second(self) -> float:
        return self.files_read / self.seconds if self.seconds else 0.0

    @property
    def failed(self) -> bool:
        return bool(self.crashes or self.safety_failures or self.timeouts or self.unfinished)

    def add(self, result: dict) -> None:
        status = result["status"]
        self.files_by_package[result["package"]] = self.files_by_package.get(result["package"], 0) + 1
        if status == "unreadable":
            self.source_errors.append(_brief(result))
            return
        self.files_read += 1
        self.bytes_read += result["bytes"]
        if result["outcome"]:
            self.outcomes[result["outcome"]] = self.outcomes.get(result["outcome"], 0) + 1
        if result["regions"]:
            self.files_with_regions += 1
        roles = result["roles"]
        if roles:
            self.files_instrumented += 1
            if any(role != "train-call" for role in roles):
                self.files_with_loops += 1
            for role, count in roles.items():
                self.regions_instrumented_by_role[role] = self.regions_instrumented_by_role.get(role, 0) + count
        elif result["regions"]:
            # detected but not instrumented (already instrumented by hand, ...)
            pass
        if status == "crash":
            self.crashes.append(_brief(result, with_traceback=True))
        elif status == "safety":
            self.safety_failures.append(_brief(result))
        elif status == "source_error":
            self.source_errors.append(_brief(result))
        elif status == "timeout":
            self.timeouts.append(_brief(result))
        self.slowest.append((round(result["seconds"], 3), result["path"]))
        self.slowest = sorted(self.slowest, reverse=True)[:10]

    def to_json(self) -> dict:
        figures = asdict(self)
        figures["files_per_second"] = round(self.files_per_second, 2)
        figures["seconds"] = round(self.seconds, 2)
        return figures


def _brief(result: dict, with_traceback: bool = False) -> dict:
    brief = {"path": result["path"], "message": result["message"]}
    if result.get("check"):
        brief["check"] = result["check"]
    if with_traceback:
        brief["traceback"] = result["traceback"]
    return brief


def run_stress(
    files: Sequence[Tuple[str, Path]],
    jobs: int = 2,
    timeout: float = DEFAULT_TIMEOUT,
    progress: bool = True,
    stall: Optional[float] = None,
) -> Summary:
    """Check every file, in ``jobs`` worker processes (1: in this process).

    ``stall``: seconds without any file finishing after which the run stops
    and the files still running are reported as unfinished (a guard against
    a hang the per-file alarm cannot interrupt, e.g. in native code);
    defaults to three times the per-file limit.
    """
    summary = Summary(packages=sorted({package for package, _ in files}), jobs=jobs, timeout=timeout)
    # Largest first: the long files start early and the pool drains evenly.
    tasks = sorted(
        ((package, str(path), timeout) for package, path in files),
        key=lambda task: (-_size(task[1]), task[1]),
    )
    start = time.perf_counter()
    with _progress_bar(progress, len(tasks)) as advance:
        if jobs <= 1:
            for task in tasks:
                summary.add(check_file(task))
                advance()
        else:
            pending = {task[1] for task in tasks}
            # Import and warm up autoitt (and libcst) once, before the workers
            # fork: every worker then runs the same code, and none pays the
            # imports again (seconds, which would land on its first file).
            _warm_up()
            context = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else None)
            pool = context.Pool(jobs, maxtasksperchild=200)
            try:
                results = pool.imap_unordered(check_file, tasks, chunksize=1)
                wait = stall if stall is not None else (3 * timeout if timeout else None)
                for _ in range(len(tasks)):
                    try:
                        result = results.next(wait)
                    except multiprocessing.TimeoutError:
                        summary.unfinished = sorted(pending)
                        break
                    pending.discard(result["path"])
                    summary.add(result)
                    advance()
            finally:
                pool.terminate()
                pool.join()
    summary.seconds = time.perf_counter() - start
    return summary


_WARM_UP = b"""\
import torch

def train(model, loader, optimizer):
    for epoch in range(2):
        for batch in loader:
            loss = model(batch)
            loss.backward()
            optimizer.step()
"""


def _warm_up() -> None:
    import transforms

    result = transforms.instrument_source(_WARM_UP, "warm_up.py")
    strip = getattr(transforms, "strip_markers", None)
    if strip is not None and result.output is not None:
        strip(result.output, "warm_up_itt.py")


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


class _progress_bar:
    """A rich progress bar on stderr, or nothing."""

    def __init__(self, enabled: bool, total: int) -> None:
        self.enabled, self.total = enabled, total

    def __enter__(self) -> Callable[[], None]:
        if not self.enabled:
            return lambda: None
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

        console = Console(stderr=True)
        if not console.is_terminal:
            # A log (CI): a plain line every 5 %, not a live bar nobody sees.
            self.enabled = False
            start, done, step = time.perf_counter(), [0], max(1, self.total // 20)

            def advance() -> None:
                done[0] += 1
                if done[0] % step == 0 or done[0] == self.total:
                    elapsed = time.perf_counter() - start
                    print(f"{done[0]}/{self.total} files, {elapsed:.0f} s, {done[0] / elapsed:.1f} files/s",
                          file=sys.stderr, flush=True)
            return advance
        self.progress = Progress(
            TextColumn("instrumenting"), BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(),
            console=console,
        )
        self.progress.__enter__()
        task = self.progress.add_task("files", total=self.total)
        return lambda: self.progress.advance(task)

    def __exit__(self, *exc) -> None:
        if self.enabled:
            self.progress.__exit__(*exc)


# ---------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------


def report(summary: Summary, show: int = SHOW, out=None) -> None:
    out = out or sys.stdout
    write = lambda text="": print(text, file=out)  # noqa: E731
    write(f"packages:              {', '.join(summary.packages)}  "
          f"({', '.join(f'{k} {v}' for k, v in sorted(summary.files_by_package.items()))})")
    write(f"files read:            {summary.files_read}  ({summary.bytes_read / 1e6:.1f} MB)")
    write(f"files with regions:    {summary.files_with_regions}  "
          f"(instrumented: {summary.files_instrumented}, with loops instrumented: {summary.files_with_loops})")
    write(f"outcomes:              {', '.join(f'{k}: {v}' for k, v in sorted(summary.outcomes.items()))}")
    roles = summary.regions_instrumented_by_role
    write(f"regions instrumented:  {sum(roles.values())}  "
          f"({', '.join(f'{role} {roles.get(role, 0)}' for role in ('epoch', 'step', 'eval', 'train-call'))})")
    write(f"crashes:               {len(summary.crashes)}")
    for crash in summary.crashes[:show]:
        write(f"  --- {crash['path']}")
        write("      " + (crash["traceback"] or crash["message"]).rstrip().replace("\n", "\n      "))
    write(f"safety-check failures: {len(summary.safety_failures)}")
    for failure in summary.safety_failures[:show]:
        write(f"  {failure['path']}: [{failure.get('check')}] {failure['message']}")
    write(f"time-outs:             {len(summary.timeouts)}  (limit {summary.timeout:g} s per file)")
    for item in summary.timeouts[:show]:
        write(f"  {item['path']}")
    if summary.unfinished:
        write(f"unfinished (stalled):  {len(summary.unfinished)}")
        for path in summary.unfinished[:show]:
            write(f"  {path}")
    write(f"parse failures:        {len(summary.source_errors)}  (SourceError: the input, not autoitt)")
    for item in summary.source_errors[:show]:
        write(f"  {item['message']}")
    write("slowest files:")
    for seconds, path in summary.slowest[:show]:
        write(f"  {seconds:7.2f} s  {path}")
    write(f"total time:            {summary.seconds:.1f} s with {summary.jobs} job(s): "
          f"{summary.files_per_second:.1f} files/s")


def write_failures(summary: Summary, path: Path) -> None:
    lines: List[str] = []
    for kind, items in (("CRASH", summary.crashes), ("SAFETY", summary.safety_failures),
                        ("TIMEOUT", summary.timeouts), ("SOURCE", summary.source_errors)):
        for item in items:
            check = f" [{item['check']}]" if item.get("check") else ""
            lines.append(f"{kind}{check}\t{item['path']}\t{item['message']}")
            if item.get("traceback"):
                lines.extend("\t" + line for line in item["traceback"].rstrip().splitlines())
    lines.extend(f"UNFINISHED\t{path}\t" for path in summary.unfinished)
    path.write_text("\n".join(lines) + ("\n" if lines else ""), encoding="utf-8")


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--packages", default=",".join(DEFAULT_PACKAGES),
                        help="comma-separated installed packages to scan (default: %(default)s)")
    parser.add_argument("--sample", type=int, default=None, help="check a fixed seeded sample of N files")
    parser.add_argument("--seed", type=int, default=0, help="seed of the sample (default: %(default)s)")
    parser.add_argument("--max-bytes", type=int, default=None, help="leave out files larger than this")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes; 1 runs in this process (default: %(default)s)")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT,
                        help="seconds per file before it counts as a time-out; 0: no limit (default: %(default)s)")
    parser.add_argument("--json", type=Path, default=None, help="save the figures as JSON")
    parser.add_argument("--list-failures", type=Path, default=None,
                        help="write every crash, safety failure, time-out and parse failure to this file")
    parser.add_argument("--show", type=int, default=SHOW, help="how many of each failure to print")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)

    packages = [p.strip() for p in args.packages.split(",") if p.strip()]
    files = select_files(packages, args.sample, args.seed, args.max_bytes)
    summary = run_stress(files, jobs=args.jobs, timeout=args.timeout, progress=not args.no_progress)
    report(summary, show=args.show)
    if args.json:
        args.json.write_text(json.dumps(summary.to_json(), indent=2) + "\n", encoding="utf-8")
    if args.list_failures:
        write_failures(summary, args.list_failures)
    return 1 if summary.failed else 0


if __name__ == "__main__":
    sys.exit(main())
