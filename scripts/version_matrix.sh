#!/usr/bin/env bash
# The test suite on the other CPython versions that install here (README, "Python versions"):
#
#   scripts/version_matrix.sh            # 3.13 and 3.14, from Debian's packages (scripts/debian_python.sh)
#   scripts/version_matrix.sh 3.14       # one version
#
# Each version gets its own venv with autoitt installed editable (its collector and pairing extensions are
# built beside 3.11's, named for the version) and the suite's tools, without torch, TensorFlow or the
# training libraries: their wheels for these versions are CUDA builds of several GB, or do not exist. The
# tests that run those frameworks skip, saying so (tests/conftest.py); everything else runs: instrument,
# strip, the launcher, notebooks, the collector and its sampler with Python frames, phases, counters.
# 3.15 is left out: autoitt's dependency ittapi has no build for it on PyPI (neither wheel nor sdist).
set -euo pipefail
cd "$(dirname "$0")/.."
versions=("$@")
[[ ${#versions[@]} -gt 0 ]] || versions=(3.13 3.14)
# inside the checkout, as .venv is: a test runs the interpreter as an unprivileged user, who cannot enter
# root's home
export AUTOITT_PYTHONS="${AUTOITT_PYTHONS:-$PWD/.pythons}"
for version in "${versions[@]}"; do
    echo "== CPython $version (Debian's package)"
    python="$(scripts/debian_python.sh "$version")"
    "$python" -m pip install --quiet --disable-pip-version-check -e '.[suite]'
    "$python" -m pytest -q -n 2 -p no:cacheprovider
done
