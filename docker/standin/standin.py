#!/usr/bin/env python3
"""dlperf stand-in trainer (repository entry point).

The implementation lives in the image overlay,
``rootfs/usr/lib/python3/dist-packages/dlperf_standin.py`` (installed as
``/usr/lib/python3/dist-packages/dlperf_standin.py`` and ``/usr/local/bin/dlperf-standin``).
This file runs it straight from a checkout: ``python3 docker/standin/standin.py --help``.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "rootfs", "usr", "lib", "python3", "dist-packages"))

from dlperf_standin import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
