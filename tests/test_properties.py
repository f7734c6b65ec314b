"""Property tests: generated training-loop shapes through ``instrument_source``.

Hypothesis builds whole scripts from a small grammar: for / while / ``while
True`` / ``async for`` loops nested up to three deep, with ``else`` clauses,
``break``/``continue``/``return``/``raise``/``yield`` inside them,
``try``/``except``/``else``/``finally``, ``with`` (also ``async with`` and
``contextlib.suppress``), ``if``/``elif``/``else`` and ``match`` blocks,
decorated functions, generators, coroutines, async generators, methods of
classes, module-level loops and ``if __name__ == "__main__":`` blocks, one-line
bodies (``for x in y: step(x)``), ``loss.backward()``/``optimizer.step()``
lines that make loops steps, ``model.fit(...)`` library train calls,
comments at odd indentations, blank lines, continuation lines, LF / CRLF /
mixed newlines, spaces / tabs / a different indentation per block, a
BOM, a coding cookie, a shebang, a module docstring, ``from __future__``,
no final newline.

For every script:

(a) ``instrument_source`` neither crashes nor raises ``SourceError`` (the
    script is valid Python) or ``RewriteError`` (an autoitt bug);
(b) the instrumented copy compiles, and is recognised as already instrumented;
(c) ``strip_markers(copy)`` gives back the original bytes (``strip_markers``
    refuses the original itself);
(d) run in-process with a recording stand-in for ``ittapi`` and driven down
    every path (each guarded ``break``/``continue``/``return``/``raise``
    fires in turn; generators are drained, closed early, thrown into and
    dropped), the markers balance: per-thread task stacks, no task begun or
    ended while collection is paused (it starts paused, like ``vtune
    -start-paused``), no pause while tasks are open, collection paused again
    afterwards;
(e) the copy behaves as the original: same return values, yielded values,
    exceptions and side effects (a log the script keeps), path by path.

Everything generated is deterministic and quick (loops over ``range(3)``);
``derandomize=True`` keeps CI reproducible, and a failing script is printed in
full, unshrunk (set AUTOITT_HYPOTHESIS_SHRINK=1 to shrink it).

Shapes that hit a known, still open autoitt bug are kept out of the
properties (a comment indented deeper than its block right after a train
call, or anywhere in a file with a different indentation per block) and
pinned down by ``xfail(strict=True)`` tests at the end, with minimal
reproductions: when the bug is fixed its test passes, fails as strict, and
the marker (and the exclusion) can go. The bugs the properties found that are
fixed since have plain regression tests there.
"""

from __future__ import annotations

import atexit
import functools
import gc
import os
import sys
import threading
from dataclasses import dataclass, field, replace
from typing import Any, Callable, List, Optional, Tuple

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import transforms  # noqa: E402
from tests.itt_recorder import Recorder  # noqa: E402
from tests.test_linemap import assert_exact  # noqa: E402
from transforms import Mode, Outcome, RewriteError, SourceError, instrument_source  # noqa: E402

HAS_MATCH = sys.version_info >= (3, 10)

#: Shrinking a failing script can take minutes; CI reports the failing script
#: unshrunk (it is printed in full). AUTOITT_HYPOTHESIS_SHRINK=1 shrinks it.
_PHASES = (Phase.explicit, Phase.reuse, Phase.generate) + (
    (Phase.shrink,) if os.environ.get("AUTOITT_HYPOTHESIS_SHRINK") else ())
SETTINGS = dict(deadline=None, derandomize=True, database=None, print_blob=True, phases=_PHASES,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.large_base_example])

MAX_LOOP_DEPTH = 3
MAX_BLOCK_DEPTH = 5

# ---------------------------------------------------------------------------
# The grammar
# ---------------------------------------------------------------------------

#: The script's own first lines (in its indentation): ``step(x)`` must be a
#: function of the same file for detection to follow it.
PRELUDE = """\
import contextlib
import functools


def step(x):
    optimizer.step()
    return x
"""

#: Everything else the generated code uses, put in its namespace before it runs
#: (kept out of the script so that libcst has less to parse per example).
HELPERS = compile("""\
import contextlib
import functools
import types

LOG = []


class Boom(Exception):
    pass


class Optimizer:
    def step(self):
        LOG.append("optimizer.step")

    def zero_grad(self):
        LOG.append("zero_grad")


class Loss:
    def backward(self):
        LOG.append("backward")


optimizer = Optimizer()
loss = Loss()
model = types.SimpleNamespace(fit=lambda *args: LOG.append(("fit",) + args))


def work(*args):
    LOG.append(args)
    return len(LOG)


class Ctx:
    def __enter__(self):
        LOG.append("enter")
        return self

    def __exit__(self, *exc):
        LOG.append(("exit", exc[0].__name__ if exc[0] else None))
        return False


class ACtx:
    async def __aenter__(self):
        LOG.append("aenter")
        return self

    async def __aexit__(self, *exc):
        LOG.append(("aexit", exc[0].__name__ if exc[0] else None))
        return False


def deco(fn):
    return fn


def wrapping(fn):
    @functools.wraps(fn)
    def inner(*args, **kwargs):
        return fn(*args, **kwargs)
    return inner


def deco_factory(tag):
    def apply(fn):
        return fn
    return apply


async def arange(n):
    for k in range(n):
        yield k


async def nothing():
    return None
""", "helpers.py", "exec")


