#!/usr/bin/env bash
# The test suite on the other CPython versions that install here (README, "Python versions"), against autoitt as
# users install it:
#
#   scripts/version_matrix.sh            # 3.13 and 3.14, from Debian's packages (scripts/debian_python.sh)
#   scripts/version_matrix.sh 3.14       # one version
#   scripts/version_matrix.sh /opt/python3.12/bin/python3.12   # an interpreter of your own (one built from
#                                        # source: README, "Python versions"), in a venv of its own
#
# For each version: its interpreter (kept in $AUTOITT_PYTHONS); autoitt's sdist and wheel built from the tree with
# it, as `python -m build` builds them for upload (the wheel from the sdist); the wheel installed, not editable,
# with its test extra: the frameworks as pip gives them on that version (torch's default build, with its CUDA
# libraries, pinned in pyproject.toml; tensorflow-cpu, or its pre-release where only that has a wheel; jax; the
# training libraries); then the whole suite, run from outside the checkout so that autoitt is imported from the
# venv (AUTOITT_SUITE_INSTALLED: tests/conftest.py puts the checkout last on sys.path, and a test checks it).
# The venv is kept: a second run reinstalls autoitt alone (pip's cache keeps the downloads besides).
# A framework with no wheel for a version is not installed there, and its tests skip saying so (tests/conftest.py);
# README's version table lists which.
# 3.15 is left out: autoitt's dependency ittapi has no build for it on PyPI (neither wheel nor sdist).
set -euo pipefail
cd "$(dirname "$0")/.."
checkout="$PWD"
versions=("$@")
[[ ${#versions[@]} -gt 0 ]] || versions=(3.13 3.14)
# inside the checkout, as .venv is: a test runs the interpreter as an unprivileged user, who cannot enter
# root's home
export AUTOITT_PYTHONS="${AUTOITT_PYTHONS:-$PWD/.pythons}"
export PIP_DISABLE_PIP_VERSION_CHECK=1
failed=()
for version in "${versions[@]}"; do
    if [[ -x "$version" && ! -d "$version" ]]; then
        given="$version"
        version="$("$given" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
        echo "== CPython $version ($given)"
        venv="$AUTOITT_PYTHONS/$version-own/venv"
        [[ -x "$venv/bin/python" ]] || "$given" -m venv "$venv"
        python="$venv/bin/python"
        here="$AUTOITT_PYTHONS/$version-own"
    else
        echo "== CPython $version (Debian's package)"
        python="$(scripts/debian_python.sh "$version")"
        here="$AUTOITT_PYTHONS/$version"
    fi
    rm -rf "$here/dist" "$here/suite"
    mkdir -p "$here/dist" "$here/suite"
    "$python" -m pip install --quiet 'build>=1'
    started=$SECONDS
    "$python" -m build --outdir "$here/dist" . >"$here/dist/build.log" 2>&1 || {
        echo "version_matrix.sh: building autoitt with CPython $version failed (see $here/dist/build.log):" >&2
        tail -5 "$here/dist/build.log" >&2
        exit 1
    }
    wheel="$(ls "$here/dist"/autoitt-*.whl)"
    "$python" -m pip uninstall --quiet --yes autoitt >/dev/null 2>&1 || true
    if ! "$python" -m pip install --quiet "$wheel[test]" 2>"$here/dist/install.log"; then
        # one framework with no wheel for this version: the others one by one, those that install kept
        echo "   the test extra does not install whole on CPython $version (see $here/dist/install.log); one by one:"
        "$python" -m pip install --quiet "$wheel[suite]"
        "$python" - <<'PY' | while read -r requirement; do
import importlib.metadata, re
for line in importlib.metadata.requires("autoitt"):
    name, _, marker = line.partition(";")
    if re.search(r"extra == .(samples|test).", marker) and not name.strip().startswith("autoitt"):
        print(name.strip())
PY
            "$python" -m pip install --quiet "$requirement" 2>/dev/null \
                || echo "   $requirement: not installable on CPython $version (its tests skip)"
        done
    fi
    echo "   built and installed $(basename "$wheel") with its test extra in $((SECONDS - started)) s"
    # the frameworks that version got (a missing one: no wheel for it, its tests skip)
    "$python" -m pip list 2>/dev/null \
        | grep -i -E '^(torch|tensorflow[-_]cpu|keras|jax|flax|transformers|deepspeed|stable[-_]baselines3|trl) ' \
        | awk '{printf "   %s %s\n", $1, $2}'
    # every version runs, whatever the one before gave; the matrix fails if any did
    # the timing comparisons (marked alone) after the rest, one at a time: a second test on the two cores moves them
    if ! (cd "$here/suite" && AUTOITT_SUITE_INSTALLED=1 "$python" -m pytest -q -n 2 -p no:cacheprovider \
              --rootdir "$checkout" -c "$checkout/pyproject.toml" -m "not alone" "$checkout/tests" \
          && AUTOITT_SUITE_INSTALLED=1 "$python" -m pytest -q -p no:cacheprovider \
              --rootdir "$checkout" -c "$checkout/pyproject.toml" -m alone "$checkout/tests"); then
        failed+=("$version")
    fi
done
if [[ ${#failed[@]} -gt 0 ]]; then
    echo "version_matrix.sh: the suite failed on CPython ${failed[*]}" >&2
    exit 1
fi
