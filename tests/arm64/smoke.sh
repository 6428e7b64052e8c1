#!/usr/bin/env bash
# Opt-in end-to-end smoke test of the whole edge_infer package on aarch64 under qemu-user.
# See tests/arm64/README.md. Not run by the default pytest run (tests/test_arm64_smoke.py runs
# it only when EDGE_INFER_ARM64_SMOKE=1).
#
# Needs: qemu-aarch64-static, aarch64-linux-gnu-gcc, apt-get + dpkg-deb (Debian/Ubuntu host),
# network on the first run (the arm64 Debian packages), a host python that can import edge_infer.
# No root, no binfmt_misc, no chroot: apt runs with private state dirs under the cache.
#
# Environment:
#   EDGE_INFER_ARM64_CACHE   cache dir (default ~/.cache/edge_infer_arm64): sysroot, native builds
#   EDGE_INFER_ARM64_PYTHON  host python (default: REPO/.venv/bin/python, else python3)
#   EDGE_INFER_ARM64_TESTS   pytest files run on aarch64 (default below; "" to skip)
#   EDGE_INFER_ARM64_REBUILD=1  rebuild the sysroot and the native library from scratch
#   (the sysroot comes from the host's own Debian apt entries: its suite and mirror, arm64)
set -u -o pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
CACHE=${EDGE_INFER_ARM64_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/edge_infer_arm64}
TESTS=${EDGE_INFER_ARM64_TESTS-tests/test_runtime.py tests/test_native_runtime.py tests/test_fixture.py}
# libstdc++6: for the onnx wheel (1b)
PACKAGES="python3.11-minimal libpython3.11-stdlib python3-numpy python3-psutil python3-pytest libstdc++6"
QEMU=qemu-aarch64-static
CC=aarch64-linux-gnu-gcc
CFLAGS="-O3 -std=gnu11 -fno-strict-aliasing -pthread -Wall -fPIC"     # as setup.py (+ -fPIC -shared)

if [ -n "${EDGE_INFER_ARM64_PYTHON:-}" ]; then HOSTPY=$EDGE_INFER_ARM64_PYTHON
elif [ -x "$REPO/.venv/bin/python" ]; then HOSTPY=$REPO/.venv/bin/python
else HOSTPY=python3; fi

T_START=$(date +%s)
RESULTS=()          # "PASS|FAIL  name  (seconds)"
FAILED=0

say() { printf '\n=== %s\n' "$*"; }
record() {          # record STATUS NAME SECONDS
    RESULTS+=("$(printf '%-4s  %-58s %5ss' "$1" "$2" "$3")")
    [ "$1" = PASS ] || [ "$1" = SKIP ] || FAILED=1
}
step() {            # step NAME TIMEOUT CMD...: run, time, record
    local name=$1 limit=$2; shift 2
    say "$name"
    local t0=$SECONDS
    # through bash -c so that a step may be one of the shell functions below (exported)
    timeout "$limit" bash -c 'set -o pipefail; "$@"' step "$@"
    local rc=$?
    [ $rc = 124 ] && echo "(timed out after ${limit}s)"
    record "$([ $rc = 0 ] && echo PASS || echo FAIL)" "$name" $((SECONDS - t0))
    return $rc
}
summary() {
    say "SUMMARY (arm64 smoke, $(( $(date +%s) - T_START ))s total, cache $CACHE)"
    printf '%s\n' "${RESULTS[@]}"
    if [ $FAILED = 0 ]; then echo "RESULT: PASS"; else echo "RESULT: FAIL"; fi
    exit $FAILED
}
die() { echo "smoke.sh: $*" >&2; record FAIL "$1" 0; summary; }

# --- prerequisites --------------------------------------------------------------------------
for tool in "$QEMU" "$CC" apt-get dpkg-deb; do
    command -v "$tool" >/dev/null || die "missing $tool (Debian: apt-get install qemu-user-static gcc-aarch64-linux-gnu)"