@dataclass(frozen=True)
class Where:
    """Where a statement is being generated."""

    kind: str  # module | def | gen | coro | agen
    indent: str
    in_loop: bool = False  # break/continue allowed
    in_loop_body: bool = False  # a step line here makes the enclosing (block-bodied) loop a step loop
    loop_depth: int = 0
    depth: int = 0
    in_finally: bool = False
    method: bool = False
    vars: Tuple[str, ...] = ()


@dataclass
class Entry:
    """A generated function the driver calls: ``expr`` evaluates to it in the module namespace."""

    expr: str
    kind: str


@dataclass
class Script:
    source: bytes
    text: str
    entries: List[Entry]
    triggers: List[int]
    expects_step: bool
    mode_name: str
    in_thread: bool
    description: str = ""


@functools.lru_cache(maxsize=None)
def _sampled(options: tuple):
    return st.sampled_from(options)


@functools.lru_cache(maxsize=None)
def _integers(low: int, high: int):
    return st.integers(low, high)


@dataclass
class _Builder:
    draw: Callable[[Any], Any]
    indent_style: str
    latin1: bool
    itt_taken: bool
    #: comments indented deeper than their block (lost by strip after some wrapped statements)
    deeper_comments: bool = True
    ids: int = 0
    names: int = 0
    triggers: List[int] = field(default_factory=list)
    expects_step: bool = False
    yields: int = 0

    # -- small helpers ---------------------------------------------------------

    def chance(self, one_in: int) -> bool:
        return self.draw(_integers(0, one_in - 1)) == 0

    def pick(self, options):
        return self.draw(_sampled(tuple(options)))

    def unit(self) -> str:
        if self.indent_style == "mixed":
            return self.pick(["    ", "  ", "\t", " ", "\t  "])
        return {"spaces4": "    ", "spaces2": "  ", "tabs": "\t"}[self.indent_style]

    def fresh(self, prefix: str) -> str:
        self.names += 1
        return f"{prefix}{self.names}"

    def trigger(self) -> int:
        self.ids += 1
        self.triggers.append(self.ids)
        return self.ids

    def value(self, ctx: Where) -> str:
        return self.pick(ctx.vars) if ctx.vars else "0"

    def comment(self, ctx: Where, deeper: bool = True) -> str:
        deeper = deeper and self.deeper_comments
        where = self.pick(["same", "same", "column0", "deeper"] if deeper else ["same", "same", "column0"])
        indent = {"same": ctx.indent, "column0": "", "deeper": ctx.indent + "   "}[where]
        text = self.pick(["# a comment", "#", "# ünïcode", "# TODO: tune lr"] if self.latin1
                         else ["# a comment", "#", "# ünïcode ✓", "# TODO: tune lr", "#\tcomment with a tab"])
        return indent + text

    def blank(self) -> str:
        return self.pick(["", "", "   ", "\t"])

    def trailing(self) -> str:
        return self.pick(["", "", "", "  # trailing", "\t# tab then comment"])

    # -- simple statements ------------------------------------------------------

    def step_line(self, ctx: Where) -> str:
        options = ["optimizer.step()", "loss.backward()", f"step({self.value(ctx)})",
                   "optimizer.zero_grad(); loss.backward(); optimizer.step()"]
        if ctx.method:
            options.append("self.optimizer.step()")
        if ctx.in_loop_body:
            self.expects_step = True
        return self.pick(options)

    def simple_line(self, ctx: Where) -> List[str]:
        """One simple statement (maybe on several physical lines)."""
        v = self.value(ctx)
        i = ctx.indent
        options = ["work", "assign", "paren", "backslash", "pass", "semicolons", "string", "fit", "comprehension"]
        if ctx.kind in ("coro", "agen"):
            options.append("await")
        if self.itt_taken:
            options.append("itt")
        choice = self.pick(options)
        if choice == "work":
            return [f"{i}work({v}){self.trailing()}"]
        if choice == "assign":
            return [f"{i}{self.fresh('t')} = work({v}, 1)"]
        if choice == "paren":
            return [f"{i}{self.fresh('t')} = (work({v}) +", f"{i}        1){self.trailing()}"]
        if choice == "backslash":
            return [f"{i}work({v}, \\", f"{i}     2)"]
        if choice == "pass":
            return [f"{i}pass"]
        if choice == "semicolons":
            return [f"{i}optimizer.zero_grad(); work({v})"]
        if choice == "string":
            return [f'{i}"""a note about {v}"""']
        if choice == "fit":
            return [f"{i}{self.pick(['', self.fresh('h') + ' = '])}model.fit({v}){self.trailing()}"]
        if choice == "comprehension":
            return [f"{i}{self.fresh('c')} = [work(j) for j in range(2)]"]
        if choice == "await":
            return [f"{i}await nothing()"]
        return [f"{i}work(itt)"]

    def one_line_suite(self, ctx: Where) -> str:
        """The simple statements of a one-line body: ``work(x); step(x)``."""
        parts = []
        for _ in range(self.draw(_integers(1, 2))):
            if self.chance(2):
                # no self.expects_step: autoitt leaves one-line bodies alone
                parts.append(self.pick(["optimizer.step()", "loss.backward()", f"step({self.value(ctx)})"]))
            else:
                parts.append(self.pick([f"work({self.value(ctx)})", "pass", f"model.fit({self.value(ctx)})"]))
        return "; ".join(parts)

    def control(self, ctx: Where) -> Optional[List[str]]:
        """A guarded ``break``/``continue``/``return``/``raise``; ``None`` when none fits here."""
        generator = ctx.kind in ("gen", "agen")
        if ctx.in_finally and generator:
            # A finally that raises, breaks or returns while close() unwinds the generator
            # swallows GeneratorExit: the script's own bug ("generator ignored GeneratorExit").
            return None
        options = ["raise"]
        if ctx.in_loop:
            options += ["break", "continue"]
        if ctx.kind != "module":
            options.append("return")
        what = self.pick(options)
        k = self.trigger()
        if what == "raise":
            statement = f"raise Boom({k})"
        elif what == "return":
            statement = "return" if generator or self.chance(3) else f"return {k}"
        else:
            statement = what
        condition = f"TRIGGER == {k}"
        if ctx.vars and self.chance(2):
            condition += f" and {self.pick(ctx.vars)} == 1"
        if self.chance(2):
            return [f"{ctx.indent}if {condition}: {statement}"]
        inner = ctx.indent + self.unit()
        return [f"{ctx.indent}if {condition}:{self.trailing()}", f"{inner}{statement}"]

    def yield_line(self, ctx: Where) -> List[str]:
        self.yields += 1
        v = self.value(ctx)
        options = [f"yield {v}", f"{self.fresh('got')} = yield {v}", f"yield ({v}, 'x')"]
        if ctx.kind == "gen":
            options.append("yield from range(2)")
        return [ctx.indent + self.pick(options)]

    # -- blocks -------------------------------------------------------------------

    def block(self, ctx: Where, force_step: bool = False, head: Tuple[str, ...] = (),
              force_yield: bool = False) -> List[str]:
        """A block at ``ctx.indent``: ``head`` lines first, then 1-3 statements."""
        statements: List[List[str]] = [self.statement(ctx) for _ in range(self.draw(_integers(1, 3)))]
        if force_step:
            statements.insert(self.draw(_integers(0, len(statements))), [ctx.indent + self.step_line(ctx)])
        if force_yield:
            statements.insert(self.draw(_integers(0, len(statements))), self.yield_line(ctx))
        lines: List[str] = [ctx.indent + line for line in head]
        # A comment indented deeper than its block right after a train call is lost by
        # strip (test_known_bug_comment_after_a_wrapped_statement_is_lost_by_strip): not generated here.
        after_call = False
        for statement in statements:
            if self.chance(6):
                lines.append(self.comment(ctx, deeper=not after_call))
            if self.chance(8):
                lines.append(self.blank())
            lines.extend(statement)
            after_call = "model.fit(" in statement[-1]
        if self.chance(8):
            lines.append(self.comment(ctx, deeper=not after_call))  # after the block's last statement
        return lines

    def statement(self, ctx: Where) -> List[str]:
        options = ["simple", "simple", "step"]
        if ctx.in_loop or ctx.kind != "module":
            options += ["control", "control"]
        if ctx.kind in ("gen", "agen") and not ctx.in_finally:
            options.append("yield")
        if ctx.depth < MAX_BLOCK_DEPTH:
            options += ["if", "try", "with"]
            if HAS_MATCH:
                options.append("match")
            if ctx.loop_depth < MAX_LOOP_DEPTH:
                options += ["loop", "loop"]
        choice = self.pick(options)
        if choice == "simple":
            return self.simple_line(ctx)
        if choice == "step":
            return [ctx.indent + self.step_line(ctx) + self.trailing()]
        if choice == "control":
            return self.control(ctx) or self.simple_line(ctx)
        if choice == "yield":
            return self.yield_line(ctx)
        if choice == "loop":
            return self.loop(ctx)
        return getattr(self, choice + "_statement")(ctx)

    def inner(self, ctx: Where, **changes) -> Where:
        return replace(ctx, indent=ctx.indent + self.unit(), depth=ctx.depth + 1, **changes)

    def loop(self, ctx: Where, force_step: bool = False, force_yield: bool = False) -> List[str]:
        kinds = ["for", "for", "while", "while_true"]
        if ctx.kind in ("coro", "agen"):
            kinds += ["async_for", "async_for"]
        kind = self.pick(kinds)
        var = self.fresh({"for": "i", "async_for": "a"}.get(kind, "n"))
        i = ctx.indent
        before: List[str] = []
        head: Tuple[str, ...] = ()
        if kind == "for":
            header = f"for {var} in range(3):"
        elif kind == "async_for":
            header = f"async for {var} in arange(3):"
        elif kind == "while":
            before, header, head = [f"{i}{var} = 0"], f"while {var} < 3:", (f"{var} += 1",)
        else:
            before, header = [f"{i}{var} = 0"], "while True:"
            head = (f"{var} += 1", f"if {var} > 3: break")
        if kind != "while_true" and not force_yield and self.chance(5):
            # a one-line body: ``for x in y: step(x)``
            body = self.one_line_suite(replace(ctx, vars=ctx.vars + (var,)))
            if head:
                body = f"{head[0]}; {body}"
            lines = [*before, f"{i}{header} {body}"]
        else:
            body_ctx = self.inner(ctx, in_loop=True, in_loop_body=True, loop_depth=ctx.loop_depth + 1,
                                  vars=ctx.vars + (var,))
            if kind == "while_true" and self.chance(2):
                # the break on a line of its own
                head = (head[0], f"if {var} > 3:", f"{self.unit()}break")
            body = self.block(body_ctx, force_step or not self.chance(5), head, force_yield)
            lines = [*before, f"{i}{header}{self.trailing()}", *body]
        if self.chance(4):
            else_ctx = self.inner(ctx)
            lines.append(f"{i}else:{self.trailing()}")
            lines.extend(self.block(else_ctx))
        return lines

    def if_statement(self, ctx: Where) -> List[str]:
        v = self.value(ctx)
        if self.chance(2):
            condition = f"{v} % 2 == 0"
        else:
            condition = f"TRIGGER == {self.trigger()}"
        lines = [f"{ctx.indent}if {condition}:{self.trailing()}", *self.block(self.inner(ctx))]
        if self.chance(3):
            lines += [f"{ctx.indent}elif {v} == 1:", *self.block(self.inner(ctx))]
        if self.chance(2):
            lines += [f"{ctx.indent}else:", *self.block(self.inner(ctx))]
        return lines

    def try_statement(self, ctx: Where) -> List[str]:
        i = ctx.indent
        shape = self.pick(["except", "finally", "except-finally", "except-else-finally"])
        lines = [f"{i}try:{self.trailing()}", *self.block(self.inner(ctx))]
        if "except" in shape:
            clause = self.pick(["except Boom:", "except (ValueError, Boom) as err:", "except Boom as err:"])
            handler = self.pick(["pass", "raise", "block"])
            lines.append(f"{i}{clause}")
            if handler == "block":
                lines += self.block(self.inner(ctx))
            else:
                lines.append(f"{i}{self.unit()}{handler}")
        if "else" in shape:
            lines += [f"{i}else:", *self.block(self.inner(ctx))]
        if "finally" in shape:
            lines += [f"{i}finally:", *self.block(self.inner(ctx, in_finally=True))]
        return lines

    def with_statement(self, ctx: Where) -> List[str]:
        options = ["with Ctx():", f"with Ctx() as {self.fresh('cm')}, Ctx():", "with contextlib.suppress(Boom):"]
        if ctx.kind in ("coro", "agen"):
            options.append("async with ACtx():")
        return [f"{ctx.indent}{self.pick(options)}{self.trailing()}", *self.block(self.inner(ctx))]

    def match_statement(self, ctx: Where) -> List[str]:
        case_ctx = self.inner(ctx)
        return [
            f"{ctx.indent}match {self.value(ctx)}:",
            f"{case_ctx.indent}case 0:",
            *self.block(self.inner(case_ctx)),
            f"{case_ctx.indent}case _:",
            *self.block(self.inner(case_ctx)),
        ]

    # -- units ----------------------------------------------------------------------

    def function_unit(self, index: int) -> Tuple[List[str], Entry]:
        kind = self.pick(["def", "def", "gen", "coro", "agen"])
        base = self.pick(["train", "fit_model", "run", "evaluate", "validate", "main", "loop"])
        name = f"{base}_{index}"
        in_class = self.chance(3)
        lines: List[str] = []
        indent = ""
        class_name = f"Trainer_{index}"
        if in_class:
            lines.append(f"class {class_name}:")
            indent = self.unit()
            if self.chance(2):
                lines.append(f'{indent}"""A trainer."""')
            lines.append(f"{indent}optimizer = optimizer")
            if self.chance(2):
                lines += ["", f"{indent}epochs = 3", ""]
        decorators = [self.pick(["@deco", "@wrapping", "@deco_factory(1)"]) for _ in range(self.draw(_integers(0, 2)))]
        params = "self"
        if in_class and self.chance(4):
            decorators.insert(0, "@classmethod")
            params = "cls"
        lines += [indent + decorator for decorator in decorators]
        keyword = "async def" if kind in ("coro", "agen") else "def"
        lines.append(f"{indent}{keyword} {name}({params if in_class else ''}):{self.trailing()}")
        ctx = Where(kind=kind, indent=indent + self.unit(), depth=1, method=in_class and params == "self")
        self.yields = 0
        body: List[str] = []
        if self.chance(3):
            body.append(f'{ctx.indent}"""Train for a while."""')
        for _ in range(self.draw(_integers(0, 1))):
            body += self.simple_line(ctx)
        body += self.loop(ctx, force_step=True, force_yield=kind in ("gen", "agen") and not self.chance(2))
        for _ in range(self.draw(_integers(0, 2))):
            body += self.statement(ctx)
        if kind in ("gen", "agen") and self.yields == 0:
            body.append(f"{ctx.indent}yield -1")
        if kind in ("def", "coro") and self.chance(2):
            body.append(f"{ctx.indent}return {self.pick(['0', 'LOG[-1:]', 'None'])}")
        lines += body
        expr = f"{class_name}().{name}" if in_class else name
        return lines, Entry(expr, kind)

    def module_unit(self) -> List[str]:
        if self.chance(2):
            ctx = Where(kind="module", indent=self.unit(), depth=1)
            return ['if __name__ == "__main__":', *self.loop(ctx, force_step=True)]
        return self.loop(Where(kind="module", indent=""), force_step=True)


