"""dlperf stand-in for ``python -m torch.distributed.run`` (torchrun): the stand-in launch.py with
torchrun's behaviour (ranks read ``LOCAL_RANK``/``RANK``/``WORLD_SIZE`` from the environment; no
``--local_rank`` argument). Not PyTorch."""

import sys

from torch.distributed.launch import main

if __name__ == "__main__":
    sys.exit(main(["--use_env", *sys.argv[1:]]))
