"""Whether the two sides ran the same program on machines alike enough for their step times to compare.

A step time that moved can be the machine's doing, not the code's: two runs of an unchanged nanoGPT script,
the second beside other work that kept 1.5 of the machine's 2 cores busy, were called "slower beyond noise,
+919 %". And two different scripts have step times of different programs, whatever the noise test says. So
before a verdict stands:

- the sides must run one program: the same script name and the same arguments
  (:attr:`Conditions.different_program` says how they differ where they do);
- a difference in the direction the machines explain is not the code's: NEW slower where NEW's machine was
  oversubscribed (more threads runnable than cores, on average: ``run.json``'s ``machine.run_queue``; its
  threads waited for a core) and other work wanted more of it than during BASE's run: by :data:`RUN_QUEUE`
  threads (the run queue less the run's own cores busy), or, for a run.json without a run queue, by
  :data:`LOAD_CORES` cores busy; or where its CPUs ran at least :data:`CLOCK` slower; faster where the same
  holds the other way (:meth:`Conditions.explains`). Other work is taken as what the run did not do itself,
  so a run that waits more (a sleep in its data step), leaving cores to others, is not "busier" for it;
  two runs that shared an equally busy machine compare as the noise test says.

  How much an oversubscribed machine slows a run has no bound worth writing down (two OpenMP threads on two
  cores spin at their barriers while one waits for its core: the nanoGPT run above, 10x), so the size of the
  change does not clear it. A run that mostly waits (a sleep in its data step) uses little CPU and leaves the
  machine undersubscribed: its slowdown stands.

Either way the verdict is "inconclusive", saying why, rather than "slower" or "faster". Input: each side's
typical run (:class:`~._compare.Run`); output: :class:`Conditions`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import List, Optional, Sequence

from ._noise import Verdict

#: Other work's cores busy, on average over a run, that differ between the sides enough to move a step: half
#: a core taken from a run of one thread is that thread waiting for its core half of the time. (The suite's
#: second worker moves a run's other work by up to a few tenths of a core from one run to the next.)
LOAD_CORES = 0.5
#: The same, in threads runnable: a whole thread more wanting a core, on average over the run. A sum of the
#: machine's threads moves more from run to run than CPU time does (a test of the suite's other worker that
#: starts two threads for a second).
RUN_QUEUE = 1.0
#: The CPUs' mean clocks differing by this fraction.
CLOCK = 0.05


@dataclass(frozen=True)
class Load:
    """One run's machine, from ``run.json``'s ``machine``: other work's cores busy on average, the run's own,
    the cores there were, the load average at the end and the CPUs' mean clock (None where not read)."""

    other_cores: float
    run_cores: float
    cpus: float
    loadavg: Optional[float] = None
    mhz: Optional[float] = None
    #: the machine's runnable threads on average during the run (the run's own included)
    run_queue: Optional[float] = None

    @classmethod
    def of(cls, machine: Optional[dict]) -> Optional["Load"]:
        if not machine or not machine.get("elapsed_s"):
            return None
        elapsed = machine["elapsed_s"]
        return cls(other_cores=machine.get("other_cpu_s", 0.0) / elapsed,
                   run_cores=machine.get("run_cpu_s", 0.0) / elapsed, cpus=machine.get("cpus", 0.0),
                   loadavg=machine.get("loadavg_1m"), mhz=machine.get("mhz"), run_queue=machine.get("run_queue"))

    @property
    def others(self) -> float:
        """Other work's demand for cores: the threads runnable less the run's own cores busy where the run
        queue was read, else other work's cores busy (which stop at what the run left free)."""
        if self.run_queue is not None:
            return max(self.run_queue - self.run_cores, 0.0)
        return self.other_cores

    def busier_by(self, other: "Load") -> float:
        """How much more demand :attr:`others` must show than ``other``'s to count."""
        return RUN_QUEUE if self.run_queue is not None and other.run_queue is not None else LOAD_CORES

    @property
    def oversubscribed(self) -> bool:
        """Whether more threads wanted a core than there are, on average: the run queue where it was read,
        else the run's cores and the others' (which cannot say more than the cores there are)."""
        if self.run_queue is not None:
            return self.run_queue > self.cpus
        return self.run_cores + self.other_cores > self.cpus

    def describe(self) -> str:
        parts = [f"other work kept {self.other_cores:.2f} of {self.cpus:.0f} cores busy"]
        if self.run_queue is not None:
            parts.append(f"{self.run_queue:.1f} threads runnable on average")
        if self.mhz:
            parts.append(f"CPUs at {self.mhz:.0f} MHz")
        if self.loadavg is not None:
            parts.append(f"load average {self.loadavg:.2f}")
        return ", ".join(parts)


