"""Watchdog cost on a huge log: a stand-in PyTorch BERT log (the DLL ``Training Epoch ... Training
Iteration N`` lines of the real format, plus NCCL noise) grows to 100 MB and to 1 GB while the
trial runner's watchdog (``remote/watch.NodeLog`` + ``BlockProgress``, exactly what
``remote/trial`` runs per node) polls it: each poll reads the new bytes (here from the local file
instead of SFTP), appends them to the trial's log file and parses only them.

Printed per size, each in a fresh process: peak RSS (goal: flat, the same for 100 MB and 1 GB),
polling CPU per new MB over the whole run and over its first and last tenth (goal: constant),
the highest iteration seen (must equal the last one written). ``--old`` also runs the previous
watchdog (the whole in-memory buffer re-parsed on every poll) on small sizes, to show its
quadratic cost.

    .venv/bin/python bench/bench_watchdog.py [--sizes-mb 100,1000] [--poll-mb 1] [--old 2,4,8]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import BenchError, goal, machine, run_worker, save_json, table, worker_main  # noqa: E402

NOISE = ("node1:4242:4242 [0] NCCL INFO Channel 00 : 0[1b000] -> 1[1c000] via P2P/IPC\n"
         "Iteration:  41%|####      | 410/1000 [00:41<00:59,  9.93it/s]\n")


def stand_in_lines(first: int, n: int) -> str:
    """``n`` iterations of the PyTorch BERT (NGC DLE) log format starting at ``first``."""
    out = []
    for it in range(first, first + n):
        s = it % 60
        out.append(f"DLL 2020-09-24 02:{(it // 60) % 60:02d}:{s:02d}.105587 - Training Epoch: 0 Training "
                   f"Iteration: {it}  average_loss : 10.8046875  step_loss : 10.8046875  learning_rate : 4e-05 \n")
        if it % 10 == 0:
            out.append(NOISE)
    return "".join(out)


def rss_mib() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def watch_worker(p: dict) -> dict:
    """Grow a log to ``size_mb`` in ``poll_mb`` steps; after each step one watchdog poll."""
    from dlperf_tasks import frameworks
    from dlperf_tasks.remote.watch import BlockProgress, NodeLog

    fw = frameworks.get("pytorch_bert")
    size, step = int(p["size_mb"] * 1e6), int(p["poll_mb"] * 1e6)
    tmp = Path(p["dir"])
    src, dst = tmp / "node.log", tmp / "out" / "trial.log"
    log = NodeLog(dst, BlockProgress(fw)) if not p.get("old") else None
    buf = bytearray()  # --old: the previous watchdog's in-memory buffer
    block = stand_in_lines(1, 3000).encode()
    per_block = block.count(b"Training Iteration")
    it = 0
    cpu, rows, rss = [], [], []
    with open(src, "wb") as w, open(src, "rb") as r:
        def read(offset: int, n: int) -> bytes:
            r.seek(offset)
            return r.read(n)

        written = 0
        while written < size:
            pending = b""
            while len(pending) < step:
                pending += stand_in_lines(it + 1, per_block).encode()
                it += per_block
            w.write(pending)
            w.flush()
            written += len(pending)
            c0 = time.process_time()
            if log is not None:
                got = log.pull(read)
                top = log.max_iteration
            else:
                chunk = read(len(buf), 1 << 30)
                buf += chunk
                got = len(chunk)
                parsed = fw.parse(bytes(buf).decode(errors="replace").splitlines(keepends=True))
                top = max(parsed.facts.iterations_seen or [0])
            cpu.append(time.process_time() - c0)
            rows.append(got)
            rss.append(rss_mib())
    if log is not None:
        log.close()
        top = log.max_iteration
    n = len(cpu)
    tenth = max(1, n // 10)

    def per_mb(sl: slice) -> float:
        return sum(cpu[sl]) / (sum(rows[sl]) / 1e6) * 1e3  # ms of CPU per MB

    return {"bytes": sum(rows), "polls": n, "cpu_s": sum(cpu), "ms_per_mb": per_mb(slice(None)),
            "ms_per_mb_first": per_mb(slice(0, tenth)), "ms_per_mb_last": per_mb(slice(n - tenth, n)),
            "rss_first_mib": rss[tenth - 1], "rss_last_mib": rss[-1], "max_iteration": top, "last_written": it,
            "log_copy_ok": log is None or dst.stat().st_size == src.stat().st_size}


def run_size(size_mb: float, poll_mb: float, old: bool = False) -> dict:
    with tempfile.TemporaryDirectory(prefix="dlperf-bench-watch-") as d:
        return run_worker(__file__, {"size_mb": size_mb, "poll_mb": poll_mb, "dir": d, "old": old}, timeout=3600)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes-mb", default="100,1000", help="log sizes in MB (default 100,1000)")
    ap.add_argument("--poll-mb", type=float, default=1.0, help="log growth between two polls, MB (default 1)")
    ap.add_argument("--old", default="", help="also run the previous full-reparse watchdog at these sizes (MB)")
    ap.add_argument("--json", metavar="FILE", help="also write the numbers as JSON")
    a = ap.parse_args(argv)
    sizes = [float(x) for x in a.sizes_mb.split(",") if x]
    data = {"machine": machine(), "poll_mb": a.poll_mb, "incremental": {}, "old": {}}
    rows = []
    for mb in sizes:
        r = run_size(mb, a.poll_mb)
        if r["max_iteration"] != r["last_written"] or not r["log_copy_ok"]:
            raise BenchError(f"{mb} MB: watchdog saw iteration {r['max_iteration']} of {r['last_written']}, "
                             f"log copy complete: {r['log_copy_ok']}")
        data["incremental"][str(mb)] = r
        rows.append(["incremental", f"{r['bytes'] / 1e6:.0f} MB", r["polls"], f"{r['cpu_s']:.1f}",
                     f"{r['ms_per_mb']:.1f}", f"{r['ms_per_mb_first']:.1f} / {r['ms_per_mb_last']:.1f}",
                     f"{r['peak_rss_mib']:.0f}", f"{r['rss_first_mib']:.0f} / {r['rss_last_mib']:.0f}"])
    for mb in [float(x) for x in a.old.split(",") if x]:
        r = run_size(mb, a.poll_mb, old=True)
        data["old"][str(mb)] = r
        rows.append(["old (re-parse all)", f"{r['bytes'] / 1e6:.0f} MB", r["polls"], f"{r['cpu_s']:.1f}",
                     f"{r['ms_per_mb']:.1f}", f"{r['ms_per_mb_first']:.1f} / {r['ms_per_mb_last']:.1f}",
                     f"{r['peak_rss_mib']:.0f}", f"{r['rss_first_mib']:.0f} / {r['rss_last_mib']:.0f}"])
    print(f"watchdog on a growing stand-in PyTorch BERT log, one poll per {a.poll_mb:g} MB ({machine()})")
    print(table(["watchdog", "log", "polls", "CPU s", "CPU ms/MB", "ms/MB first/last 10%", "peak RSS MiB",
                 "RSS MiB at 10% / end"], rows))
    inc = [data["incremental"][str(mb)] for mb in sizes]
    if len(inc) >= 2:
        print(goal("peak RSS, largest / smallest log", inc[-1]["peak_rss_mib"] / inc[0]["peak_rss_mib"], 1.1,
                   unit="x"))
        print(goal("CPU per MB, largest / smallest log", inc[-1]["ms_per_mb"] / inc[0]["ms_per_mb"], 1.2, unit="x"))
    print(goal("CPU per MB, last / first tenth of the largest log",
               inc[-1]["ms_per_mb_last"] / inc[-1]["ms_per_mb_first"], 1.2, unit="x"))
    save_json(a.json, data)
    return 0


if __name__ == "__main__":
    if not worker_main(sys.argv[1:], watch_worker):
        sys.exit(main())
