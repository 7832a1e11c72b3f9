"""dlperf stand-in for ``python -m torch.distributed.launch`` (PyTorch 1.6 semantics).

Parses the same options, then starts ``--nproc_per_node`` copies of the training
script with ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``,
``MASTER_ADDR`` and ``MASTER_PORT`` in the environment and ``--local_rank=N`` as the
first script argument (unless ``--use_env``), exactly like the real launcher. It
waits for all of them; if one fails it stops the others and exits with an error
(like PyTorch's ``subprocess.CalledProcessError``). SIGTERM/SIGINT are forwarded.
No networking happens: every node runs independently.
"""

import os
import signal
import subprocess
import sys
import time
from argparse import REMAINDER, ArgumentParser


def parse_args(argv=None):
    p = ArgumentParser(description="torch.distributed.launch (dlperf stand-in)")
    p.add_argument("--nnodes", type=int, default=1)
    p.add_argument("--node_rank", type=int, default=0)
    p.add_argument("--nproc_per_node", type=int, default=1)
    p.add_argument("--master_addr", default="127.0.0.1", type=str)
    p.add_argument("--master_port", default=29500, type=int)
    p.add_argument("--use_env", default=False, action="store_true")
    p.add_argument("-m", "--module", default=False, action="store_true")
    p.add_argument("--no_python", default=False, action="store_true")
    p.add_argument("training_script", type=str)
    p.add_argument("training_script_args", nargs=REMAINDER)
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    world = args.nproc_per_node * args.nnodes
    env = dict(os.environ)
    env["MASTER_ADDR"] = args.master_addr
    env["MASTER_PORT"] = str(args.master_port)
    env["WORLD_SIZE"] = str(world)
    env["LOCAL_WORLD_SIZE"] = str(args.nproc_per_node)
    if "OMP_NUM_THREADS" not in os.environ and args.nproc_per_node > 1:
        env["OMP_NUM_THREADS"] = str(1)
        print("*****************************************\n"
              "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, to avoid your "
              "system being overloaded, please further tune the variable for optimal performance in your "
              "application as needed. \n"
              "*****************************************", flush=True)
    procs = []
    for local_rank in range(args.nproc_per_node):
        rank_env = dict(env)
        rank_env["RANK"] = str(args.nproc_per_node * args.node_rank + local_rank)
        rank_env["LOCAL_RANK"] = str(local_rank)
        if args.no_python:
            cmd = [args.training_script]
        else:
            cmd = [sys.executable, "-u"] + (["-m"] if args.module else []) + [args.training_script]
        if not args.use_env:
            cmd.append("--local_rank={}".format(local_rank))
        cmd.extend(args.training_script_args)
        procs.append((cmd, subprocess.Popen(cmd, env=rank_env)))

    def forward(signum, _frame):
        for _, p in procs:
            if p.poll() is None:
                p.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)

    failed = None
    while True:
        running = False
        for cmd, p in procs:
            rc = p.poll()
            if rc is None:
                running = True
            elif rc != 0 and failed is None:
                failed = (cmd, rc)
        if failed is not None:
            for _, p in procs:
                if p.poll() is None:
                    p.terminate()
            for _, p in procs:
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
            cmd, rc = failed
            raise subprocess.CalledProcessError(returncode=rc, cmd=cmd)
        if not running:
            return 0
        time.sleep(0.05)


if __name__ == "__main__":
    main()
