"""Builds autoitt's compiled parts: the ITT collector, the trace reader's inner loop, a frameless wrapper.

``instrumenter/collector/*.c`` become ``instrumenter/_collector*.so`` (one translation unit per job: the
process's life, the ITT binding, the writer, the trace limit, the task stack, counters, the sampler, its
hooks, unwinder and Python frames; ``format.h`` holds the file formats).
It is a plain shared library for Intel's ITT static parts to ``dlopen``
(through ``INTEL_LIBITTNOTIFY64``): it has no ``PyInit`` and is never imported;
``instrumenter.collector.library_path()`` finds it.
``instrumenter/builtin/pairing.c`` becomes ``instrumenter/_pairing*.so`` (bound with ctypes).
``instrumenter/around.c`` becomes the Python module ``instrumenter._around``. Building needs a C compiler
(gcc or clang); everything else about the package is in pyproject.toml.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "instrumenter._collector",
            # one translation unit per job, each with a header of what the others may use (format.h: the file
            # formats); pyframes.c is built against the interpreter's own (internal) headers
            sources=[f"instrumenter/collector/{unit}.c" for unit in
                     ("process", "itt_binding", "writer", "trace_limit", "tasks", "counters", "sampler", "hooks",
                      "unwind", "pyframes")],
            depends=[f"instrumenter/collector/{header}.h" for header in
                     ("format", "common", "process", "itt_binding", "writer", "trace_limit", "tasks", "counters",
                      "sampler", "hooks", "unwind", "pyframes")],
            extra_compile_args=["-std=c11", "-O2", "-fPIC", "-fvisibility=hidden", "-Wall", "-Wextra"],
            # every symbol bound at load: lazy binding in the sampler's signal handler is not async-signal-safe
            extra_link_args=["-Wl,-z,now", "-Wl,-z,relro"],
            libraries=["pthread", "dl", "m"],
        ),
        # the trace reader's inner loop (instrumenter/builtin/pairing.py binds it with ctypes)
        Extension(
            "instrumenter._pairing",
            sources=["instrumenter/builtin/pairing.c"],
            extra_compile_args=["-std=c11", "-O2", "-fPIC", "-fvisibility=hidden", "-Wall", "-Wextra"],
            libraries=["m"],
        ),
        # a callable wrapper with no Python frame, for the optimizer closures the copies mark (instrumenter/closures.py)
        Extension(
            "instrumenter._around",
            sources=["instrumenter/around.c"],
            extra_compile_args=["-std=c11", "-O2", "-Wall", "-Wextra"],
        ),
    ],
)
