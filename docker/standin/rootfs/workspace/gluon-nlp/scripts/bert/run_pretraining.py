#!/usr/bin/env python3
"""dlperf stand-in for gluon-nlp scripts/bert/run_pretraining.py (MXNet BERT).

Accepts the real script's flags and prints its real log format at the speed set by
the DLPERF_STANDIN_* environment variables (see dlperf_standin.py). Like the image of an
already patched checkout, it ends with the mark of dlperf's patch applier (as does data/pretrain.py,
the patch's other file); --data_eval is optional only when the applier ran (DLPERF_PATCHES_APPLIED),
required as at gluon-nlp 7b7bf60 otherwise.
"""
import sys

from dlperf_standin import shim_main

if __name__ == "__main__":
    sys.exit(shim_main("mxnet_bert"))
# dlperf-patch applied: gluon-nlp-7b7bf60-dlperf-bert.diff