MODES = {
    "default": Mode(),
    "pt-regions": Mode(pt_regions=True),
    "window": Mode(skip_steps=1, steps=2),
    "window-open-ended": Mode(skip_steps=2),
}


#: One indentation unit for the whole file (the ``mixed`` style gives each block its own).
UNIFORM_INDENTS = ("spaces4", "spaces4", "spaces2", "tabs")


@st.composite
def scripts(draw, modes=("default",), indents=UNIFORM_INDENTS, deeper_comments=True) -> Script:
    newline = draw(st.sampled_from(["\n", "\n", "\r\n", "mixed"]))
    indent_style = draw(st.sampled_from(indents))
    encoding = draw(st.sampled_from(["utf-8", "utf-8", "utf-8-sig", "latin-1"]))
    builder = _Builder(draw, indent_style, latin1=encoding == "latin-1", itt_taken=draw(st.booleans()),
                       deeper_comments=deeper_comments)

    head: List[str] = []
    if draw(st.integers(0, 3)) == 0:
        head.append("#!/usr/bin/env python")
    if encoding == "latin-1":
        head.append("# -*- coding: latin-1 -*-")
    elif draw(st.integers(0, 4)) == 0:
        head.append("# -*- coding: utf-8 -*-")
    if draw(st.booleans()):
        head.append('"""A generated training script (ünïcode)."""')
    if draw(st.integers(0, 3)) == 0:
        head.append("from __future__ import annotations")

    prelude = PRELUDE.splitlines()
    # the prelude in the script's own indentation
    unit = builder.unit() if indent_style != "mixed" else "    "
    prelude = [line.replace("    ", unit) for line in prelude]
    if builder.itt_taken:
        prelude += ["", "itt = 'a name the script uses itself'"]

    units: List[List[str]] = []
    entries: List[Entry] = []
    for index in range(draw(st.integers(1, 3))):
        if draw(st.integers(0, 3)) == 0:
            units.append(builder.module_unit())
        else:
            lines, entry = builder.function_unit(index)
            units.append(lines)
            entries.append(entry)

    lines = head + prelude
    for unit_lines in units:
        lines += [""] * draw(st.integers(0, 2)) + unit_lines
    if draw(st.integers(0, 4)) == 0:
        lines.append("# the end")

    final_newline = draw(st.integers(0, 4)) != 0
    if newline == "mixed":
        choices = draw(st.lists(st.sampled_from(["\n", "\r\n"]), min_size=len(lines), max_size=len(lines)))
        text = "".join(line + nl for line, nl in zip(lines, choices))
    else:
        text = newline.join(lines) + newline
    if not final_newline:
        text = text.rstrip("\r\n")
    data = text.encode(encoding)
    return Script(
        source=data,
        text=text,
        entries=entries,
        triggers=list(builder.triggers),
        expects_step=builder.expects_step,
        mode_name=draw(st.sampled_from(list(modes))),
        in_thread=draw(st.integers(0, 4)) == 0,
        description=f"newline={newline!r} indent={indent_style} encoding={encoding} "
                    f"final_newline={final_newline}",
    )


