"""Whole-command timing for bench_extract.py (issue 28.5): ``dlperf extract`` as users run it (a fresh
``dlperf extract``, the console script, on one core), alternated with DLPerf's own extractor scripts on the
same tree when a directory holding them is given, beside ``grep -c -F`` reading the same bytes.

DLPerf's scripts are never part of this repository: copy them into a scratch directory (see
bench/README.md "Peer comparison") and pass it with ``--peer-dir``. They need an absolute
``--log_dir`` (they ``chdir`` to their own directory first) and the layout
``<log_dir>/<N>n<G>g/<model>_b<B>_<prec>_<k>.log``, which the bench's trees have.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from _common import ROOT

#: per generated sub-tree: (suite, the directory DLPerf's script reads, our extra args, peer script, peer args)
CASES = {
    "mxnet_bert": ("mxnet-bert", "bz32", ["--warmup-iters", "100", "--measure-iters", "100"],
                   "extract_mxnet_logs.py", ["--warmup_batches", "100", "--train_batches", "200",
                                              "--batch_size_per_device", "32"]),
    "pytorch_bert": ("pytorch-bert", "pytorch", ["--speed-rule", "timestamps", "--warmup-iters", "20",
                                                 "--measure-iters", "100"],
                     "extract_pytorch_logs_time.py", ["-bz", "96"]),
}


def dlperf_command() -> list[str]:
    """What users type: the ``dlperf`` console script of this interpreter's environment (``make install``
    puts it beside the interpreter), else ``python -m dlperf_tasks`` (which also loads ``runpy``)."""
    script = Path(sys.executable).with_name("dlperf")
    return [str(script)] if script.is_file() and os.access(script, os.X_OK) else [sys.executable, "-m", "dlperf_tasks"]


def _pin():
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})


def timed(argv: list[str], cwd: str | Path, env: dict[str, str] | None = None) -> dict[str, float]:
    """Run ``argv`` pinned to one core; wall seconds, CPU seconds and peak RSS of that one process."""
    t0 = time.perf_counter()
    p = subprocess.Popen(argv, cwd=str(cwd), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         preexec_fn=_pin)
    err = p.stderr.read()
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode not in (0, 1):
        raise RuntimeError(f"{' '.join(argv[:4])} ... exited {p.returncode}: {err.decode(errors='replace')[-800:]}")
    return {"seconds": wall, "cpu_seconds": ru.ru_utime + ru.ru_stime, "peak_rss_mib": ru.ru_maxrss / 1024}


def whole_command(tree: Path, sub: str, nbytes: int, peer_dir: Path | None, rounds: int, grep) -> dict[str, Any]:
    """``rounds`` alternated runs of dlperf extract (``--format dlperf``, what the peer prints) and
    the peer; medians. ``grep(tree)``: the grep -c -F figures on the same files."""
    suite, logdir, ours_args, peer_script, peer_args = CASES[sub]
    log_dir = (tree / sub / logdir).resolve()
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # measured as installed: byte-code cached
    ours_argv = [*dlperf_command(), "extract", "--suite", suite, "--log-dir", str(log_dir),
                 "--format", "dlperf", "--quiet", *ours_args]
    peer = peer_dir / peer_script if peer_dir else None
    if peer is not None and not peer.is_file():
        raise RuntimeError(f"{peer} not found (copy DLPerf's {peer_script} there; see bench/README.md)")
    peer_argv = [sys.executable, str(peer), "--log_dir", str(log_dir), *peer_args] if peer else None
    timed(ours_argv, ROOT, env)  # warm the byte-code cache and the page cache
    if peer_argv:
        timed(peer_argv, peer_dir, env)
    runs: dict[str, list[dict[str, float]]] = {"dlperf": [], "peer": []}
    for _ in range(rounds):
        runs["dlperf"].append(timed(ours_argv, ROOT, env))
        if peer_argv:
            runs["peer"].append(timed(peer_argv, peer_dir, env))
    out: dict[str, Any] = {"bytes": nbytes, "grep": grep(log_dir)}
    for who, rs in runs.items():
        if not rs:
            continue
        s = statistics.median(r["seconds"] for r in rs)
        out[who] = {"seconds": s, "seconds_all": [round(r["seconds"], 3) for r in rs],
                    "cpu_seconds": statistics.median(r["cpu_seconds"] for r in rs),
                    "mb_per_s": nbytes / 1e6 / s, "peak_rss_mib": max(r["peak_rss_mib"] for r in rs)}
    if "peer" in out:
        out["speedup_vs_peer"] = out["peer"]["seconds"] / out["dlperf"]["seconds"]
    return out


def rows(results: dict[str, dict[str, Any]]) -> list[list[str]]:
    out = []
    for sub, r in results.items():
        g = r["grep"]
        for who in ("dlperf", "peer"):
            if who not in r:
                continue
            x = r[who]
            name = "dlperf extract" if who == "dlperf" else f"DLPerf {CASES[sub][3]}"
            out.append([sub, name, f"{r['bytes'] / 1e6:.1f}", f"{x['seconds']:.3f}", f"{x['cpu_seconds']:.3f}",
                        f"{x['mb_per_s']:.0f}", f"{x['peak_rss_mib']:.0f}",
                        f"{r['speedup_vs_peer']:.2f}x" if who == "dlperf" and "speedup_vs_peer" in r else ""])
        out.append([sub, "grep -c -F (same files)", f"{r['bytes'] / 1e6:.1f}", f"{g['seconds']:.3f}",
                    f"{g['cpu_seconds']:.3f}", f"{r['bytes'] / 1e6 / max(g['seconds'], 1e-9):.0f}", "", ""])
    return out


HEADER = ["tree", "command (one core)", "MB", "median s", "CPU s", "MB/s", "peak RSS MiB", "vs peer"]


def scanners() -> str:
    """Which compiled scanners the measured command uses: the last line of ``dlperf --version``."""
    out = subprocess.run([*dlperf_command(), "--version"], cwd=str(ROOT), capture_output=True, text=True,
                         check=True).stdout
    return out.strip().splitlines()[-1]
