"""Telemetry parsers and summaries against REAL nvidia-smi output (tests/data/nvidia_smi/: captured on
an NVIDIA H100 80GB HBM3, driver 580.159.04) and real /proc formats; the bash command builders
run for real here."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest

from dlperf_tasks.telemetry import NodeRaw, Policy, commands, gpu, host, summarise_trial

DATA = Path(__file__).resolve().parents[1] / "data" / "nvidia_smi"
BUS = "00000000:00:06.0"


def test_real_loop_csv_parses():
    loop = gpu.parse_gpu_loop((DATA / "h100_one_nounits.csv").read_text())
    s = loop.gpus[0]
    assert not loop.absent and not loop.errors
    assert s.memory_total == 81559 and s.power_limit == 700 and s.max_sm_clock == 1980
    assert s.sm_clock == [1980] and s.power == [122.74] and s.reasons == [0]
    assert s.t[0] == pytest.approx(1795406275.155)  # 2026/11/23 03:57:55.155 UTC


def test_loop_with_units_and_header_lines_is_tolerated():
    # the header/units variant (format=csv) must not crash; units are stripped, header counted as error
    loop = gpu.parse_gpu_loop((DATA / "h100_loop_header.csv").read_text())
    s = loop.gpus[0]
    assert len(s) == 39 and max(s.memory_used) == 975 and s.sm_clock[-1] == 1980
    assert s.reasons[0] == 0x1 and gpu.decode_reasons(s.reasons[0]) == ["gpu_idle"]
    assert len(loop.errors) == 1 and loop.errors[0].startswith("timestamp, index")


def test_real_power_capped_matmul_summary():
    """The capture above ran an 8192^3 bf16 matmul loop for 4 s: the H100 hit its 700 W cap (reason 0x4)."""
    raw = {"gpu-node": NodeRaw(gpu=(DATA / "h100_loop_header.csv").read_text())}
    t0 = gpu._ts("2026/11/23 03:57:50.200")
    out = summarise_trial(raw, window=(t0, t0 + 3.9))
    g0 = out["nodes"]["gpu-node"]["gpus"]["0"]
    assert g0["peak_memory_mib"] == 975 and g0["power_limit_w"] == 700 and g0["mean_power_w"] > 550
    assert g0["throttle_reasons"] == {"sw_power_cap": g0["throttled_s"]} and 3.5 < g0["throttled_s"] < 4.2
    assert g0["throttled_share"] > 0.9 and 0.7 < g0["sm_clock_ratio"] < 0.85
    assert [f["kind"] for f in out["flags"]] == ["throttled"] and out["invalid_reason"] == ""


def test_na_values_and_reason_bits():
    line = "2026/11/23 04:00:00.000, 3, [N/A], 40536, [Not Supported], 300.10, 400.00, 900, 1215, 1410, 80, 0x0000000000000044"
    s = gpu.parse_gpu_loop(line).gpus[3]
    assert s.memory_used == [None] and s.util == [None] and s.reasons == [0x44]
    assert gpu.decode_reasons(0x44) == ["sw_power_cap", "hw_thermal_slowdown"]
    assert 0x1 & gpu.THROTTLE_MASK == 0 and 0x40 & gpu.THROTTLE_MASK


def test_real_query_parses_nested_sections():
    flat = gpu.parse_query((DATA / "h100_q.txt").read_text())[BUS]
    assert flat["Product Name"] == "NVIDIA H100 80GB HBM3"
    assert flat["Max Clocks/SM"] == "1980 MHz"
    assert flat["Clocks Event Reasons/HW Slowdown/HW Thermal Slowdown"] == "Not Active"
    assert flat["Clocks Event Reasons Counters/SW Power Capping"] == "4199923 us"
    assert flat["FB Memory Usage/Total"] == "81559 MiB"


def test_real_ecc_counters_and_a_new_error():
    text = (DATA / "h100_q_ecc.txt").read_text()
    assert gpu.ecc_counters(gpu.parse_query(text)[BUS]) == {
        "volatile_correctable": 0, "volatile_uncorrectable": 0, "remapped_uncorrectable": 0}
    bumped = text.replace("            DRAM Uncorrectable                         : 0",
                          "            DRAM Uncorrectable                         : 2", 1)
    assert gpu.ecc_counters(gpu.parse_query(bumped)[BUS])["volatile_uncorrectable"] == 2


def test_older_ecc_layout_counts_totals_only():
    text = ("GPU 00000000:06:00.0\n    ECC Errors\n        Volatile\n            Single Bit\n"
            "                Device Memory         : 3\n                Total                 : 3\n"
            "            Double Bit\n                Device Memory         : 1\n                Total                 : 1\n")
    assert gpu.ecc_counters(gpu.parse_query(text)["00000000:06:00.0"]) == {
        "volatile_correctable": 3, "volatile_uncorrectable": 1}


def test_xid_lines_and_new_ones():
    before = "[ 5.1] NVRM: Xid (PCI:0000:cb:00): 13, pid='<unknown>', name=<unknown>, Graphics SM Warp Exception\n"
    after = before + "[ 99.0] NVRM: Xid (PCI:0000:00:06): 79, pid=1234, name=python3, GPU has fallen off the bus.\n"
    fresh = gpu.new_xids(before, after)
    assert [(x.bus, x.code) for x in fresh] == [("00:06", 79)]
    assert gpu.bus_key(BUS) == "00:06"
    # the older form without "PCI:"
    assert gpu.parse_xids("NVRM: Xid (0000:01:00): 31, Ch 0000000b, engmask 00000120")[0].code == 31


def test_host_loop_runs_for_real_and_parses():
    cmd = commands.host_loop_command("h7-test-key", 0.2)
    proc = subprocess.Popen(["bash", "-c", cmd], stdout=subprocess.PIPE, text=True)
    lines: list[str] = []
    try:  # each block starts with "@ <time>": stop at the 5th, the 4 before it are complete (however slow the machine)
        for line in proc.stdout:
            if line.startswith("@ ") and sum(seen.startswith("@ ") for seen in lines) == 4:
                break
            lines.append(line)
    finally:
        proc.kill()
        proc.wait()
    loop = host.parse_host_loop("".join(lines))
    assert len(loop.samples) >= 3 and loop.cores >= 1
    s = loop.samples[-1]
    assert 0.0 <= s.busy <= 1.0 and s.mem_total_kib and s.mem_used_kib
    assert s.tree_cores is None and s.tree_procs == 0  # no process carries that trial key


def test_gpu_loop_command_absent_tool_is_not_fatal():
    cmd = commands.gpu_loop_command("/nonexistent/nvidia-smi", 1)
    proc = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=10)
    assert proc.returncode == 0 and gpu.parse_gpu_loop(proc.stdout).absent
    with pytest.raises(ValueError):
        commands.gpu_loop_command("nvidia-smi", 0.001)
    assert "'/x; rm -rf /'" in commands.gpu_loop_command("/x; rm -rf /")  # quoted, never run as code


def test_snapshot_command_sections_without_gpu_or_ib():
    cmd = commands.snapshot_command("/nonexistent/nvidia-smi", kernel_log_cmd="printf " + shlex.quote(
        "NVRM: Xid (PCI:0000:00:06): 48, pid=1, DBE\nother line\n"))
    out = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=20).stdout
    sec = commands.split_sections(out)
    assert commands.ABSENT_MARK in sec["inventory"] and "ecc" not in sec
    assert [x.code for x in gpu.parse_xids(sec["xid"])] == [48] and "other line" not in sec["xid"]
    assert host.parse_ofed(sec["ofed"]) is None


def test_ofed_and_ibstat():
    assert host.parse_ofed("MLNX_OFED_LINUX-5.8-1.0.1.1:\n") == "5.8-1.0.1.1"
    assert host.version_key("5.8-1.0.1.1") > host.version_key("5.4-3.1.0.0")
    ports = host.parse_ibstat("CA 'mlx5_0'\n\tCA type: MT4123\n\tPort 1:\n\t\tState: Down\n\t\tPhysical state: Polling\n"
                              "\t\tRate: 10\n\t\tPort GUID: 0x1\n\t\tLink layer: InfiniBand\n"
                              "CA 'mlx5_1'\n\tPort 1:\n\t\tState: Active\n\t\tPhysical state: LinkUp\n\t\tRate: 200\n"
                              "\t\tLink layer: InfiniBand\n")
    assert [(p.ca, p.state, p.rate) for p in ports] == [("mlx5_0", "Down", 10.0), ("mlx5_1", "Active", 200.0)]


def _csv(rows):
    return "\n".join(", ".join(str(x) for x in r) for r in rows) + "\n"


def _loop(n, t0, *, gpu_idx=0, mem=14362, util=97, sm=1410, reasons=lambda i: 0):
    return _csv([(f"2026/11/23 04:00:{i:02d}.000", gpu_idx, mem if i else 300, 40536, util, 300.0, 400.0,
                  sm if not reasons(i) else 700, 1215, 1410, 60, f"0x{reasons(i):016x}") for i in range(n)])


def _snapshot(xids=""):
    return (f"=== dlperf:inventory ===\n0, 00000000:07:00.0, NVIDIA A100-SXM4-40GB, GPU-x, 1410, 1215, 400.00, 450.80.02\n"
            f"=== dlperf:xid ===\n{xids}=== dlperf:ofed ===\nMLNX_OFED_LINUX-5.4-3.1.0.0:\n"
            f"=== dlperf:ibstat ===\nabsent\n=== dlperf:end ===\n")


def test_summary_peak_memory_throttle_xid_policy():
    t0 = 1795406400.0  # 2026-11-23 04:00:00 UTC
    raw = {"node1": NodeRaw(gpu=_loop(20, t0, reasons=lambda i: 0x4 if 5 <= i < 10 else 0),
                            before=_snapshot(), after=_snapshot("NVRM: Xid (PCI:0000:07:00): 79, pid=9, fell off\n"),
                            container_ofed="MLNX_OFED_LINUX-5.8-1.0.1.1:", gpu_indices=[0])}
    out = summarise_trial(raw, window=(t0 + 2, t0 + 17), launched_at=t0 - 10, first_iteration_at=t0 + 1)
    g0 = out["nodes"]["node1"]["gpus"]["0"]
    assert out["peak_memory_mib"] == 14362 and g0["max_sm_clock_mhz"] == 1410
    assert g0["throttled_s"] == 5.0 and g0["throttle_reasons"] == {"sw_power_cap": 5.0}
    assert g0["throttled_share"] == pytest.approx(5 / 16, abs=0.01) and g0["sm_clock_ratio"] < 0.9
    kinds = {f["kind"]: f for f in out["flags"]}
    assert kinds["throttled"]["action"] == "flag" and "sw_power_cap 5 s" in kinds["throttled"]["detail"]
    assert kinds["xid"]["action"] == "invalid" and "XID 79 on GPU 0" in out["invalid_reason"]
    assert kinds["ofed_mismatch"]["detail"] == "container OFED 5.8-1.0.1.1 is newer than the host's 5.4-3.1.0.0"
    assert out["startup_s"] == 11.0 and set(out["labels"]) == {"throttled", "XID", "OFED mismatch"}
    strict = summarise_trial(raw, window=(t0 + 2, t0 + 17), policy=Policy(throttle_action="invalid", xid_action="flag"))
    assert "throttled" in strict["invalid_reason"] and "XID" not in strict["invalid_reason"]


def test_summary_short_throttle_not_marked_and_other_gpu_ignored():
    t0 = 1795406400.0
    raw = {"n": NodeRaw(gpu=_loop(20, t0, reasons=lambda i: 0x4 if i == 10 else 0) + _loop(20, t0, gpu_idx=1, mem=999),
                        gpu_indices=[0])}
    out = summarise_trial(raw, window=None)
    assert out["flags"] == [] and list(out["nodes"]["n"]["gpus"]) == ["0"] and out["peak_memory_mib"] == 14362


def test_cpu_bound_label_and_absent_gpu():
    t0 = 1795406400.0
    busy = "".join(f"@ {t0 + i}\ncpu0 {100 * i} 0 0 {1 * i} 0 0 0 0\ncpu1 {99 * i} 0 0 {2 * i} 0 0 0 0\n"
                   f"MemTotal: 1000 kB\nMemAvailable: 100 kB\nSwapTotal: 0 kB\nSwapFree: 0 kB\ntree {195 * i} 7\n"
                   for i in range(10))
    out = summarise_trial({"n": NodeRaw(gpu=_loop(10, t0, util=3), host=busy)})
    cb = [f for f in out["flags"] if f["kind"] == "cpu_bound"]
    assert out["labels"] == ["CPU-bound"] and "98% busy over 2 cores" in cb[0]["detail"]
    assert "1.9 cores" in cb[0]["detail"] and "GPU utilisation averaged 3%" in cb[0]["detail"]
    none = summarise_trial({"n": NodeRaw(gpu=commands.ABSENT_MARK + "\n", host=busy)})
    assert none["nodes"]["n"]["gpu"] == "absent" and none["flags"] == [] and none["peak_memory_mib"] is None


def test_nccl_socket_fallback_and_ib_link_down():
    snap = _snapshot().replace("=== dlperf:ibstat ===\nabsent", "=== dlperf:ibstat ===\nCA 'mlx5_0'\n\tPort 1:\n"
                                "\t\tState: Down\n\t\tPhysical state: Disabled\n\t\tLink layer: InfiniBand")
    out = summarise_trial({"a": NodeRaw(before=snap, after=snap)}, multi_node=True, nccl_net="Socket")
    assert {f["kind"] for f in out["flags"]} == {"nccl_socket_fallback", "ib_link_down"}
    assert summarise_trial({"a": NodeRaw()}, multi_node=True, nccl_net="IB")["flags"] == []


def test_real_h100_smoke_trial_loop():
    """The sampler's own output during the GPU smoke run (BERT-base, AMP, batch 96, H100)."""
    s = gpu.parse_gpu_loop((DATA / "h100_smoke_amp_bz96_loop.csv").read_text()).gpus[0]
    out = summarise_trial({"h100": NodeRaw(gpu=(DATA / "h100_smoke_amp_bz96_loop.csv").read_text())},
                          window=(s.t[10], s.t[20]))
    g0 = out["nodes"]["h100"]["gpus"]["0"]
    assert g0["peak_memory_mib"] == 14103 and g0["max_sm_clock_mhz"] == 1980 and g0["sm_clock_ratio"] == 1.0
    assert g0["mean_util_pct"] > 90 and 500 < g0["mean_power_w"] < 700 and out["flags"] == []
