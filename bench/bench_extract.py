"""Benchmark: log extraction throughput (MB/s) and peak memory on a large DLPerf-layout tree.

    .venv/bin/python bench/bench_extract.py                 # ~500 MB of logs (about 2-4 minutes)
    .venv/bin/python bench/bench_extract.py --size-mb 50    # quicker
    .venv/bin/python bench/bench_extract.py --keep DIR      # keep the generated tree in DIR
    .venv/bin/python bench/bench_extract.py --size-mb 60 --peer-dir /tmp/dlperf_peer --whole-only
                                                            # whole command vs DLPerf's own scripts

What it does
------------
1. Generates realistic logs in a temp dir by repeating/renumbering the fixture logs of
   tests/data/fixture_logs (the lines are real formats, see each fixture's README):
   MXNet BERT 4n8g logs in which *every* rank prints every step (32 x 200 step lines, built
   from the 1n8g fixture), PyTorch BERT logs full of tqdm ``\\r`` progress bars, TensorFlow
   BERT and MXNet ResNet-50 logs, each as many trials ``<prefix>_b<B>_<prec>_<k>.log``.
2. Runs ``dlperf_tasks.measure.extract.extract_tree`` once per suite in a fresh process pinned to
   one core, and reports MB/s and peak RSS (``resource.getrusage``).
3. Streaming checks: the MXNet tree at 1/4 and full size (peak RSS must not grow much with
   the archive), the same tree as a ``.tar.gz`` archive, and ONE huge log (a valid trial
   padded with NCCL/tqdm noise lines) whose size must not show up in peak RSS.
   When memory grows, a tracemalloc run names the source lines that hold the memory.

4. Whole command (issue 28.5): ``dlperf extract --format dlperf`` (the console script) on the MXNet BERT
   and PyTorch BERT trees, a fresh process on one core, median of ``--rounds`` runs, alternated with
   DLPerf's own ``extract_mxnet_logs.py`` / ``extract_pytorch_logs_time.py`` when ``--peer-dir``
   holds them (never committed: bench/README.md says how to get them), beside ``grep -c -F``
   reading the same files; wall s, CPU s, MB/s and peak RSS of each process (``os.wait4``).

Exit status: 0 unless something really failed (a missed goal is only printed).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (ROOT, BenchError, Timer, goal, machine, peak_rss_mib, run_worker,  # noqa: E402
                     save_json, table, worker_main)
import _wholecmd  # noqa: E402

FIX = ROOT / "tests" / "data" / "fixture_logs"
#: goals: extraction speed on one core (500 MB of logs in under a minute), and streaming:
#: reading ONE huge log must not need memory in proportion to its size
GOAL_MBPS = 60.0  # issue 12.4: >= 60 MB/s on one core, beside grep -c on the same files
GOAL_BIGFILE_MIB = 150.0  # peak RSS while reading one huge log (imports included)
#: above this, the per-trial growth is attributed with tracemalloc (it is expected: every
#: trial's raw samples stay in the result, result.json carries them)
ATTRIBUTE_GROWTH_MIB_PER_100MB = 20.0

# (suite, directory under the generated root, share of the total bytes)
MIX = [("mxnet-bert", "mxnet_bert", 0.55), ("pytorch-bert", "pytorch_bert", 0.2),
       ("tensorflow-bert", "tensorflow_bert", 0.15), ("mxnet-resnet50", "mxnet_resnet50", 0.10)]
#: what ``grep -c -F`` counts in each sub-tree (the framework's iteration lines)
GREP = {"mxnet_bert": "[step ", "pytorch_bert": "Training Iteration", "tensorflow_bert": "Train Step:",
        "mxnet_resnet50": "Speed:"}


def grep_count(tree: Path, literal: str) -> dict[str, float]:
    """``grep -c -F`` over every .log of ``tree`` on one core: wall and CPU seconds (children rusage)."""
    import resource
    import subprocess

    files = sorted(str(p) for p in tree.rglob("*.log"))
    pin = (lambda: os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})) \
        if hasattr(os, "sched_setaffinity") else None
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with Timer() as t:
        for i in range(0, len(files), 500):
            subprocess.run(["grep", "-c", "-F", "--", literal, *files[i:i + 500]], stdout=subprocess.DEVNULL,
                           preexec_fn=pin, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"seconds": t.s, "cpu_seconds": cpu}


# ------------------------------------------------------------------ log generation
def _mxnet_bert_4n8g() -> bytes:
    """A 4n8g MXNet BERT log (32 ranks, every rank prints every step) from the 1n8g fixture:
    each per-rank line is printed 4x, i.e. by 32 ranks instead of 8."""
    src = (FIX / "mxnet_bert/bz32/1n8g/bert_b32_fp32_1.log").read_bytes()
    out = []
    for line in src.splitlines(keepends=True):
        per_rank = b"throughput=" in line or b"Namespace(" in line or b"files are found" in line \
            or b"Train cost" in line
        if b"Namespace(" in line:  # the run's own arguments must say 32 GPUs' worth (dlperf checks them)
            line = line.replace(b"total_batch_size=256", b"total_batch_size=1024").replace(
                b"total_batch_size_eval=256", b"total_batch_size_eval=1024")
        out.append(line * 4 if per_rank else line)
    return b"".join(out)


def templates() -> dict[str, list[tuple[str, bytes]]]:
    """Per generated sub-tree: (relative path pattern with {k} = trial number, file bytes)."""
    pt = FIX / "pytorch_bert/fp16_ngc_bert_b96/pytorch"
    return {
        "mxnet_bert": [("bz32/4n8g/bert_b32_fp32_{k}.log", _mxnet_bert_4n8g()),
                       ("bz32/1n8g/bert_b32_fp32_{k}.log", (FIX / "mxnet_bert/bz32/1n8g/bert_b32_fp32_1.log").read_bytes()),
                       ("bz32/1n1g/bert_b32_fp32_{k}.log", (FIX / "mxnet_bert/bz32/1n1g/bert_b32_fp32_1.log").read_bytes())],
        "pytorch_bert": [("pytorch/1n1g/bert-base-adam-training_b96_fp16_{k}.log",
                          (pt / "1n1g/bert-base-adam-training_b96_fp16_1.log").read_bytes()),
                         ("pytorch/2n8g/bert-base-adam-training_b96_fp16_{k}.log",
                          (pt / "2n8g/bert-base-adam-training_b96_fp16_1.log").read_bytes())],
        "tensorflow_bert": [(f"bz32/{t}/bert_b32_fp32_{{k}}.log",
                             (FIX / f"tensorflow_bert/bz32/{t}/bert_b32_fp32_1.log").read_bytes()) for t in ("1n1g", "1n8g")],
        "mxnet_resnet50": [(f"bz128/{t}/rn50_b128_fp32_{{k}}.log",
                            (FIX / f"mxnet_resnet50/bz128/{t}/rn50_b128_fp32_1.log").read_bytes()) for t in ("1n1g", "1n8g")],
    }


def generate(root: Path, sub: str, target_bytes: int) -> tuple[int, int]:
    """Write trials of ``sub`` under ``root/sub`` until ``target_bytes`` are written (round
    robin over the templates). Returns (bytes, files)."""
    tpls = templates()[sub]
    written = files = 0
    k = 0
    while written < target_bytes or k == 0:
        k += 1
        for pattern, data in tpls:
            p = root / sub / pattern.format(k=k)
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(data)
            written += len(data)
            files += 1
    return written, files


def generate_big_file(root: Path, target_bytes: int) -> int:
    """ONE valid MXNet BERT 1n8g trial padded to ``target_bytes`` with noise lines that DLPerf
    logs really carry (NCCL INFO, tqdm bars glued by ``\\r``), inserted before the first step."""
    src = (FIX / "mxnet_bert/bz32/1n8g/bert_b32_fp32_1.log").read_bytes()
    lines = src.splitlines(keepends=True)
    first = next(i for i, ln in enumerate(lines) if b"[step " in ln)
    noise = b"".join(
        b"node1:%d:%d [%d] NCCL INFO Ring %02d : 0[0] -> 1[1] via P2P/IPC\n" % (1000 + r, 2000 + r, r % 8, r % 24)
        for r in range(64)) + b"".join(b"\rIteration: %3d%%|##        | %d/1646 [00:%02d<12:00,  2.1it/s]" % (i % 100, i, i % 60)
                                      for i in range(200)) + b"\n"
    p = root / "big" / "1n8g" / "bert_b32_fp32_1.log"
    p.parent.mkdir(parents=True, exist_ok=True)
    with open(p, "wb") as fh:
        fh.writelines(lines[:first])
        size = sum(map(len, lines))
        while size < target_bytes:
            fh.write(noise)
            size += len(noise)
        fh.writelines(lines[first:])
    return p.stat().st_size


def make_tar(src: Path, dest: Path) -> int:
    with tarfile.open(dest, "w:gz", compresslevel=1) as tar:
        tar.add(src, arcname=".")
    return dest.stat().st_size


def tree_bytes(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _window(suite_id: str):
    """The generated PyTorch logs are the 150-step fixtures, read with DLPerf's timestamp rule (as DLPerf's
    extract_pytorch_logs_time.py does): the suite's default is seed 001's 4-step summary rule."""
    from dlperf_tasks.core.model import Window

    return Window(20, 100) if suite_id == "pytorch-bert" else None


# ------------------------------------------------------------------ worker (fresh process)
def work(p: dict[str, Any]) -> dict[str, Any]:
    """Extract one tree with one suite; pinned to one core."""
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    from dlperf_tasks.catalog import load_suite
    from dlperf_tasks.measure.extract import extract_tree

    suite = load_suite(p["suite"])
    tm = None
    if p.get("tracemalloc"):
        import tracemalloc

        tracemalloc.start(8)
        tm = tracemalloc
    rss0 = peak_rss_mib()
    import time

    cpu0 = time.process_time()
    with Timer() as t:
        res = extract_tree(suite, p["path"], window=_window(p["suite"]))
    out: dict[str, Any] = {"seconds": t.s, "cpu_seconds": time.process_time() - cpu0, "trials": len(res.trials),
                           "ok": sum(1 for r in res.trials if r.status.name == "OK"),
                           "cells": len(res.cells), "skipped": len(res.skipped), "rss_after_imports_mib": rss0}
    if tm is not None:
        _cur, peak = tm.get_traced_memory()
        snap = tm.take_snapshot().filter_traces([tm.Filter(False, tm.__file__)])
        out["tracemalloc_peak_mib"] = peak / 2**20
        out["retained_mib"] = sum(s.size for s in snap.statistics("filename")) / 2**20
        rows = []
        for st in snap.statistics("traceback")[:6]:
            frames = [f"{_short(fr.filename)}:{fr.lineno}" for fr in st.traceback if "dlperf_tasks" in fr.filename]
            rows.append({"mib": round(st.size / 2**20, 1), "count": st.count,
                         "where": " <- ".join(reversed(frames[-3:])) or f"{_short(st.traceback[0].filename)}:{st.traceback[0].lineno}"})
        out["top_retained"] = rows
    return out


def _short(path: str) -> str:
    m = re.search(r"(dlperf_tasks/.*|site-packages/.*|python3\.\d+/.*)$", path)
    return m.group(1) if m else path


# ------------------------------------------------------------------ main
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--size-mb", type=float, default=500.0, help="total MB of logs to generate (default 500)")
    ap.add_argument("--big-file-mb", type=float, default=None,
                    help="size of the single huge log (default: 1/4 of --size-mb, at least 5)")
    ap.add_argument("--no-tar", action="store_true", help="skip the .tar.gz run")
    ap.add_argument("--tracemalloc", action="store_true", help="always run the tracemalloc attribution")
    ap.add_argument("--no-tracemalloc", action="store_true",
                    help="never run the tracemalloc attribution (it takes minutes on large trees)")
    ap.add_argument("--keep", metavar="DIR", help="generate into DIR and keep it (default: a temp dir, removed)")
    ap.add_argument("--json", metavar="PATH", help="also write the numbers as JSON")
    ap.add_argument("--peer-dir", metavar="DIR",
                    help="directory holding DLPerf's extract_mxnet_logs.py and extract_pytorch_logs_time.py: "
                         "the whole-command runs alternate with them")
    ap.add_argument("--rounds", type=int, default=3, help="whole-command runs per tool (default 3; median)")
    ap.add_argument("--whole-only", action="store_true", help="only the whole-command comparison")
    a = ap.parse_args(argv)
    if a.size_mb <= 0:
        ap.error("--size-mb must be > 0")
    big_mb = a.big_file_mb if a.big_file_mb is not None else max(5.0, a.size_mb / 4)

    tmp = Path(a.keep) if a.keep else Path(tempfile.mkdtemp(prefix="dlperf-bench-extract-"))
    tmp.mkdir(parents=True, exist_ok=True)
    me = Path(__file__).resolve()
    results: dict[str, Any] = {"machine": machine(), "size_mb": a.size_mb}
    rows = []
    try:
        print(f"generating ~{a.size_mb:.0f} MB of logs in {tmp} ...", flush=True)
        total_b = 0
        gen = {}
        for suite, sub, share in MIX:
            b, n = generate(tmp / "full", sub, int(a.size_mb * 1e6 * share))
            gen[sub] = (b, n)
            total_b += b

        whole = {}
        for sub in ("mxnet_bert", "pytorch_bert"):
            whole[sub] = _wholecmd.whole_command(tmp / "full", sub, gen[sub][0], Path(a.peer_dir) if a.peer_dir else None,
                                                 a.rounds, lambda d, sub=sub: grep_count(d, GREP[sub]))
        results["whole_command"] = whole
        built = results["c_scanners"] = _wholecmd.scanners()
        print(f"\nwhole command on one core, median of {a.rounds} alternated runs ({machine()}, "
              f"load {os.getloadavg()[0]:.1f}); {built}")
        print(table(_wholecmd.HEADER, _wholecmd.rows(whole)))
        for sub, r in whole.items():
            if "speedup_vs_peer" in r:
                print(goal(f"{sub}: dlperf extract vs DLPerf's script (peer s / dlperf s)", r["speedup_vs_peer"], 2.0,
                           lower_is_better=False, unit="x"))
        print(goal("mxnet_bert whole command", whole["mxnet_bert"]["dlperf"]["mb_per_s"], GOAL_MBPS,
                   lower_is_better=False, unit="MB/s"))
        if a.whole_only:
            save_json(a.json, results)
            return 0
        quarter_b, quarter_n = generate(tmp / "quarter", "mxnet_bert", int(a.size_mb * 1e6 * MIX[0][2] / 4))
        big_b = generate_big_file(tmp, int(big_mb * 1e6))
        total_s = total_cpu = grep_s = grep_cpu = 0.0
        for suite, sub, _ in MIX:
            r = run_worker(me, {"suite": suite, "path": str(tmp / "full" / sub)})
            g = grep_count(tmp / "full" / sub, GREP[sub])
            b, n = gen[sub]
            _check(r, suite)
            total_s += r["seconds"]
            total_cpu += r["cpu_seconds"]
            grep_s += g["seconds"]
            grep_cpu += g["cpu_seconds"]
            mbps = b / 1e6 / r["seconds"]
            results[suite] = {**r, "bytes": b, "files": n, "mb_per_s": mbps, "grep": g,
                              "mb_per_cpu_s": b / 1e6 / max(r["cpu_seconds"], 1e-9)}
            rows.append([f"{suite} (dir)", n, f"{b / 1e6:.1f}", f"{r['ok']}/{r['trials']}", f"{r['seconds']:.1f}",
                         f"{mbps:.1f}", f"{b / 1e6 / max(r['cpu_seconds'], 1e-9):.1f}",
                         f"{b / 1e6 / max(g['seconds'], 1e-9):.0f}", f"{r['peak_rss_mib']:.0f}"])
        overall = total_b / 1e6 / total_s
        overall_cpu = total_b / 1e6 / max(total_cpu, 1e-9)
        results.update(overall_mb_per_s=overall, overall_mb_per_cpu_s=overall_cpu,
                       grep_mb_per_s=total_b / 1e6 / max(grep_s, 1e-9), grep_mb_per_cpu_s=total_b / 1e6 / max(grep_cpu, 1e-9))

        rq = run_worker(me, {"suite": "mxnet-bert", "path": str(tmp / "quarter" / "mxnet_bert")})
        _check(rq, "mxnet-bert (1/4)")
        rows.append(["mxnet-bert (dir, 1/4)", quarter_n, f"{quarter_b / 1e6:.1f}", f"{rq['ok']}/{rq['trials']}",
                     f"{rq['seconds']:.1f}", f"{quarter_b / 1e6 / rq['seconds']:.1f}",
                     f"{quarter_b / 1e6 / max(rq['cpu_seconds'], 1e-9):.1f}", "", f"{rq['peak_rss_mib']:.0f}"])
        full = results["mxnet-bert"]
        growth = (full["peak_rss_mib"] - rq["peak_rss_mib"]) / max(1e-9, (full["bytes"] - quarter_b) / 1e8)
        results["rss_growth_mib_per_100mb"] = growth

        if not a.no_tar:
            tar = tmp / "mxnet_bert.tar.gz"
            with Timer() as tt:
                tar_b = make_tar(tmp / "full" / "mxnet_bert", tar)
            rt = run_worker(me, {"suite": "mxnet-bert", "path": str(tar)})
            _check(rt, "mxnet-bert (tar.gz)")
            results["tar_gz"] = {**rt, "archive_bytes": tar_b, "log_bytes": full["bytes"], "pack_s": tt.s,
                                 "mb_per_s": full["bytes"] / 1e6 / rt["seconds"]}
            rows.append(["mxnet-bert (.tar.gz)", full["files"], f"{full['bytes'] / 1e6:.1f} ({tar_b / 1e6:.0f} gz)",
                         f"{rt['ok']}/{rt['trials']}", f"{rt['seconds']:.1f}",
                         f"{full['bytes'] / 1e6 / rt['seconds']:.1f}",
                         f"{full['bytes'] / 1e6 / max(rt['cpu_seconds'], 1e-9):.1f}", "", f"{rt['peak_rss_mib']:.0f}"])

        rb = run_worker(me, {"suite": "mxnet-bert", "path": str(tmp / "big")})
        _check(rb, "mxnet-bert (one big log)")
        results["big_file"] = {**rb, "bytes": big_b, "mb_per_s": big_b / 1e6 / rb["seconds"]}
        rows.append(["mxnet-bert (ONE log)", 1, f"{big_b / 1e6:.1f}", f"{rb['ok']}/{rb['trials']}",
                     f"{rb['seconds']:.1f}", f"{big_b / 1e6 / rb['seconds']:.1f}",
                     f"{big_b / 1e6 / max(rb['cpu_seconds'], 1e-9):.1f}", "", f"{rb['peak_rss_mib']:.0f}"])

        print()
        print(f"extraction on one core ({machine()})")
        print(table(["tree", "files", "MB", "ok/trials", "s", "MB/s", "MB/CPU-s", "grep -c MB/s", "peak RSS MiB"], rows))
        print()
        print(f"overall: {total_b / 1e6:.0f} MB in {total_s:.1f} s = {overall:.1f} MB/s wall, "
              f"{overall_cpu:.1f} MB per CPU-second ({total_cpu:.1f} CPU-s); "
              f"grep -c -F on the same files in this run: {results['grep_mb_per_s']:.0f} MB/s wall, "
              f"{results['grep_mb_per_cpu_s']:.0f} MB per CPU-second ({os.getloadavg()[0]:.1f} load average)")
        per_trial = (full['peak_rss_mib'] - rq['peak_rss_mib']) / max(1, full['trials'] - rq['trials']) * 1024
        results["rss_growth_kib_per_trial"] = per_trial
        print(f"peak RSS growth (mxnet-bert 1/4 -> full): {growth:.1f} MiB per 100 MB of logs = {per_trial:.0f} KiB "
              "per trial (info: the trials' raw samples stay in the result; one huge log shows whether reading streams)")
        print(goal("extraction speed (one core, wall)", overall, GOAL_MBPS, lower_is_better=False, unit="MB/s"))
        print(goal("extraction speed (one core, CPU time: what a shared VM cannot inflate)", overall_cpu, GOAL_MBPS,
                   lower_is_better=False, unit="MB/s"))
        print(goal(f"streaming: one {big_b / 1e6:.0f} MB log", rb["peak_rss_mib"], GOAL_BIGFILE_MIB, unit="MiB"))

        if a.no_tracemalloc:
            pass
        elif a.tracemalloc or growth > ATTRIBUTE_GROWTH_MIB_PER_100MB or rb["peak_rss_mib"] > GOAL_BIGFILE_MIB:
            which = tmp / "big" if rb["peak_rss_mib"] > GOAL_BIGFILE_MIB else tmp / "quarter" / "mxnet_bert"
            print(f"\ntracemalloc: what is still held after extract_tree({which.name}) returns (largest first):")
            rm = run_worker(me, {"suite": "mxnet-bert", "path": str(which), "tracemalloc": True})
            results["tracemalloc"] = rm
            print(f"  traced peak {rm['tracemalloc_peak_mib']:.1f} MiB, retained {rm['retained_mib']:.1f} MiB "
                  f"for {rm['trials']} trials")
            for row in rm["top_retained"]:
                print(f"  {row['mib']:8.1f} MiB  {row['count']:>9} blocks  {row['where']}")
        save_json(a.json, results)
    except BenchError as exc:
        print(f"bench_extract: error: {exc}", file=sys.stderr)
        return 1
    finally:
        if not a.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


def _check(r: dict[str, Any], what: str) -> None:
    if r["trials"] == 0 or r["ok"] == 0:
        raise BenchError(f"{what}: extraction found {r['trials']} trials, {r['ok']} valid; the generated logs "
                         "should all be valid trials")


if __name__ == "__main__":
    if not worker_main(sys.argv[1:], work):
        sys.exit(main())