@dataclass(frozen=True)
class Conditions:
    """How the sides' programs and machines differ, as far as a verdict is concerned."""

    #: a sentence where the sides ran different scripts or arguments; None where the same
    different_program: Optional[str]
    base: Optional[Load]
    new: Optional[Load]

    def explains(self, difference: str) -> Optional[str]:
        """Why a ``difference`` ("slower" or "faster": NEW against BASE) may be the conditions' and not the
        code's, in words; None where nothing known explains it."""
        if self.different_program:
            return self.different_program
        if difference not in ("slower", "faster") or self.base is None or self.new is None:
            return None
        # the side that would have been slowed: NEW where NEW is slower, BASE where NEW is faster
        slowed, other = (self.new, self.base) if difference == "slower" else (self.base, self.new)
        who = "NEW" if slowed is self.new else "BASE"
        reasons = []
        if slowed.oversubscribed and slowed.others - other.others >= slowed.busier_by(other):
            reasons.append(f"{who}'s machine had more threads wanting a core than cores ({slowed.describe()}; "
                           f"the other's: {other.describe()})")
        if slowed.mhz and other.mhz and slowed.mhz < (1 - CLOCK) * other.mhz:
            reasons.append(f"{who}'s CPUs ran at {slowed.mhz:.0f} MHz, the other's at {other.mhz:.0f}")
        if not reasons:
            return None
        return ("the machine, not the code, may explain it: " + "; ".join(reasons)
                + ". Profile both on an idle machine to tell")

    def weigh(self, verdict: Verdict) -> Verdict:
        """``verdict``, or "inconclusive" saying why where the conditions may explain it: a difference in the
        direction the machines explain, or any verdict between different programs."""
        why = self.different_program or self.explains(verdict.difference)
        if why is None or verdict.difference == "unknown":
            return verdict
        return Verdict("inconclusive", f"{why} (the noise test alone: {verdict.difference}; {verdict.how})")

    def to_json(self) -> dict:
        return {"different_program": self.different_program,
                "base": None if self.base is None else asdict(self.base),
                "new": None if self.new is None else asdict(self.new)}

    def notes(self) -> List[str]:
        """What a reader should know of the conditions even where they explain nothing: each side's machine,
        where either had other work that mattered."""
        if self.base is None or self.new is None:
            return []
        if max(self.base.other_cores, self.new.other_cores) < LOAD_CORES:
            return []
        return [f"BASE's machine: {self.base.describe()}; NEW's: {self.new.describe()}"]


def conditions(base_script: str, base_args: Sequence[str], new_script: str, new_args: Sequence[str],
               base_machine: Optional[dict], new_machine: Optional[dict]) -> Conditions:
    """The :class:`Conditions` of two typical runs: their scripts, arguments and ``run.json`` machines."""
    different = None
    if Path(base_script).name != Path(new_script).name:
        different = (f"BASE profiled {base_script}, NEW {new_script}: different scripts, whose step times are "
                     "of different programs")
    elif list(base_args) != list(new_args):
        different = (f"BASE ran {Path(base_script).name} with arguments {list(base_args)}, NEW with "
                     f"{list(new_args)}: different work, whose step times need not compare")
    return Conditions(different, Load.of(base_machine), Load.of(new_machine))
