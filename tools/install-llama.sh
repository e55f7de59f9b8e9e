#!/bin/sh
# Compile llama-cpp-python from its hash-checked sdist with pinned CPU flags, once per
# machine, and install the wheel into the given Python's environment.
#
#   tools/install-llama.sh PYTHON [REQUIREMENTS]   (REQUIREMENTS: requirements/llama.txt)
#
# Why the flags: a native build (GGML_NATIVE, the default) crashed with SIGSEGV (exit
# 139) on the first completion on Intel Xeon machines with AMX (issue 12): ggml then
# compiles its AMX backend, repacks the Q4_K_M weights into an AMX buffer and segfaults
# in ggml_backend_amx_mul_mat (the same machine-dependent crash as ggml-org/llama.cpp
# #20824, seen on Sapphire Rapids CI runners in stanfordnlp/dspy#10079). The same sdist
# built with GGML_NATIVE=OFF and the AVX2 set below answered correctly there. Here the
# AMX and AVX-512 paths are off by name, so the wheel holds neither (make test's
# tests/test_install.py checks the shared library for AVX-512 and AMX instructions):
# it runs on any x86-64 CPU with AVX2, FMA and F16C (Haswell and later, Zen and later).
#
# Why a wheel directory of our own: pip's wheel cache is keyed by the sdist alone, not
# by CMAKE_ARGS, so a wheel built with other flags would be reused silently. The wheel
# is kept under $XDG_CACHE_HOME/evalkit/wheels/ in a folder named by the hash of the
# sdist pin, the flags, the compiler and the machine type; a fresh HOME builds afresh.
set -eu
py=$1
req=${2:-requirements/llama.txt}
FLAGS="-DGGML_NATIVE=OFF -DGGML_SSE42=ON -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_BMI2=ON -DGGML_FMA=ON -DGGML_F16C=ON"
FLAGS="$FLAGS -DGGML_AVX_VNNI=OFF -DGGML_AVX512=OFF -DGGML_AVX512_VBMI=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF"
FLAGS="$FLAGS -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF -DGGML_BLAS=OFF -DGGML_CCACHE=OFF"
# The multimodal (llava/mtmd) library is not used by evalkit: not building it saves
# about a fifth of the compile; llama_cpp imports it only for image chat handlers.
FLAGS="$FLAGS -DLLAVA_BUILD=OFF"
case "$(uname -m)" in
    x86_64|amd64) ;;
    *) FLAGS="-DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF" ;;  # other CPUs: ggml's portable defaults
esac
cc_id=$( (${CC:-cc} --version 2>/dev/null || echo none) | head -n 1)
key=$(printf '%s\n' "$(grep -v '^#' "$req")" "$FLAGS" "$cc_id" "$(uname -m)" | sha256sum | cut -c1-16)
cache="${XDG_CACHE_HOME:-$HOME/.cache}/evalkit/wheels/llama-$key"
if ! ls "$cache"/llama_cpp_python-*.whl >/dev/null 2>&1; then
    echo "compiling llama-cpp-python (once per machine: about 5 min on 2 cores) with: $FLAGS"
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    "$py" -m pip download --quiet --no-deps --no-binary :all: --require-hashes -r "$req" -d "$tmp/src"
    bindir=$(cd "$(dirname "$py")" && pwd)
    # --no-build-isolation: build with the pinned scikit-build-core, cmake and ninja of
    # requirements/build.txt (on PATH through the environment's bin folder).
    # -v: scikit-build-core's stages and ninja's "[N/M]" steps, which tools/build_progress.py
    # prints with the time so far (a long compile is never silent); the whole log is kept
    # and its tail shown when the build fails.
    echo "  (its stages and steps below, with the time so far; a failure shows the log's last lines)"
    { PATH="$bindir:$PATH" CMAKE_ARGS="$FLAGS" CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc 2>/dev/null || echo 2)}" \
        "$py" -m pip wheel -v --no-deps --no-build-isolation --no-cache-dir "$tmp"/src/* -w "$tmp/wheel" 2>&1 \
        && echo 0 >"$tmp/rc" || echo $? >"$tmp/rc"; } | "$py" "$(dirname "$0")/build_progress.py" "$tmp/build.log"
    rc=$(cat "$tmp/rc")
    if [ "$rc" != 0 ]; then
        echo "error: compiling llama-cpp-python failed (exit $rc); the last lines of its log:" >&2
        tail -n 40 "$tmp/build.log" >&2
        exit "$rc"
    fi
    mkdir -p "$cache"
    whl=$(ls "$tmp"/wheel/llama_cpp_python-*.whl)
    # copied under a hidden name, then renamed: a killed build leaves no wheel behind
    cp "$whl" "$cache/.$(basename "$whl").part"
    mv "$cache/.$(basename "$whl").part" "$cache/$(basename "$whl")"
fi
"$py" -m pip install --quiet --no-deps --no-index --force-reinstall "$cache"/llama_cpp_python-*.whl
