"""dlperf stand-in for ``python -m torchtitan.train`` (pytorch/torchtitan at the suite's pinned commit)."""
import sys

from dlperf_standin_llm import torchtitan_main

if __name__ == "__main__":
    sys.exit(torchtitan_main())
