"""Shell commands the telemetry sampler runs on a node (built here, quoted here, run elsewhere).

Every value that reaches a command goes through :func:`shlex.quote`; intervals are checked
numbers. Three kinds of command:

* :func:`gpu_loop_command`: ``nvidia-smi --query-gpu=<GPU_FIELDS> --format=csv,noheader,nounits
  -lms <ms>`` under ``stdbuf -oL`` (nvidia-smi block-buffers a redirected stdout: without it a
  stopped sampler loses its last seconds, seen on a real H100) and ``TZ=UTC`` (its timestamps are
  local time). Absent nvidia-smi prints the
  :data:`ABSENT_MARK` line and exits 0: a CPU node is recorded as "no GPU telemetry", never an error.
* :func:`host_loop_command`: every ``interval`` seconds a ``@ <epoch>`` line, the ``cpu*`` lines
  of ``/proc/stat``, the MemTotal/MemAvailable/SwapTotal/SwapFree lines of ``/proc/meminfo`` and a
  ``tree <ticks> <procs>`` line: the summed utime+stime (clock ticks) of the trial's processes
  (those whose environment carries ``DLPERF_TRIAL=<key>``: the job and its container alike).
* :func:`snapshot_command`: one round trip before and after the trial: the GPU inventory
  (index, PCI bus id, name, max clocks), ``nvidia-smi -q -d ECC`` (error counters), the kernel
  log's ``NVRM: Xid`` lines (the driver logs XIDs there; nvidia-smi has no XID counter), and the
  InfiniBand stack (``ofed_info -s``, ``ibstat``). Sections start with ``=== dlperf:<name> ===``.
"""

from __future__ import annotations

import shlex

#: the loop's query fields, in output order (``timestamp`` first, so samples carry nvidia-smi's own clock)
GPU_FIELDS = ("timestamp", "index", "memory.used", "memory.total", "utilization.gpu", "power.draw", "power.limit",
              "clocks.sm", "clocks.mem", "clocks.max.sm", "temperature.gpu", "clocks_throttle_reasons.active")
#: one-off inventory fields
INVENTORY_FIELDS = ("index", "pci.bus_id", "name", "uuid", "clocks.max.sm", "clocks.max.mem", "power.limit",
                    "driver_version")
ABSENT_MARK = "dlperf-telemetry: nvidia-smi absent"
SECTION = "=== dlperf:{} ==="
#: default kernel-log reader (first that works); XID lines are picked by the parser
KERNEL_LOG_CMD = "dmesg 2>/dev/null || journalctl -k -o cat --no-pager 2>/dev/null"
TRIAL_ENV = "DLPERF_TRIAL"


def _interval_ms(interval_s: float) -> int:
    ms = int(round(float(interval_s) * 1000))
    if not 50 <= ms <= 60_000:
        raise ValueError(f"telemetry interval must be between 0.05 and 60 s, got {interval_s!r}")
    return ms


def gpu_loop_command(nvidia_smi: str = "nvidia-smi", interval_s: float = 1.0) -> str:
    ms = _interval_ms(interval_s)
    smi = shlex.quote(nvidia_smi)
    query = f"{smi} --query-gpu={','.join(GPU_FIELDS)} --format=csv,noheader,nounits -lms {ms}"
    return (f"if command -v {smi} >/dev/null 2>&1; then "
            f"if command -v stdbuf >/dev/null 2>&1; then TZ=UTC exec stdbuf -oL {query}; else TZ=UTC exec {query}; fi; "
            f"else echo {shlex.quote(ABSENT_MARK)}; fi")


def host_loop_command(trial_key: str, interval_s: float = 1.0) -> str:
    ms = _interval_ms(interval_s)
    pattern = shlex.quote(f"^{TRIAL_ENV}={trial_key}$")
    # /proc/PID/stat: fields after "comm) " are state ppid pgrp session ... utime(12th) stime(13th)
    awk = shlex.quote('{i=index($0,") "); n=split(substr($0,i+2),f," "); if (n>13) {t+=f[12]+f[13]; c++}} '
                      'END {printf "tree %d %d\\n", t, c}')
    tree = (f"pids=$(grep -lsz -- {pattern} /proc/[0-9]*/environ 2>/dev/null | sed -n 's#/environ$#/stat#p'); "
            f"if [ -n \"$pids\" ]; then cat $pids 2>/dev/null | awk {awk}; else echo 'tree 0 0'; fi")
    return ("while :; do "
            "printf '@ %s\\n' \"$(date +%s.%N)\"; "
            "grep '^cpu' /proc/stat; "
            "grep -E '^(MemTotal|MemAvailable|SwapTotal|SwapFree):' /proc/meminfo; "
            f"{tree}; "
            f"sleep {ms / 1000:.3f}; done")


def snapshot_command(nvidia_smi: str = "nvidia-smi", kernel_log_cmd: str = KERNEL_LOG_CMD) -> str:
    """Before/after snapshot. ``kernel_log_cmd`` is a trusted shell fragment from the settings
    (never user input from a form); its output is filtered to ``NVRM: Xid`` lines here."""
    smi = shlex.quote(nvidia_smi)
    parts = [
        f"echo {shlex.quote(SECTION.format('inventory'))}",
        f"if command -v {smi} >/dev/null 2>&1; then "
        f"{smi} --query-gpu={','.join(INVENTORY_FIELDS)} --format=csv,noheader,nounits 2>&1; "
        f"echo {shlex.quote(SECTION.format('ecc'))}; {smi} -q -d ECC 2>&1; "
        f"else echo {shlex.quote(ABSENT_MARK)}; fi",
        f"echo {shlex.quote(SECTION.format('xid'))}",
        f"( {kernel_log_cmd} ) | grep -a 'NVRM: Xid' | tail -n 200",
        f"echo {shlex.quote(SECTION.format('ofed'))}",
        "(command -v ofed_info >/dev/null 2>&1 && ofed_info -s 2>&1) || echo absent",
        f"echo {shlex.quote(SECTION.format('ibstat'))}",
        "(command -v ibstat >/dev/null 2>&1 && ibstat 2>&1) || echo absent",
        f"echo {shlex.quote(SECTION.format('end'))}",
    ]
    return "; ".join(parts) + "; true"


def container_ofed_command(image: str, docker: str = "docker") -> str:
    """``ofed_info -s`` inside ``image`` (what the container's MOFED userland is); ``absent`` if none."""
    return (f"{shlex.quote(docker)} run --rm --net=host --entrypoint sh {shlex.quote(image)} -c "
            + shlex.quote("(command -v ofed_info >/dev/null 2>&1 && ofed_info -s) || echo absent"))


def split_sections(text: str) -> dict[str, str]:
    """``=== dlperf:<name> ===`` sections of a snapshot's output."""
    out: dict[str, list[str]] = {}
    cur: str | None = None
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("=== dlperf:") and s.endswith(" ==="):
            cur = s[len("=== dlperf:"):-4]
            out.setdefault(cur, [])
        elif cur is not None:
            out[cur].append(line)
    return {k: "\n".join(v) for k, v in out.items() if k != "end"}
