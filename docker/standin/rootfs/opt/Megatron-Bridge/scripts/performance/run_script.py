#!/usr/bin/env python3
"""dlperf stand-in for Megatron-Bridge scripts/performance/run_script.py (the suite's pinned commit)."""
import sys

from dlperf_standin_llm import megatron_bridge_main

if __name__ == "__main__":
    sys.exit(megatron_bridge_main())
