"""torch.compile's graphs as rows of the operator table, named by the function compiled, not by a hash.

Under ``emit_itt`` a compiled function's call is the task ``Torch-Compiled Region: <compile id>`` around
``CompiledFunction`` (the graph's autograd function, where it trains) around
``## Call CompiledFxGraph <hash> ##`` (the forward graph's kernels); its backward is the task
``CompiledFunctionBackward`` around the backward graph's ``## Call CompiledFxGraph <hash> ##``. A graph's
self time is its fused kernels' (the ``aten::`` calls it makes are rows of their own), as in torch.profiler.

The names: the copies' runtime tells the trace which function each compile id compiled
(:mod:`instrumenter.runtime.compiled`). A forward graph belongs to the region it runs in. A backward graph
runs in the autograd engine, in no region: it belongs to the latest forward graph that ran under
``CompiledFunction`` and was not paired yet, as the engine runs backwards last-in first-out (two compiled
functions in a step, ``a`` then ``b``: ``b``'s backward first). Each graph takes the pairing most of its calls
had, over the instances the reading kept (the timeline's window of steps in a long run).
"""

from __future__ import annotations

import ast
import os
from collections import Counter, defaultdict
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ...runtime.compiled import parse
from .intervals import Intervals
from .phases import TORCH_DOMAIN

#: The tasks PyTorch names a compiled graph's call, a compiled region and the graph's autograd nodes.
GRAPH_PREFIX = "## Call CompiledFxGraph "
REGION_PREFIX = "Torch-Compiled Region: "
FORWARD_NODE = "CompiledFunction"
BACKWARD_NODE = "CompiledFunctionBackward"
#: Instances looked at per process: the pairing of the first steps' graphs holds for the rest.
_LOOKED_AT = 50_000


def graph_labels(traces: Sequence, instances: Intervals, groups: List[Tuple[str, str]],
                 file_name: Callable[[str], Optional[str]]) -> Dict[str, str]:
    """Per compiled graph's task name, its row's name: ``compiled Net.forward (train.py:12)``, with
    ``, backward`` for its backward graph; ``compiled region 0/1`` where the function is not known.
    ``file_name`` shows a file as the hotspots do (None: show the path as it is)."""
    kinds = {}
    for index, (domain, name) in enumerate(groups):
        if domain != TORCH_DOMAIN:
            continue
        if name.startswith(GRAPH_PREFIX):
            kinds[index] = "graph"
        elif name.startswith(REGION_PREFIX):
            kinds[index] = "region"
        elif name in (FORWARD_NODE, BACKWARD_NODE):
            kinds[index] = name
    graphs = [i for i, kind in kinds.items() if kind == "graph"]
    if not graphs:
        return {}
    functions = {trace.pid: _functions(trace.strings.values()) for trace in traces}
    regions: Dict[int, Counter] = defaultdict(Counter)     # forward graph -> (pid, compile id)
    forwards: Dict[int, Counter] = defaultdict(Counter)    # backward graph -> forward graph
    selected = np.flatnonzero(np.isin(instances.group, list(kinds)))
    for pid in np.unique(instances.pid[selected]):
        mine = selected[instances.pid[selected] == pid]
        mine = mine[np.lexsort((-instances.end[mine], instances.start[mine]))][:_LOOKED_AT]
        _pair(instances, mine, groups, kinds, int(pid), regions, forwards)
    named: Dict[int, Tuple[str, str, bool]] = {}  # graph -> (function, compile id, backward)
    for graph, votes in regions.items():
        (pid, compile_id), _ = votes.most_common(1)[0]
        named[graph] = (_function(functions.get(pid, {}).get(compile_id), compile_id, file_name), compile_id, False)
    for graph, votes in forwards.items():
        forward, _ = votes.most_common(1)[0]
        if forward in named and graph not in named:
            named[graph] = named[forward][:2] + (True,)
    # a function compiled more than once (new shapes, a guard failed) has a graph per compile: ids tell them apart
    compiles = defaultdict(set)
    for function, compile_id, _ in named.values():
        compiles[function].add(compile_id)
    return {groups[graph][1]: "compiled " + function + (f" [{compile_id}]" if len(compiles[function]) > 1 else "")
            + (", backward" if backward else "") for graph, (function, compile_id, backward) in named.items()}


def _pair(instances: Intervals, order: np.ndarray, groups, kinds, pid: int, regions, forwards) -> None:
    """Votes for each graph's region (forward) and forward graph (backward), from one process's instances in
    the order they began (an enclosing one first)."""
    open_by_thread: Dict[int, List[int]] = defaultdict(list)
    trained: List[int] = []  # forward graphs run under CompiledFunction, not yet paired with a backward
    for i in order:
        tid, start = int(instances.tid[i]), int(instances.start[i])
        stack = open_by_thread[tid]
        while stack and instances.end[stack[-1]] <= start:
            stack.pop()
        group = int(instances.group[i])
        if kinds[group] == "graph":
            enclosing = [kinds[int(instances.group[j])] for j in stack]
            if BACKWARD_NODE in enclosing:
                if trained:
                    forwards[group][trained.pop()] += 1
            elif "region" in enclosing:
                region = next(int(instances.group[j]) for j in reversed(stack) if kinds[int(instances.group[j])] == "region")
                regions[group][(pid, groups[region][1][len(REGION_PREFIX):])] += 1
                if FORWARD_NODE in enclosing:
                    trained.append(group)
        stack.append(i)


def _functions(strings) -> Dict[str, Tuple[str, str, int]]:
    """compile id -> (function name, file, first line), from one trace's string handles."""
    found = {}
    for text in strings:
        told = parse(text)
        if told is not None:
            found[told[0]] = told[1:]
    return found


def _function(told: Optional[Tuple[str, str, int]], compile_id: str, file_name) -> str:
    if told is None:
        return f"region {compile_id}"
    name, filename, line = told
    shown = file_name(filename) or filename
    return f"{_qualname(filename, line) or name} ({os.path.basename(shown) if shown == filename else shown}:{line})"


def _qualname(filename: str, line: int) -> Optional[str]:
    """The qualified name of the function defined at ``line`` of ``filename`` (``MLP.forward``; a decorated
    one's first line is its first decorator's), as its source says now; None where it cannot be read."""
    try:
        with open(filename, "rb") as source:
            tree = ast.parse(source.read())
    except (OSError, SyntaxError, ValueError):
        return None

    def walk(node, prefix: str) -> Optional[str]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                qualname = prefix + child.name
                first = min([child.lineno] + [d.lineno for d in child.decorator_list])
                if first == line and not isinstance(child, ast.ClassDef):
                    return qualname
                inner = ".<locals>." if not isinstance(child, ast.ClassDef) else "."
                found = walk(child, qualname + inner)
                if found:
                    return found
        return None

    return walk(tree, "")
