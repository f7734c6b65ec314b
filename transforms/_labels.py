"""The task label of each region a script's detection chose: one per region, unique per script."""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

from ._index import Site


def labels(found: Sequence[Tuple[Site, str, str]], overrides: Dict[int, str]) -> List[str]:
    """One task label per region, unique per script.

    A label given on the command line is kept as given. A repeated label is
    qualified by its function's name, or by its line when the same function
    has two such regions (two step loops in main()); what is still repeated
    after that gets its line too.
    """
    bases = []
    for site, role, _ in found:
        if site.line in overrides:
            bases.append((overrides[site.line], True))
        else:
            # A library call's task is named for its method (fit, evaluate); a loop's for its role.
            call = site.call is not None and role in ("train-call", "eval")
            bases.append(((site.call_label or "fit") if call else role, False))
    counts: Dict[str, int] = {}
    functions_of: Dict[str, List[Optional[str]]] = {}
    for (site, _, _), (base, _) in zip(found, bases):
        counts[base] = counts.get(base, 0) + 1
        functions_of.setdefault(base, []).append(site.function.qualname if site.function else None)
    labels: List[str] = []
    for (site, _, _), (base, forced) in zip(found, bases):
        qualname = site.function.qualname if site.function else None
        if forced or counts[base] == 1:
            labels.append(base)
        elif qualname is not None and functions_of[base].count(qualname) == 1:
            labels.append(f"{qualname.rsplit('.', 1)[-1]}.{base}")
        else:
            labels.append(f"{base}@{site.line}")
    final_counts: Dict[str, int] = {}
    for label in labels:
        final_counts[label] = final_counts.get(label, 0) + 1
    return [f"{label}@{site.line}" if final_counts[label] > 1 else label
            for (site, _, _), label in zip(found, labels)]