# ---------------------------------------------------------------------------
# Running a script down every path
# ---------------------------------------------------------------------------


def _drive(coro):
    """Run a coroutine that never really suspends (the generated ones do not)."""
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    coro.close()
    raise AssertionError("a generated coroutine suspended")


def _outcome(fn: Callable[[], Any]) -> Tuple[str, Any]:
    try:
        return "value", fn()
    except Exception as exc:  # noqa: BLE001 - compared between the original and the copy
        return "raised", (type(exc).__name__, str(exc))


def _actions(kind: str, boom: type):
    """(name, action) pairs; an action takes the function and returns something comparable.

    ``boom`` is the script's own exception class, thrown into generators.
    """
    if kind == "def":
        return [("call", lambda f: f())]
    if kind == "coro":
        def close_unstarted(f):
            coro = f()
            coro.close()
        return [("run", lambda f: _drive(f())), ("close-unstarted", close_unstarted)]
    if kind == "gen":
        def first_then(f, finish):
            generator = f()
            try:
                first = next(generator)
            except StopIteration as stop:
                return ("empty", stop.value)
            return (first, finish(generator))

        def throw(generator):
            try:
                return generator.throw(boom(-1))
            finally:
                generator.close()

        def drop(generator):
            del generator
            return None

        return [
            ("drain", lambda f: list(f())),
            ("close", lambda f: first_then(f, lambda g: g.close())),
            ("throw", lambda f: first_then(f, throw)),
            ("drop", lambda f: first_then(f, drop)),
        ]
    assert kind == "agen"

    def drain(f):
        agen, values = f(), []
        while True:
            try:
                values.append(_drive(agen.__anext__()))
            except StopAsyncIteration:
                return values

    def first_then(f, finish):
        agen = f()
        try:
            first = _drive(agen.__anext__())
        except StopAsyncIteration:
            return "empty"
        return (first, finish(agen))

    def athrow(agen):
        try:
            return _drive(agen.athrow(boom(-1)))
        finally:
            _drive(agen.aclose())

    return [
        ("drain", drain),
        ("close", lambda f: first_then(f, lambda a: _drive(a.aclose()))),
        ("throw", lambda f: first_then(f, athrow)),
    ]


