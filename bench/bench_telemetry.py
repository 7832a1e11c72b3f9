"""Telemetry sampler benchmarks (issue 16).

``--overhead S``: run the sampler (nvidia-smi loop + /proc loop, 1 s interval) alone for S seconds on
this machine and report its CPU time (children's rusage: the loops and everything they started) and
the bytes it produced, per minute. A machine without nvidia-smi measures the host loop only.

``--gpu-smoke``: the smoke suite's real trainer (dlperf_tasks/smoke/train_bert.py) on this machine's
GPU with CUDA, AMP and the BERT-base shape, under the sampler; prints the DLPerf trial speed (the
smoke framework's rule over the measured window), the telemetry summary (peak memory, power, clocks,
throttling) and the GPU model, and draws the per-trial plot. Needs torch and a CUDA GPU.

    python bench/bench_telemetry.py --overhead 60
    python bench/bench_telemetry.py --gpu-smoke --batch-size 32 --iterations 220 --out /tmp/t
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dlperf_tasks.telemetry.sampler import LocalSampler, TelemetryConfig, save_raw  # noqa: E402


def _cpu_children() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def overhead(seconds: float, interval: float) -> dict:
    cfg = TelemetryConfig(interval_s=interval)
    c0 = _cpu_children()
    s = LocalSampler("bench-overhead", cfg)
    s.start()
    time.sleep(seconds)
    raw = s.stop()[s.node]
    cpu = _cpu_children() - c0
    loops = len(raw.gpu.encode()) + len(raw.host.encode())
    snaps = len(raw.before.encode()) + len(raw.after.encode())
    per_min = 60.0 / seconds
    return {"seconds": seconds, "interval_s": interval, "cores": os.cpu_count(),
            "nvidia_smi": "absent" if "absent" in raw.gpu[:80] else "present",
            "cpu_s_per_min": round(cpu * per_min, 2), "cpu_share_of_one_core": round(cpu / seconds, 4),
            "loop_bytes_per_min": int(loops * per_min), "gpu_loop_bytes_per_min": int(len(raw.gpu.encode()) * per_min),
            "host_loop_bytes_per_min": int(len(raw.host.encode()) * per_min), "snapshot_bytes_per_trial": snaps}


def gpu_smoke(args) -> dict:
    from dlperf_tasks.frameworks import get
    from dlperf_tasks.core.model import Cell, Trial, TrialResult, TrialStatus, Window
    from dlperf_tasks.telemetry import report
    from dlperf_tasks.core.topology import Topology

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    window = Window(warmup=args.warmup, measure=args.iterations - args.warmup)
    cell = Cell("smoke", "smoke_bert", "bert-base", args.precision, args.batch_size, Topology.parse("1n1g"),
                window=window)
    trial = Trial(cell, 1)
    sampler = LocalSampler(trial.key, TelemetryConfig(interval_s=args.interval), gpu_indices=[0])
    sampler.start()
    started = time.time()
    cmd = [sys.executable, "dlperf_tasks/smoke/train_bert.py", "--device", args.device, "--config", args.config,
           "--precision", args.precision, "--batch-size", str(args.batch_size), "--iterations", str(args.iterations)]
    env = {**os.environ, "DLPERF_TRIAL": trial.key}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    time.sleep(1.5)  # one more sample after the end
    raw = sampler.stop()
    (out / "train.log").write_text(proc.stdout + proc.stderr)
    fw = get("smoke_bert")
    parsed = fw.parse(proc.stdout.splitlines(keepends=True))
    problems = fw.check(parsed, cell, window)
    metric = fw.trial_metric(parsed, cell, window) if not problems and proc.returncode == 0 else None
    res = TrialResult(trial, TrialStatus.OK if metric else TrialStatus.INVALID_LOG, "; ".join(problems), metric,
                      samples=parsed.samples, started_at=started)
    save_raw(out, trial.key, raw)
    summary = report.summarise_run_trial(out, res)
    plot = report.plot_trial(out, trial.key, summary, out / f"telemetry_{trial.key}.png")
    inv = [line for line in raw[sampler.node].before.splitlines() if line[:1].isdigit()]
    losses = [float(x.split("loss=")[1].split()[0]) for x in proc.stdout.splitlines() if " loss=" in x]
    return {"rc": proc.returncode, "problems": problems, "gpu": inv[:1], "samples_per_s": metric.value if metric else None,
            "config": next((x for x in proc.stdout.splitlines() if "config" in x), ""),
            "final_loss": losses[-1] if losses else None, "telemetry": summary, "plot": str(plot) if plot else None,
            "stderr_tail": proc.stderr[-600:] if proc.returncode else ""}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--overhead", type=float, default=0.0, help="seconds of sampler-only run (0 = skip)")
    p.add_argument("--interval", type=float, default=1.0)
    p.add_argument("--gpu-smoke", action="store_true")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--iterations", type=int, default=220)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--precision", default="amp", choices=["amp", "fp32"])
    p.add_argument("--out", default="/tmp/dlperf-bench-telemetry")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help="cpu: only to try the script")
    p.add_argument("--config", default="base", choices=["base", "tiny"])
    a = p.parse_args()
    res = {}
    if a.overhead:
        res["overhead"] = overhead(a.overhead, a.interval)
    if a.gpu_smoke:
        res["gpu_smoke"] = gpu_smoke(a)
    print(json.dumps(res, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
