#!/usr/bin/env python3
"""dlperf stand-in for gluon-cv train_horovod.py (MXNet ResNet50).

Accepts the real script's flags and prints its real log format at the speed set by
the DLPERF_STANDIN_* environment variables (see dlperf_standin.py). This image stands for
one whose train_horovod.py already carries the suite's patch: the last line is the mark dlperf's
patch applier (dlperf_tasks/catalog/data/dlperf_patch.py) leaves in a file it patched, so the applier
leaves it as it is. The patch's flag (--num-batches) is accepted only when the applier ran
(DLPERF_PATCHES_APPLIED names the patch), as the unpatched upstream script refuses it.
"""
import sys

from dlperf_standin import shim_main

if __name__ == "__main__":
    sys.exit(shim_main("mxnet_resnet50"))
# dlperf-patch applied: gluon-cv-f9a8a28-dlperf-rn50.diff
