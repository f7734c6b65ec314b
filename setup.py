"""Builds autoitt's compiled parts: the ITT collector, the trace reader's inner loop, a frameless wrapper.

``instrumenter/collector/*.c`` become ``instrumenter/collector/_collector*.so`` (one translation unit per job: the
process's life, the ITT binding, the writer, the trace limit, the task stack, counters, the sampler, its
hooks, unwinder and Python frames, and what they all use (the process's identity, the clock); ``format.h`` holds
the file formats).
It is a plain shared library for Intel's ITT static parts to ``dlopen``
(through ``INTEL_LIBITTNOTIFY64``): it has no ``PyInit`` and is never imported;
``instrumenter.collector.library_path()`` finds it.
``instrumenter/builtin/trace/pairing.c`` becomes ``instrumenter/builtin/trace/_pairing*.so`` (bound with ctypes).
``instrumenter/runtime/around.c`` and ``markers.c`` become the Python modules ``instrumenter.runtime._around`` and
``_markers``. The collector and the
trace reader include ``format.h``, generated here from ``instrumenter/collector/formats.py``. Building needs a C compiler
(gcc or clang); everything else about the package is in pyproject.toml.
"""

import importlib.util
import os
import shutil
import sys
import sysconfig

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.errors import CompileError

#: What to install where the build cannot compile, by distribution (the compiler and the interpreter's headers).
_WHAT_TO_INSTALL = ("Debian/Ubuntu: apt-get install gcc python3-dev (python3.X-dev for another version); "
                    "Fedora/RHEL: dnf install gcc python3-devel; Alpine: apk add gcc musl-dev python3-dev; "
                    "conda: conda install -c conda-forge c-compiler. Or install a wheel of autoitt built on a "
                    "machine that has them, for the same Python version (pip wheel autoitt there, then pip install "
                    "the .whl here): it needs no compiler (README, \"Installing without a C compiler\")")


def _cannot_build() -> str:
    """Why the C parts cannot be compiled here, said before the compiler's own error would be, or ''."""
    include = sysconfig.get_paths()["include"]
    if not os.path.isfile(os.path.join(include, "Python.h")):
        return f"this Python's development headers are missing ({include}/Python.h)"
    return ""


class build_ext_with_formats(build_ext):
    """Writes ``format.h`` (the record layouts and constants shared with the readers) from
    ``instrumenter/collector/formats.py`` into the build's temporary folder, first on every extension's include
    path, before compiling: the C side never holds a copy of its own."""

    def run(self):
        spec = importlib.util.spec_from_file_location(
            "_autoitt_formats", os.path.join(os.path.dirname(os.path.abspath(__file__)), "instrumenter", "collector",
                                             "formats.py"))
        formats = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = formats  # its dataclasses look their module up there
        spec.loader.exec_module(formats)
        include = os.path.join(os.path.abspath(self.build_temp), "autoitt-include")
        os.makedirs(include, exist_ok=True)
        header = os.path.join(include, "format.h")
        text = formats.c_header()
        if not os.path.exists(header) or open(header).read() != text:  # unchanged: no rebuild for its sake
            with open(header, "w") as out:
                out.write(text)
        for extension in self.extensions:
            extension.include_dirs.insert(0, include)
            extension.depends.append("instrumenter/collector/formats.py")
        super().run()

    def build_extensions(self):
        """Say what to install where no C compiler or no Python headers are found, not a compiler's traceback:
        autoitt's ITT collector, its trace reader and the copies' markers are C, compiled at install."""
        problem = _cannot_build()
        compiler = getattr(self.compiler, "compiler_so", None) or [""]
        if not problem and shutil.which(compiler[0]) is None:
            problem = f"no C compiler was found (looked for {compiler[0]!r}, the compiler this Python was built " \
                      "with, or $CC)"
        if problem:
            raise CompileError(f"autoitt: cannot compile its C parts (the ITT collector, the trace reader, the "
                               f"copies' markers): {problem}. Install a C compiler and this Python's headers, then "
                               f"install autoitt again. {_WHAT_TO_INSTALL}")
        super().build_extensions()


setup(
    cmdclass={"build_ext": build_ext_with_formats},
    ext_modules=[
        Extension(
            "instrumenter.collector._collector",
            # one translation unit per job, each with a header of what the others may use (format.h: the file
            # formats, generated at build time); pyframes.c is built against the interpreter's own (internal) headers
            sources=[f"instrumenter/collector/{unit}.c" for unit in
                     ("process", "itt_binding", "writer", "trace_limit", "tasks", "counters", "sampler", "hooks",
                      "unwind", "pyframes", "common")],
            depends=[f"instrumenter/collector/{header}.h" for header in
                     ("common", "process", "itt_binding", "writer", "trace_limit", "tasks", "counters",
                      "sampler", "hooks", "unwind", "pyframes")],
            extra_compile_args=["-std=c11", "-O2", "-fPIC", "-fvisibility=hidden", "-Wall", "-Wextra"],
            # every symbol bound at load: lazy binding in the sampler's signal handler is not async-signal-safe
            extra_link_args=["-Wl,-z,now", "-Wl,-z,relro"],
            libraries=["pthread", "dl", "m"],
        ),
        # what a perf interruption costs here, which chooses the sampler's mechanism (instrumenter/collector/mechanism.py
        # binds it with ctypes; run in autoitt's own process, never in the program's)
        Extension(
            "instrumenter.collector._interrupt_cost",
            sources=["instrumenter/collector/interrupt_cost.c"],
            extra_compile_args=["-std=c11", "-O2", "-fPIC", "-fvisibility=hidden", "-Wall", "-Wextra"],
        ),
        # the trace reader's inner loop (instrumenter/builtin/trace/pairing.py binds it with ctypes)
        Extension(
            "instrumenter.builtin.trace._pairing",
            sources=["instrumenter/builtin/trace/pairing.c"],
            extra_compile_args=["-std=c11", "-O2", "-fPIC", "-fvisibility=hidden", "-Wall", "-Wextra"],
            libraries=["m"],
        ),
        # a callable wrapper with no Python frame, for the optimizer closures the copies mark (instrumenter/runtime/closures.py)
        Extension(
            "instrumenter.runtime._around",
            sources=["instrumenter/runtime/around.c"],
            depends=["instrumenter/runtime/guest.h"],
            extra_compile_args=["-std=c11", "-O2", "-Wall", "-Wextra"],
        ),
        # the copies' task_begin/task_end, with no Python frame (instrumenter/runtime/collection.py)
        Extension(
            "instrumenter.runtime._markers",
            sources=["instrumenter/runtime/markers.c"],
            depends=["instrumenter/runtime/guest.h"],
            extra_compile_args=["-std=c11", "-O2", "-Wall", "-Wextra"],
            libraries=["dl"],  # dlopen/dlsym: ITT's pointers in ittapi's extension (markers.c, the direct path)
        ),
    ],
)