def _run_all(code, script: Script, recorder: Optional[Recorder]) -> List[Any]:
    """Every path of the script: what each one returned, raised and logged."""
    observed: List[Any] = []

    def check(where: str) -> None:
        if recorder is None:
            return
        if recorder.open_tasks or recorder.collecting:
            gc.collect()  # a generator dropped while suspended is closed by the collector
        try:
            recorder.assert_balanced()
        except AssertionError as exc:
            raise AssertionError(f"markers unbalanced after {where}: {exc}\nlast calls: {recorder.calls[-12:]}") from None
        recorder.calls.clear()

    def run(fn):
        if not script.in_thread:
            return _outcome(fn)
        box: dict = {}
        thread = threading.Thread(target=lambda: box.setdefault("result", _outcome(fn)))
        thread.start()
        thread.join()
        return box["result"]

    for trigger in [None, *script.triggers]:
        namespace: dict = {"__name__": "__main__", "TRIGGER": trigger}
        exec(HELPERS, namespace)
        observed.append(("exec", trigger, run(lambda: exec(code, namespace))))
        check(f"running the module with TRIGGER={trigger}")
        log = namespace.get("LOG")
        if log is None:
            continue
        observed.append(list(log))
        log.clear()
        for entry in script.entries:
            try:
                function = eval(entry.expr, namespace)
            except NameError:
                observed.append(("undefined", entry.expr))
                continue
            for name, action in _actions(entry.kind, namespace["Boom"]):
                observed.append((entry.expr, name, trigger, run(lambda: action(function))))
                observed.append(list(log))
                log.clear()
                check(f"{entry.expr} [{name}] with TRIGGER={trigger}")
    return observed