done
"$HOSTPY" -c "import numpy, edge_infer" 2>/dev/null || die "host python $HOSTPY cannot import numpy + edge_infer"
mkdir -p "$CACHE" || die "cannot create $CACHE"
SYSROOT=$CACHE/sysroot
PY="$SYSROOT/usr/bin/python3-qemu"      # wrapper: qemu + sysroot python (see build_sysroot)
[ "${EDGE_INFER_ARM64_REBUILD:-0}" = 1 ] && rm -rf "$SYSROOT" "$CACHE/native"
RUN=$CACHE/run
NATIVE=$RUN/edge_infer/backends/cpu/native
SO=$NATIVE/_edge_native.cpython-311-aarch64-linux-gnu.so
ONNX=$REPO/edge_infer/data/digits/digits_cnn.onnx
WHEELS=$CACHE/pywheels
export REPO CACHE PACKAGES QEMU CC CFLAGS HOSTPY SYSROOT PY RUN NATIVE SO ONNX WHEELS

# --- 1. the arm64 sysroot: Debian's python3.11 + numpy + psutil + pytest, unpacked -----------
build_sysroot() {
    local suite
    suite=$(. /etc/os-release 2>/dev/null; echo "${VERSION_CODENAME:-?}")
    local apt=$CACHE/apt tmp=$CACHE/sysroot.tmp
    rm -rf "$apt" "$tmp"
    mkdir -p "$apt/lists/partial" "$apt/archives/partial" "$apt/etc/sources.list.d" "$apt/etc/preferences.d" "$tmp"
    : > "$apt/status"
    # Private sources: the host's own Debian archive entries (its mirror, its keyring), for
    # arm64 instead of the host's architecture; no archive address is written here.
    local src n=0
    for src in /etc/apt/sources.list.d/*.sources; do
        [ -f "$src" ] && grep -q '^URIs:.*/debian' "$src" || continue
        sed -e '/^Architectures:/d' -e 's/^Types:.*/&\nArchitectures: arm64/' "$src" \
            > "$apt/etc/sources.list.d/$(basename "$src")"
        n=$((n + 1))
    done
    if [ -f /etc/apt/sources.list ]; then
        grep -E '^deb [^#]*/debian' /etc/apt/sources.list | sed -E 's/^deb (\[[^]]*\] )?/deb [arch=arm64] /' \
            > "$apt/etc/sources.list" || true
    else
        : > "$apt/etc/sources.list"
    fi
    [ "$n" -gt 0 ] || [ -s "$apt/etc/sources.list" ] || { echo "no Debian archive in the host's apt sources" >&2; return 1; }
    local opts=(-o APT::Architecture=arm64 -o APT::Architectures::=arm64
                -o Dir::Etc::SourceList="$apt/etc/sources.list" -o Dir::Etc::SourceParts="$apt/etc/sources.list.d"
                -o Dir::Etc::Preferences="$apt/etc/preferences" -o Dir::Etc::PreferencesParts="$apt/etc/preferences.d"
                -o Dir::State="$apt" -o Dir::State::Lists="$apt/lists" -o Dir::State::status="$apt/status"
                -o Dir::Cache="$apt" -o Dir::Cache::Archives="$apt/archives"
                -o Debug::NoLocking=1 -o APT::Sandbox::User="$(id -un)" -q)
    echo "apt (private state in $apt): update $suite arm64"
    apt-get "${opts[@]}" update 2>&1 | tail -n 3 || return 1
    echo "apt: download $PACKAGES and their dependencies"
    apt-get "${opts[@]}" install -y --download-only --no-install-recommends $PACKAGES 2>&1 | tail -n 2 || return 1
    local n=0
    for deb in "$apt"/archives/*.deb; do dpkg-deb -x "$deb" "$tmp" || return 1; n=$((n + 1)); done
    echo "unpacked $n packages ($(du -sh "$apt/archives" | cut -f1) of .debs)"
    [ -x "$tmp/usr/bin/python3.11" ] || { echo "no usr/bin/python3.11 in the unpacked packages"; return 1; }
    # what maintainer scripts would do: the BLAS / LAPACK alternatives numpy links against
    local multi=$tmp/usr/lib/aarch64-linux-gnu
    for lib in blas/libblas.so.3 lapack/liblapack.so.3; do
        [ -e "$multi/$(basename $lib)" ] || ln -s "$lib" "$multi/$(basename $lib)"
    done
    # python3-qemu: runs the sysroot's python under qemu with argv[0] set to this wrapper, so
    # sys.executable is a host-executable path (subprocess.run([sys.executable, ...]) works
    # without binfmt_misc). QEMU_CPU in the environment selects the emulated CPU.
    cat > "$tmp/usr/bin/python3-qemu" <<'EOF'
#!/bin/sh
here=$(cd "$(dirname "$0")" && pwd)
QEMU_LD_PREFIX=${here%/usr/bin}
export QEMU_LD_PREFIX
exec qemu-aarch64-static -0 "$here/python3-qemu" "$here/python3.11" "$@"
EOF
    chmod +x "$tmp/usr/bin/python3-qemu"
    "$tmp/usr/bin/python3-qemu" -c "import numpy, psutil, pytest, ctypes, platform
print('sysroot python', platform.python_version(), platform.machine(), 'numpy', numpy.__version__,
      'psutil', psutil.__version__, 'pytest', pytest.__version__)
assert platform.machine() == 'aarch64'
a = numpy.arange(16.0).reshape(4, 4); assert (a @ a)[0, 0] == 56.0" || return 1
    rm -rf "$SYSROOT" && mv "$tmp" "$SYSROOT" && rm -rf "$apt"      # the .debs are not needed again
}
export -f build_sysroot
if [ -x "$PY" ] && [ "$(cat "$SYSROOT/.complete" 2>/dev/null)" = "$PACKAGES" ]; then
    say "arm64 sysroot: reusing $SYSROOT"; record PASS "arm64 sysroot (cached)" 0
else
    step "arm64 sysroot (apt download + unpack)" 900 build_sysroot && echo "$PACKAGES" > "$SYSROOT/.complete" \
        || die "arm64 sysroot not built"
fi

# --- 1b. onnx for aarch64 (PyPI wheels, via the host pip) ----------------------------------
# Only the pytest files need it: their fixtures convert the digits model on the device
# (edge_infer.convert reads ONNX with the onnx package). Debian's python3-onnx (1.12) is older
# than the onnx>=1.14 setup.py asks for, so the manylinux aarch64 wheels are unpacked instead:
# onnx pinned to the host's version, ml_dtypes < 0.6 (0.6+ needs numpy 2; Debian has 1.24).
WHEELS=$CACHE/pywheels
fetch_wheels() {
    local ver tmp=$WHEELS.tmp
    ver=$(PYTHONPATH= "$HOSTPY" -c "import onnx; print(onnx.__version__)" 2>/dev/null)
    rm -rf "$tmp"
    "$HOSTPY" -m pip install -q --disable-pip-version-check --target "$tmp" --no-deps --only-binary=:all: \
        --platform manylinux2014_aarch64 --platform manylinux_2_17_aarch64 --platform manylinux_2_28_aarch64 \
        --python-version 3.11 --implementation cp --abi cp311 --abi abi3 --abi none \
        "onnx${ver:+==$ver}" protobuf typing_extensions "ml_dtypes<0.6" 2>&1 | grep -v "is ignored" || true
    PYTHONPATH=$tmp "$PY" -c "import onnx; onnx.checker.check_model(onnx.load('$ONNX')); print('onnx', onnx.__version__, 'on aarch64: ok')" \
        || return 1
    rm -rf "$WHEELS" && mv "$tmp" "$WHEELS"
}
export -f fetch_wheels
if [ -n "$TESTS" ]; then
    if [ -f "$WHEELS/.complete" ]; then
        say "onnx wheels for aarch64: reusing $WHEELS"; record PASS "onnx for aarch64 (cached)" 0
    elif step "onnx for aarch64 (pip wheels, for the pytest files)" 600 fetch_wheels; then
        touch "$WHEELS/.complete"
    else
        echo "no onnx on aarch64: pytest files whose fixtures convert a model will error"
    fi
fi

# --- 2. a copy of the package with the native library built for aarch64 ---------------------
rm -rf "$RUN" && mkdir -p "$RUN/tests" "$RUN/models" || die "cannot create $RUN"
# the working tree's package (no __pycache__, no host .so): what others edit is taken as it is now
tar -C "$REPO" --exclude=__pycache__ --exclude='*.so' --exclude='*.dylib' --exclude='*.pyc' -cf - edge_infer \
    | tar -C "$RUN" -xf - || die "copy of edge_infer failed"
build_native() {
    # keyed by the sources, the flags and the compiler: unchanged sources reuse the last build
    local key
    key=$( (cat "$NATIVE"/src/*; echo "$CFLAGS"; "$CC" --version | head -n 1) | sha256sum | cut -c1-16)
    local cached=$CACHE/native/$key.so
    if [ -f "$cached" ]; then echo "reusing $cached"; cp "$cached" "$SO"; return; fi
    local obj=$CACHE/native/obj.$$ pids=() rc=0
    mkdir -p "$obj"
    echo "$CC $CFLAGS -c src/*.c; $CC -shared ... -lm"
    for src in "$NATIVE"/src/*.c; do
        "$CC" $CFLAGS -I"$NATIVE/src" -c "$src" -o "$obj/$(basename "$src" .c).o" & pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || rc=1; done
    [ $rc = 0 ] && "$CC" -shared -pthread "$obj"/*.o -o "$obj/lib.so" -lm || rc=1
    [ $rc = 0 ] && mv "$obj/lib.so" "$cached" && cp "$cached" "$SO"
    rm -rf "$obj"
    [ $rc = 0 ] && file "$SO" 2>/dev/null | cut -d, -f1-2
    return $rc
}
export -f build_native
step "native library for aarch64 ($CC -O3)" 900 build_native || die "aarch64 native build failed"

# --- 3. host: convert the digits model (fp32, int8) and record reference outputs -------------
host_convert() {
    PYTHONPATH=$REPO "$HOSTPY" -m edge_infer convert "$ONNX" -o "$RUN/models/digits_fp32.eim" | tail -n 2 &&
    PYTHONPATH=$REPO "$HOSTPY" -m edge_infer convert "$ONNX" -o "$RUN/models/digits_int8.eim" \
        --quantize int8 --calib random | tail -n 2
}
export -f host_convert
step "host: convert digits fp32 + int8 (--calib random)" 600 host_convert || die "host conversion failed"
step "host: reference outputs (CPU backend, native as installed)" 600 \
    env PYTHONPATH="$REPO" "$HOSTPY" "$REPO/tests/arm64/check_outputs.py" ref "$RUN/models" \
    || die "host reference failed"

# --- 4. aarch64: import, load, run, compare ---------------------------------------------------
arm() {             # arm QEMU_CPU [ENV=...] ARGS...: the sysroot python on the package copy
    local cpu=$1; shift
    (cd "$RUN" && env QEMU_CPU="$cpu" PYTHONPATH="$RUN" PYTHONDONTWRITEBYTECODE=1 "$@")     # later ENV=... wins
}
export -f arm
step "aarch64 native, -cpu max (NEON + dotprod): digits vs host" 900 \
    arm max EI_SMOKE_EXPECT_NATIVE=1 EI_SMOKE_EXPECT_DOTPROD=1 \
    "$PY" "$REPO/tests/arm64/check_outputs.py" check "$RUN/models"
step "aarch64 native, -cpu cortex-a72 (NEON, no dotprod): digits vs host" 900 \
    arm cortex-a72 EI_SMOKE_EXPECT_NATIVE=1 EI_SMOKE_EXPECT_DOTPROD=0 \
    "$PY" "$REPO/tests/arm64/check_outputs.py" check "$RUN/models"
step "aarch64 EDGE_INFER_NO_NATIVE=1 (numpy kernels): digits vs host" 900 \
    arm max EDGE_INFER_NO_NATIVE=1 EI_SMOKE_EXPECT_NATIVE=0 \
    "$PY" -W ignore::RuntimeWarning "$REPO/tests/arm64/check_outputs.py" check "$RUN/models"

# --- 5. aarch64: a subset of the pytest files (numpy + psutil only) --------------------------
if [ -n "$TESTS" ]; then
    files=()
    cp "$REPO/tests/conftest.py" "$RUN/tests/" || die "copy conftest.py"
    for f in $TESTS; do cp "$REPO/$f" "$RUN/tests/" && files+=("tests/$(basename "$f")") || die "copy $f"; done
    # deselected: it compares the native ISA bits with /proc/cpuinfo, which qemu-user passes
    # through from the x86 host (avx2 listed there, but no avx2 on aarch64); on a real board it runs
    step "aarch64 native (-cpu max): pytest ${files[*]}" 1800 \
        arm max PYTHONPATH="$RUN:$WHEELS" "$PY" -m pytest -q -p no:cacheprovider -rs "${files[@]}" \
        --deselect tests/test_native_runtime.py::test_features_match_cpuinfo
fi

summary
