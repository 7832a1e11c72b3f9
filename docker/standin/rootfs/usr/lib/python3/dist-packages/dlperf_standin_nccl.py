"""Stand-in for nccl-tests' ``all_reduce_perf`` (NVIDIA/nccl-tests@a0b82b2260cf5152b9f8c061bbf7eaf0ba096432).

Options as ``src/common.cu`` reads them with ``getopt_long`` (the short string
``t:g:b:e:i:f:n:m:w:N:p:I:K:c:o:d:r:z:y:T:hG:C:a:R:x:D:V:J:S:M:u:`` and its long names; long names
may be abbreviated, options and operands may mix). What the real binary does with a bad command
line, this one does too:

* an unknown option or one missing its argument: getopt's message on stderr (``invalid option --
  'q'``, ``unrecognized option '--foo'``, ``option requires an argument -- 'b'``), then ``invalid
  option '?'`` and the USAGE text on stdout, exit 0 and no table (``common.cu`` returns 0 there);
* a size ``-b``/``-e``/``-i`` that ``parsesize`` refuses (a number, optionally followed by K, M or G,
  binary units): ``invalid size specified for 'minbytes'`` on stderr, exit 255;
* ``minbytes`` above ``maxbytes``: ``invalid sizes for 'minbytes' and 'maxbytes': A > B``, exit 255.

Output (``src/util.cu``): the ``# nccl-tests version`` / ``# Collective test starting`` /
``# nThread ...`` header, ``# Using devices`` with one ``#  Rank`` line per rank, the size table
(out-of-place then in-place; 13 columns with ``root``), ``# Out of bounds values : 0 OK``, ``# Avg bus
bandwidth : X``, ``# Collective test concluded``. Rank 0 prints the table (MPI ranks from OpenMPI's
environment; ranks = processes x ``-g``). With ``NCCL_DEBUG=INFO`` every rank prints NCCL's INFO lines
naming the network (``NET/IB : Using [0]mlx5_0:1/IB`` or ``NET/Socket : Using [0]eth0:...``) and
the channels ``via NET/IB/0`` or ``via NET/Socket/0`` (NCCL ``src/transport/net.cc``); without it none.

Speed: ``DLPERF_STANDIN_ALGBW`` (GB/s of algorithm bandwidth at the largest size, default 100),
``DLPERF_STANDIN_NCCL_NET`` (IB | Socket, default IB), ``DLPERF_STANDIN_NCCL_FAIL`` (set: the run
aborts after the header with NCCL's ``unhandled system error``, exit 1, as a broken fabric does).
"""

from __future__ import annotations

import getopt
import os
import socket
import sys

SHORT = "t:g:b:e:i:f:n:m:w:N:p:I:K:c:o:d:r:z:y:T:hG:C:a:R:x:D:V:J:S:M:u:"
LONG = ["nthreads=", "ngpus=", "minbytes=", "maxbytes=", "stepbytes=", "stepfactor=", "iters=", "agg_iters=",
        "warmup_iters=", "run_cycles=", "parallel_init=", "check=", "op=", "datatype=", "root=", "blocking=",
        "stream_null=", "timeout=", "cudagraph=", "report_cputime=", "report_timestamps=", "output_file=",
        "average=", "local_register=", "cta_policy=", "device_implementation=", "device_cta_count=", "memory=",
        "unalign=", "per_iter_timing=", "per_iter_skip=", "help"]
USAGE = ("USAGE: {prog} \n\t[-t,--nthreads <num threads>] \n\t[-g,--ngpus <gpus per thread>] \n\t"
         "[-b,--minbytes <min size in bytes>] \n\t[-e,--maxbytes <max size in bytes>] \n\t"
         "[-i,--stepbytes <increment size>] \n\t[-f,--stepfactor <increment factor>] \n\t"
         "[-n,--iters <iteration count>] \n\t[-m,--agg_iters <aggregated iteration count>] \n\t"
         "[-w,--warmup_iters <warmup iteration count>] \n\t[-h,--help]\n")
_SHORT_OF = {"nthreads": "t", "ngpus": "g", "minbytes": "b", "maxbytes": "e", "stepbytes": "i", "stepfactor": "f",
             "iters": "n", "warmup_iters": "w", "agg_iters": "m", "help": "h"}


def parsesize(text: str) -> float:
    """``common.cu``'s parsesize: a number with an optional K/M/G (binary) suffix; -1.0 when refused."""
    t = text.strip()
    num, unit = t, ""
    for i in range(len(t), 0, -1):
        try:
            float(t[:i])
        except ValueError:
            continue
        num, unit = t[:i], t[i:].strip()[:1]
        break
    else:
        return -1.0
    mult = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(unit.upper())
    return -1.0 if mult is None else float(num) * mult


def _strtol(text: str) -> int:
    try:
        return int(text, 0)
    except ValueError:
        return 0


def _env_float(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name, default))
    except ValueError:
        return default


def _rank() -> tuple[int, int]:
    e = os.environ
    return int(e.get("OMPI_COMM_WORLD_RANK", e.get("PMIX_RANK", e.get("SLURM_PROCID", "0")))), \
        int(e.get("OMPI_COMM_WORLD_SIZE", e.get("SLURM_NTASKS", "1")))