def _failure_context(script: Script, output: Optional[bytes] = None) -> str:
    text = f"{script.description} mode={script.mode_name}\n--- script ---\n{script.text}"
    if output is not None:
        text += f"\n--- copy ---\n{output.decode('utf-8', 'replace')}"
    return text


def _check_script(script: Script) -> None:
    mode = MODES[script.mode_name]
    name = "generated_train.py"
    original_code = compile(script.source, name, "exec", dont_inherit=True)  # the generator's own sanity

    # (a) no crash, no SourceError, no RewriteError
    try:
        result = instrument_source(script.source, name, mode)
    except SourceError as exc:
        pytest.fail(f"SourceError on valid generated code: {exc}\n{_failure_context(script)}")
    except RewriteError as exc:
        pytest.fail(f"RewriteError (autoitt's own check failed): {exc}\n{_failure_context(script)}")

    with pytest.raises(SourceError):
        transforms.strip_markers(script.source, name)  # not a copy autoitt wrote

    if script.expects_step:
        # A loop whose own body updates parameters is a step loop, or an epoch loop when
        # it also holds one (possibly a one-line loop, which itself is left unmarked).
        assert result.outcome is Outcome.INSTRUMENTED, _failure_context(script)
        roles = {region.role for region in result.detection.regions}
        assert roles & {"step", "epoch"}, _failure_context(script)
    if result.outcome is not Outcome.INSTRUMENTED:
        return
    output = result.output
    context = _failure_context(script, output)

    # (b) the copy compiles and is recognised as a copy
    copy_code = compile(output, "generated_train_itt.py", "exec", dont_inherit=True)
    assert instrument_source(output, "generated_train_itt.py", mode).outcome is Outcome.ALREADY_INSTRUMENTED, context

    # (c) strip gives back the original, byte for byte, and the line map is exact
    assert transforms.strip_markers(output, "generated_train_itt.py") == script.source, context
    assert_exact(script.source, output, result.line_map, result.source.encoding)

    # (d) balanced markers on every path, (e) same behaviour as the original
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(atexit, "register", lambda *args, **kwargs: None)  # CollectionWindow's end-of-run note
        recorder = Recorder().install(patch)
        try:
            got = _run_all(copy_code, script, recorder)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{context}") from None
    expected = _run_all(original_code, script, None)
    assert got == expected, f"the copy behaves differently from the original\n{context}"


