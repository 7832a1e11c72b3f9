#!/usr/bin/env bash
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/dlperf extract --suite mxnet-bert --log-dir examples/logs/mxnet/bert/bz32 --batch-size-per-device 32 --warmup-iters 100 --measure-iters 100 --format markdown
