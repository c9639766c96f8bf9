#!/usr/bin/env bash
# test-sanitize.sh - build scree with AddressSanitizer (LeakSanitizer
# included) and UndefinedBehaviorSanitizer into ./build-asan (or
# $SCREE_SANITIZE_BUILD_DIR), installing what is missing like build.sh, and
# run the quick set there (every test not labelled slow, as scripts/test.sh
# runs by default). Tests labelled gpu skip, with a reason, without a GPU.
# Arguments go to ctest.
#
# A memory error, a leak or undefined behaviour fails the test it happens in:
# the build has -fno-sanitize-recover=all, and each sanitizer exits with an
# error status at its first report (halt_on_error, exitcode). Check runs
# each test in a forked child by default; the child ends with exit(), so
# LeakSanitizer checks every test's process, and a child's error status
# fails that test ("Early exit with return value 23").
#
# Leaks inside libraries loaded with dlopen and not built with sanitizers
# (NVRTC, the CUDA driver) may be suppressed in scripts/lsan-suppressions.txt,
# never scree's own.
#
# The slow set is left out. Its time goes to NVRTC, which is not
# instrumented, and to more configs of the emulated kernel; scree's own code
# on those paths (kernel source assembly, the compile and its log, the
# thread pool, the safelist lines, the emulator) runs in the quick set too.
set -eu
cd "$(dirname "$0")/.."
build=${SCREE_SANITIZE_BUILD_DIR:-build-asan}

# gcc's runtimes (libasan, libubsan) come with gcc on Debian 12 (build.sh
# installs gcc where there is no cc); say so plainly if this cc cannot link
# a sanitized program, before CMake fails less clearly.
if command -v cc >/dev/null; then
  probe=$(mktemp -d)
  trap 'rm -rf "$probe"' EXIT
  echo 'int main(void) { return 0; }' >"$probe/p.c"
  if ! cc -fsanitize=address,undefined "$probe/p.c" -o "$probe/p" 2>"$probe/err"; then
    echo "test-sanitize.sh: cc cannot link with -fsanitize=address,undefined:" >&2
    cat "$probe/err" >&2
    exit 1
  fi
fi
SCREE_BUILD_DIR=$build scripts/build.sh -DSCREE_SANITIZE=address,undefined

# intercept_tls_get_addr=0: the __tls_get_addr interceptor of GCC 12's
# runtime (and LLVM's up to 16) takes a dynamic TLS block that happens to start
# 16 bytes into a page for one with a pre-2.25 glibc header and reads the two
# words before it as a range; LeakSanitizer's tracer then dies with "Tracer
# caught signal 11" and the test fails with no leak reported. NVRTC's threads
# (test_compile's pool) allocate such blocks. Without the interceptor the
# leak check still scans every thread's static TLS, stack and registers.
export ASAN_OPTIONS=detect_leaks=1:halt_on_error=1:exitcode=23:strict_string_checks=1:intercept_tls_get_addr=0
export LSAN_OPTIONS=suppressions=$PWD/scripts/lsan-suppressions.txt:print_suppressions=0
export UBSAN_OPTIONS=halt_on_error=1:exitcode=23:print_stacktrace=1

cd "$build"
rc=0
ctest --output-on-failure -j"$(nproc)" -LE slow "$@" || rc=$?
# ctest does not show a skipped test's output: print each one's reason.
grep -h "^SKIP: " Testing/Temporary/LastTest*.log 2>/dev/null | sort -u || true
exit $rc
