"""The one configuration object threaded through detection, planning and rewriting."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Optional, Tuple

#: ``Mode.torch_ops``: every operator of training, those of a sample of the iterations, or none (the runtime's
#: ``instrumenter.runtime.torch_ops.TORCH_OPS``; a test holds them equal).
TORCH_OPS = ("all", "sampled", "off")

#: VTune's anomaly-detection API accepts region ids 0..7 (ittnotify.h).
MAX_PT_REGIONS = 8


@dataclass(frozen=True)
class Mode:
    """How a script is instrumented.

    ``domain``: the ITT domain name; ``None`` derives ``autoitt.<script stem>``.
    ``torch_ops``: PyTorch's operators as labelled tasks: ``all`` wraps training
    regions in ``emit_itt()``; ``sampled`` has the runtime enter it for a sample
    of the step and eval iterations (:mod:`instrumenter.runtime.torch_ops`), and
    a copy with a collection window (``skip_steps``/``steps``) records all
    of its few steps instead; ``off`` records none.
    ``skip_steps``/``steps``: the collection window, counted in step iterations
    across epochs (``steps=None`` collects to the end of the region).
    ``pt_regions``: also mark each step for VTune's anomaly detection.
    ``labels``: task label overrides, keyed by the 1-based line of the loop or
    call in the script the user named (not in the modules it imports).
    ``roles``: role overrides (step, epoch, eval, train-call, skip), keyed the same way.
    ``launched``: the copy runs under autoitt's launcher (``autoitt profile``), so it imports the runtime
    from the package the launcher provides (``_autoitt``), which no package of the user's can shadow;
    otherwise from autoitt's installed ``instrumenter.runtime``.

    What differs between the files of one project (whether a file controls
    collection) is not an option: see :func:`transforms.instrument`.
    """

    domain: Optional[str] = None
    torch_ops: str = "all"
    skip_steps: int = 0
    steps: Optional[int] = None
    pt_regions: bool = False
    labels: Tuple[Tuple[int, str], ...] = field(default_factory=tuple)
    roles: Tuple[Tuple[int, str], ...] = field(default_factory=tuple)
    launched: bool = False

    def __post_init__(self) -> None:
        if self.torch_ops not in TORCH_OPS:
            raise ValueError(f"torch_ops must be one of {', '.join(TORCH_OPS)}")
        if self.skip_steps < 0:
            raise ValueError("skip_steps must be >= 0")
        if self.steps is not None and self.steps < 1:
            raise ValueError("steps must be >= 1")

    @property
    def operators_sampled(self) -> bool:
        """Whether the runtime records PyTorch's operators in a sample of the iterations: ``sampled``, unless a
        collection window already bounds the steps collected."""
        return self.torch_ops == "sampled" and not self.windowed

    @property
    def windowed(self) -> bool:
        """True when collection is limited to a window of steps."""
        return self.skip_steps > 0 or self.steps is not None

    @property
    def label_overrides(self) -> Mapping[int, str]:
        return dict(self.labels)

    @property
    def role_overrides(self) -> Mapping[int, str]:
        return dict(self.roles)

    def domain_for(self, script_stem: str) -> str:
        """The domain given, else ``autoitt.<stem>`` (a file name's undecodable bytes become U+FFFD:
        ITT names are UTF-8)."""
        if self.domain:
            return self.domain
        return "autoitt." + script_stem.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
