#!/usr/bin/env bash
# make fuzz: the compiled scanners (_cdll.c, _cmxbert.c) built with AddressSanitizer and
# UndefinedBehaviorSanitizer in a scratch copy of the package, then the seeded fuzz tests
# (random mutations of real logs, each parsed by the C scanner and by the pure-Python parser, the
# oracle) run against that build. Any sanitizer report or mismatch fails.
# usage: scripts/fuzz-scanners.sh PYTHON CASES SEED
set -euo pipefail
py=${1:?python}; cases=${2:-3000}; seed=${3:-1}
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -r "$root/dlperf_tasks" "$root/tests" "$root/scripts" "$root/setup.py" "$root/pyproject.toml" "$work/"
find "$work/dlperf_tasks" -name '*.so' -delete
flags="-O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined"
(cd "$work" && CFLAGS="$flags" LDFLAGS="-fsanitize=address,undefined" "$py" setup.py -q build_ext --inplace)
ls "$work"/dlperf_tasks/frameworks/_cdll*.so "$work"/dlperf_tasks/frameworks/_cmxbert*.so >/dev/null
export DLPERF_FUZZ_BUILD="$work"  # the tests then check that they loaded this build
asan=$(${CC:-gcc} -print-file-name=libasan.so)
ubsan=$(${CC:-gcc} -print-file-name=libubsan.so)
cd "$work"
PYTHONPATH="$work" LD_PRELOAD="$asan $ubsan" ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 \
  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 DLPERF_FUZZ_CASES="$cases" DLPERF_FUZZ_SEED="$seed" \
  "$py" -m pytest -q -p no:cacheprovider --noconftest tests/unit/test_cdll_fuzz.py tests/unit/test_cmxbert.py \
    tests/unit/test_log_text_parity.py \
    -k "mutated or one_by_one or fuzz or the_extension or python_reading or feed_same or lines_holding" -W ignore -x
