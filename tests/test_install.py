"""What users install is what is tested: the wheel and the sdist, built from the tree, installed into a fresh venv
(not editable, not from the checkout's folder), profile a sample from a folder outside the checkout.

The dists are built as ``python -m build`` builds them for upload: the sdist from the tree's files (those
``git ls-files`` lists, and the untracked ones it would add), then the wheel from the unpacked sdist, so a file the
sdist lacks is missing from the wheel too. Each venv gets autoitt and its dependencies from the dist, as ``pip
install`` gives them; the frameworks the sample imports are the suite's own (its site-packages on the venv's path
after the venv's own), because installing torch again costs seconds on 3.11 but 5 GB of the default build on 3.13
and 3.14 (scripts/version_matrix.sh installs that once per version).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path
from typing import List

import pytest

from tests.conftest import INSTALLED, ROOT, SAMPLES

#: The C extensions setup.py builds, each of which the wheel must carry compiled (named as setup.py names them).
EXTENSIONS = re.findall(r'Extension\(\s*"([\w.]+)"', (ROOT / "setup.py").read_text())
#: What the sdist leaves out of the tree on purpose: CI's entry point and git's own file.
NOT_IN_SDIST = (".ci/", ".gitignore")


def _git_files(*paths: str, untracked: bool = False) -> List[str]:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: the tree's files are what `git ls-files` lists")
    flags = ["--cached", "--others", "--exclude-standard"] if untracked else []
    listed = subprocess.run(["git", "ls-files", *flags, "--", *paths], cwd=ROOT, check=True, capture_output=True,
                            text=True).stdout.splitlines()
    return sorted(name for name in listed if (ROOT / name).is_file())  # a file deleted but not yet committed: gone


@pytest.fixture(scope="module")
def dists(tmp_path_factory):
    """(wheel, sdist) built from the tree with the suite's interpreter, as ``python -m build`` builds them."""
    tree = tmp_path_factory.mktemp("tree")
    for name in _git_files(untracked=True):
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, tree / name)
    out = tmp_path_factory.mktemp("dist")
    done = subprocess.run([sys.executable, "-m", "build", "--outdir", str(out), str(tree)], capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    wheel, = out.glob("autoitt-*.whl")
    sdist, = out.glob("autoitt-*.tar.gz")
    return wheel, sdist


def _fresh_venv(folder: Path, dist: Path) -> Path:
    """A new venv with ``dist`` installed by pip, not editable, and the suite's frameworks after its own packages
    (written after the install, so pip installs every dependency autoitt declares). Its python."""
    # without pip of its own (Debian's interpreters have no ensurepip wheel): the suite's pip installs into it
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True, timeout=300)
    python = folder / "bin" / "python"
    done = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet",
                           "--disable-pip-version-check", str(dist)], capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    own = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                         check=True, capture_output=True, text=True).stdout.strip()
    # a plain path entry: the suite venv's own .pth files (the editable install's finder) are not run from it
    (Path(own) / "zz_suite_frameworks.pth").write_text(sysconfig.get_path("purelib") + "\n")
    return python