def _say(text: str = "", err: bool = False) -> None:
    stream = sys.stderr if err else sys.stdout
    stream.write(text + "\n")
    stream.flush()


def main(argv: list[str] | None = None) -> int:
    prog = "all_reduce_perf"
    args = sys.argv[1:] if argv is None else argv
    try:
        opts, _ = getopt.gnu_getopt(args, SHORT, LONG)
    except getopt.GetoptError as exc:
        if exc.opt and len(exc.opt) == 1 and "requires argument" in exc.msg:
            _say(f"{prog}: option requires an argument -- '{exc.opt}'", err=True)
        elif exc.opt and len(exc.opt) == 1:
            _say(f"{prog}: invalid option -- '{exc.opt}'", err=True)
        else:
            _say(f"{prog}: unrecognized option '--{exc.opt}'", err=True)
        _say("invalid option '?'")
        sys.stdout.write(USAGE.format(prog=prog))
        return 0
    cfg = {"t": "1", "g": "1", "b": "33554432", "e": "33554432", "f": "1", "i": "1048576", "n": "20", "w": "1",
           "m": "1"}
    for flag, value in opts:
        key = flag.lstrip("-")
        key = _SHORT_OF.get(key, key)
        if key == "h":
            sys.stdout.write(USAGE.format(prog=prog))
            return 0
        cfg[key] = value
    sizes = {}
    for key, name in (("b", "minbytes"), ("e", "maxbytes"), ("i", "stepBytes")):
        parsed = parsesize(cfg[key])
        if parsed < 0:
            _say(f"invalid size specified for '{name}'", err=True)
            return 255
        sizes[key] = int(parsed)
    if sizes["b"] > sizes["e"]:
        _say(f"invalid sizes for 'minbytes' and 'maxbytes': {sizes['b']} > {sizes['e']}", err=True)
        return 255
    return _run(prog, sizes, _strtol(cfg["g"]) or 1, _strtol(cfg["f"]), _strtol(cfg["n"]), _strtol(cfg["w"]))


def _run(prog: str, sizes: dict, ngpus: int, factor: int, iters: int, warmup: int) -> int:
    rank, procs = _rank()
    n = procs * ngpus
    host = socket.gethostname()
    net = "Socket" if os.environ.get("DLPERF_STANDIN_NCCL_NET", "IB").lower() == "socket" else "IB"
    top = _env_float("DLPERF_STANDIN_ALGBW", 100.0)
    if rank == 0:
        _say("# nccl-tests version 2.17.6 nccl-headers=22805 nccl-library=22805")
        _say(f"# Collective test starting: {prog}")
        _say(f"# nThread 1 nGpus {ngpus} minBytes {sizes['b']} maxBytes {sizes['e']} step: "
             + (f"{factor}(factor)" if factor > 1 else f"{sizes['i']}(bytes)")
             + f" warmup iters: {warmup} iters: {iters} agg iters: 1 validation: 1 graph: 0 unalign: 0")
        _say("#")
        _say("# Using devices")
        for r in range(n):
            _say(f"#  Rank {r:2d} Group  0 Pid {os.getpid():6d} on {host:>10} device {r % 8:2d} [0000:{r % 8 + 0x18:02x}:00] "
                 "NVIDIA H100 80GB HBM3")
    if os.environ.get("NCCL_DEBUG", "").upper() == "INFO":
        tag = f"{host}:{os.getpid()}:{os.getpid()}"
        dev = "[0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB ib0:10.0.0.1<0>" if net == "IB" else "[0]eth0:10.0.0.1<0>"
        _say(f"{tag} [0] NCCL INFO NET/{net} : Using {dev}")
        _say(f"{tag} [0] NCCL INFO Using network {net}")
        peer = (rank * ngpus + ngpus) % max(n, 1)
        _say(f"{tag} [0] NCCL INFO Channel 00/0 : {rank * ngpus}[0] -> {peer}[0] [send] via NET/{net}/0")
    if os.environ.get("DLPERF_STANDIN_NCCL_FAIL"):
        _say(f"{host}: Test NCCL failure common.cu:1021 'unhandled system error (run with NCCL_DEBUG=INFO for "
             "details) / '", err=True)
        return 1
    if rank != 0:
        return 0
    _say("#")
    _say("#                                                              out-of-place                       in-place")
    _say("#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong")
    _say("#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)")
    size, hi, busbws = max(sizes["b"] // 4 * 4, 4), sizes["e"], []
    while size <= hi:
        algbw = top * size / (size + hi / 64)  # latency-bound small sizes, the plateau at the top
        bus = algbw * 2 * (n - 1) / n
        us = size / (algbw * 1e3) if algbw > 0 else 0.0
        busbws.append(bus)
        row = f"{us:8.2f} {algbw:7.2f} {bus:7.2f}      0"
        _say(f"{size:12d}  {size // 4:12d}     float     sum      -1  {row}  {row}")
        size = size * factor if factor > 1 else size + max(sizes["i"], 1)
    _say("# Out of bounds values : 0 OK")
    _say(f"# Avg bus bandwidth    : {sum(busbws) / max(len(busbws), 1):g} ")
    _say("#")
    _say(f"# Collective test concluded: {prog}")
    return 0
