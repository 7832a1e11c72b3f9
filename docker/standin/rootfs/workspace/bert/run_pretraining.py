#!/usr/bin/env python3
"""dlperf stand-in for NVIDIA DeepLearningExamples PyTorch BERT run_pretraining.py.

Accepts the real script's flags and prints its real log format at the speed set by
the DLPERF_STANDIN_* environment variables (see dlperf_standin.py).
"""
import sys

from dlperf_standin import shim_main

if __name__ == "__main__":
    sys.exit(shim_main("pytorch_bert"))