def _profile_outside_the_checkout(python: Path, folder: Path):
    """``autoitt profile --backend builtin torch_train.py`` (the venv's own ``autoitt`` command) on a copy of the
    sample in ``folder``, with nothing of the checkout on the path: (completed process, summary)."""
    shutil.copy(SAMPLES / "torch_train.py", folder / "torch_train.py")
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME") and not k.startswith(("AUTOITT_", "INTEL_LIBITTNOTIFY"))}
    autoitt = python.parent / "autoitt"
    done = subprocess.run([str(autoitt), "profile", "--json", "--backend", "builtin", "-r", "out", "torch_train.py"],
                          cwd=folder, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return done, json.loads(done.stdout)


def _autoitt_comes_from(python: Path) -> Path:
    where = subprocess.run([str(python), "-c", "import instrumenter; print(instrumenter.__file__)"], cwd="/",
                           check=True, capture_output=True, text=True).stdout.strip()
    return Path(where)


def _steps_recorded_match_the_run(done, summary) -> None:
    batches = len(re.findall(r"batch \d+: train loss", done.stdout + done.stderr))  # the script's own count
    assert batches == 2 * (64 // 8)  # EPOCHS * TRAIN_SAMPLES / BATCH_SIZE in samples/torch_train.py
    steps = [(s["label"], s["count"]) for s in summary["steps"]]
    assert steps == [("step", batches)]


def test_the_wheel_holds_every_file_of_the_packages_and_each_extension_compiled(dists):
    wheel, _ = dists
    names = set(zipfile.ZipFile(wheel).namelist())
    missing = [name for name in _git_files("instrumenter", "transforms") if name not in names]
    assert missing == []
    # the sitecustomize and report.html's scripts, by name: the files that were once left out
    assert "instrumenter/launch/site/sitecustomize.py" in names
    assert any(name.startswith("instrumenter/builtin/output/vendor/d3-") for name in names)
    assert EXTENSIONS and all(any(re.fullmatch(re.escape(ext.replace(".", "/")) + r"\..*\.so", name) for name in names)
                              for ext in EXTENSIONS)


def test_the_sdist_holds_every_file_of_the_tree(dists):
    _, sdist = dists
    with tarfile.open(sdist) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    missing = [name for name in _git_files(untracked=True) if name not in names and not name.startswith(NOT_IN_SDIST)]
    assert missing == []


def test_an_installed_wheel_profiles_a_sample_from_outside_the_checkout(dists, tmp_path):
    wheel, _ = dists
    python = _fresh_venv(tmp_path / "venv", wheel)
    assert _autoitt_comes_from(python).is_relative_to(tmp_path / "venv")  # not the checkout's, not editable
    work = tmp_path / "work"
    work.mkdir()
    done, summary = _profile_outside_the_checkout(python, work)
    _steps_recorded_match_the_run(done, summary)
    assert (work / "out" / "summary.json").is_file()


@pytest.mark.slow
def test_an_installed_sdist_profiles_a_sample_from_outside_the_checkout(dists, tmp_path):
    _, sdist = dists
    python = _fresh_venv(tmp_path / "venv", sdist)  # pip builds it, compiling the C sources the sdist carries
    assert _autoitt_comes_from(python).is_relative_to(tmp_path / "venv")
    work = tmp_path / "work"
    work.mkdir()
    done, summary = _profile_outside_the_checkout(python, work)
    _steps_recorded_match_the_run(done, summary)


@pytest.mark.slow
@pytest.mark.slow
def test_installing_the_sdist_without_a_c_compiler_says_what_to_install(dists, tmp_path):
    _, sdist = dists
    # the interpreter's own folder alone on PATH: no gcc, no cc (pip and the build run as they would)
    env = {**{k: v for k, v in os.environ.items() if k not in ("CC", "LDSHARED")},
           "PATH": str(Path(sys.executable).parent)}
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-cache-dir", "-w",
                           str(tmp_path / "out"), str(sdist)], env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode != 0 and not list((tmp_path / "out").glob("*.whl"))
    said = done.stdout + done.stderr
    assert "autoitt: cannot compile its C parts" in said and "no C compiler was found (looked for '" in said
    assert "apt-get install gcc python3-dev" in said and 'README, "Installing without a C compiler"' in said


@pytest.mark.slow
def test_an_install_without_the_sitecustomize_says_so_and_runs_nothing(dists, tmp_path):
    wheel, _ = dists
    python = _fresh_venv(tmp_path / "venv", wheel)
    site = _autoitt_comes_from(python).parent / "launch" / "site" / "sitecustomize.py"
    site.unlink()  # an install as a wheel built without its data files left it
    (tmp_path / "train.py").write_text("for step in range(3):\n    loss.backward()\n")
    done = subprocess.run([str(python.parent / "autoitt"), "profile", "--backend", "builtin", "-r", "out", "train.py"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2
    assert f"{site}: this file of autoitt's is missing" in done.stderr
    assert "installation is incomplete" in done.stderr and "-E, -I or -S" not in done.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.skipif(not INSTALLED, reason="the version matrix's run (scripts/version_matrix.sh) tests an installed "
                                          "autoitt; this one, the checkout's")
def test_the_matrix_runs_the_suite_against_the_installed_autoitt_not_the_checkout():
    import instrumenter
    import transforms

    # (the matrix's venvs live in the checkout's .pythons/: its package folders are what must not be imported)
    checkout = (ROOT / "instrumenter", ROOT / "transforms")
    assert not any(Path(module.__file__).resolve().is_relative_to(folder)
                   for module in (instrumenter, transforms) for folder in checkout)
    # and so do the Pythons the suite starts, from its working directory
    where = subprocess.run([sys.executable, "-c", "import instrumenter; print(instrumenter.__file__)"], check=True,
                           capture_output=True, text=True).stdout.strip()
    assert not Path(where).resolve().is_relative_to(checkout[0])