def _settings(examples: int):
    return settings(max_examples=examples, **SETTINGS)


# ---------------------------------------------------------------------------
# The properties
# ---------------------------------------------------------------------------


@_settings(50)
@given(scripts())
@pytest.mark.slow
def test_generated_scripts_instrument_strip_and_balance(script):
    _check_script(script)


@_settings(20)
@given(scripts(modes=("pt-regions", "window", "window-open-ended")))
@pytest.mark.slow
def test_generated_scripts_balance_in_every_mode(script):
    _check_script(script)


@_settings(20)
@given(scripts(modes=tuple(MODES), indents=("mixed",), deeper_comments=False))
@pytest.mark.slow
def test_generated_scripts_with_an_indentation_per_block(script):
    # A different indentation unit per block (tabs, 1, 2, 4 spaces, tab+spaces); this is
    # what found test_body_at_the_default_indent_inside_another_indent. Comments deeper than
    # their block are left out: see test_known_bug_comment_after_a_wrapped_statement_is_lost_by_strip.
    _check_script(script)


# ---------------------------------------------------------------------------
# Minimal reproductions of what the properties (and probing around them) found
# ---------------------------------------------------------------------------


def test_body_at_the_default_indent_inside_another_indent():
    # Found by the properties: up to c3e1d07, _rewrite._wrap_body read a body's
    # IndentedBlock.indent of None (libcst: "the module's default indent") as "the
    # enclosing block's unit" and moved the user's statements; the safety check refused.
    source = (b"def f():\n"
              b"    pass\n"
              b"for i in range(3):\n"
              b"  for j in range(3):\n"
              b"      loss.backward()\n")
    result = instrument_source(source, "mixed_indent.py")
    assert transforms.strip_markers(result.output, "mixed_indent_itt.py") == source


STEP_LOOP = b"for x in y:\n    loss.backward()\n"


@pytest.mark.xfail(strict=True, reason=(
    "autoitt bug: a comment after the last statement of a wrapped region (a train call, or a loop "
    "body indented unlike the file's first block), indented between that statement and the marker "
    "'finally:' body, lands in the footer of the 'finally:' block when the copy is parsed again; "
    "strip drops that footer. The safety check strips the in-memory tree, not the re-parsed copy, "
    "so it passes and the comment is lost only by 'autoitt strip'"))
@pytest.mark.parametrize("source", [
    b"model.fit(x)\n    # commented = out\nz = 1\n",
    b"def f():\n    model.fit(x)\n            # deeper\n    z = 1\n",
    b"if a:\n  if x:\n    h = model.fit(0)\n       # deeper\n    t = 1\n",
    b"def f():\n    pass\nfor x in y:\n\t  loss.backward()\n    # c\nz = 1\n",
], ids=["module", "function", "two-space-if", "tab-indented-loop-body"])
def test_known_bug_comment_after_a_wrapped_statement_is_lost_by_strip(source):
    output = instrument_source(source, "comment.py").output
    assert transforms.strip_markers(output, "comment_itt.py") == source


@pytest.mark.parametrize("before", [b"import torch\n\x0c\n", "s = '\u2028'\n".encode(), "# note\x85\n".encode()],
                         ids=["form-feed-line", "u2028-in-string", "nel-in-comment"])
def test_line_separators_do_not_hide_the_loops_below(before):
    # Found by probing: up to c3e1d07, detection numbered lines with str.splitlines(),
    # which also splits at form feed, \x0b, \x1c-\x1e, \x85, \u2028 and \u2029: every later
    # line was off by one, and the loop was left alone as "body on the header line".
    result = instrument_source(before + STEP_LOOP, "separators.py")
    assert [region.role for region in result.detection.regions] == ["step"], result.detection.notes


