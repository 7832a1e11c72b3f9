"""dlperf stand-in ``torch`` package: NOT PyTorch.

Only ``python3 -m torch.distributed.launch`` exists, so the real launch commands of
the PyTorch and Megatron-LM benchmarks run unchanged in the GPU-free stand-in image.
"""

__version__ = "0.0.0+dlperf.standin"
STANDIN = True