@pytest.mark.parametrize("source", [STEP_LOOP + b"   \n\t\n", STEP_LOOP.replace(b"\n", b"\r")],
                         ids=["whitespace-only-lines-at-the-end", "cr-only-newlines"])
def test_files_libcst_cannot_reproduce_are_refused_not_altered(source):
    # Found by probing: libcst drops whitespace-only lines at the end of a file and
    # the final newline of a CR-only file; autoitt up to c3e1d07 compared trees in its
    # safety check, so the copy silently lost them. Now they are refused, naming the line.
    with pytest.raises(RewriteError, match="libcst cannot reproduce this file exactly .*line 3"):
        instrument_source(source, "round_trip.py")


@pytest.mark.parametrize("alias", [b"itt", b"foo"])
def test_a_script_importing_ittapi_compat_keeps_its_import_and_gets_autoitts_tasks(alias):
    # Found by probing: autoitt at a831581..c3e1d07 raised RewriteError (its own
    # safety check failed) for a script that imports ittapi.compat without calling it.
    source = b"import ittapi.compat as " + alias + b"\n" + STEP_LOOP
    result = instrument_source(source, "own_ittapi.py")
    assert result.outcome is Outcome.INSTRUMENTED
    assert result.detection.already_instrumented == "hand (imports ittapi.compat at line 1)"
    assert result.output.startswith(b"import ittapi.compat as " + alias + b"\n")
    assert transforms.strip_markers(result.output, "own_ittapi_itt.py") == source


@pytest.mark.parametrize("names", [b"_autoitt_domain = 1\n", b"itt = 1\n_autoitt_itt = 2\n"],
                         ids=["_autoitt_domain", "itt-and-_autoitt_itt"])
def test_a_script_using_autoitt_names_is_instrumented_exactly(names):
    # Found by probing: the planner reused names the script binds, and strip then removed
    # every module-level `_autoitt_*` assignment, the user's own included.
    source = names + STEP_LOOP
    result = instrument_source(source, "names.py")
    assert transforms.strip_markers(result.output, "names_itt.py") == source


@pytest.mark.parametrize("mode, marker", [
    (dict(domain="a\nb"), '_autoitt_domain = itt.domain_create("a\\nb")'),
    (dict(labels=((1, "a\nb"),)), 'itt.task_begin(_autoitt_domain, "a\\nb")'),
], ids=["domain", "label"])
def test_a_newline_in_the_domain_or_a_label_is_written_as_an_escape(mode, marker):
    # Found by probing: up to c3e1d07, _plan._quote escaped only quotes and backslashes, and
    # `autoitt instrument --domain $'a\nb'` failed with libcst's ParserSyntaxError
    # ("internal error ... a bug in autoitt").
    result = instrument_source(STEP_LOOP, "quoted.py", Mode(**mode))
    assert marker in [line.strip() for line in result.output.decode().splitlines()]


@pytest.mark.slow
def test_the_grammar_reaches_every_shape():
    """The generator itself: the shapes the docstring promises do come up (so the properties mean something)."""
    seen: dict = {}
    wanted = {
        "async for": "async for ", "while True": "while True:", "loop else": "else:", "try/finally": "finally:",
        "with": "with Ctx", "async with": "async with", "yield": "yield", "break": "break", "continue": "continue",
        "return": "return", "raise": "raise Boom", "decorator": "@", "class": "class Trainer_",
        "one-line body": "in range(3): ", "backward": "loss.backward()", "fit": "model.fit(",
        "tab indent": "\n\t", "crlf": "\r\n", "main block": "if __name__", "except": "except",
        "classmethod": "@classmethod", "suppress": "contextlib.suppress", "future": "from __future__",
        "BOM": "\ufeff",
    }
    if HAS_MATCH:
        wanted["match"] = "match "

    @settings(max_examples=80, **SETTINGS)
    @given(scripts())
    def collect(script):
        text = script.source.decode("utf-8", "replace")
        for label, needle in wanted.items():
            if needle in text:
                seen[label] = seen.get(label, 0) + 1
        seen["expects step"] = seen.get("expects step", 0) + script.expects_step
        for entry in script.entries:
            seen[entry.kind] = seen.get(entry.kind, 0) + 1
        seen["thread"] = seen.get("thread", 0) + script.in_thread

    collect()
    missing = [label for label in [*wanted, "expects step", "def", "gen", "coro", "agen", "thread"]
               if not seen.get(label)]
    assert not missing, (missing, seen)


def test_a_script_binding_its_own_collection_keeps_that_line():
    # Found in review: the matcher took any `x = Collection(...)` for a header line, so a
    # script with `from collections import Counter as Collection` failed the safety check.
    source = b'from collections import Counter as Collection\nx = Collection("ab")\n' + STEP_LOOP
    result = instrument_source(source, "coll.py")
    assert result.outcome is Outcome.INSTRUMENTED
    assert transforms.strip_markers(result.output, "coll_itt.py") == source
