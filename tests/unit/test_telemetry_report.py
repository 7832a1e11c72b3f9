"""Telemetry in a run's outputs: raw text saved in the run dir -> summary -> result document ->
Markdown section and plot (real stats/result_json code; GPU text in nvidia-smi's real CSV format)."""

from __future__ import annotations

import pytest

from dlperf_tasks.core.model import Cell, Sample, Trial, TrialMetric, TrialResult, TrialStatus, Window
from dlperf_tasks.report.result_json import build_result
from dlperf_tasks.measure.stats import aggregate
from dlperf_tasks.telemetry import NodeRaw, report
from dlperf_tasks.telemetry.sampler import load_raw, save_raw
from dlperf_tasks.core.topology import Topology

T0 = 1795406400.0  # 2026-11-23 04:00:00 UTC


def _gpu_csv(n, mem, reasons=lambda i: 0):
    return "".join(f"2026/11/23 04:{i // 60:02d}:{i % 60:02d}.000, 0, {mem}, 40536, 95, 300.00, 400.00, "
                   f"{700 if reasons(i) else 1410}, 1215, 1410, 60, 0x{reasons(i):016x}\n" for i in range(n))


def _result(index, speeds, cell):
    samples = [Sample(i + 1, v, "samples/s", rank=0, timestamp=T0 + i + 1) for i, v in enumerate(speeds)]
    return TrialResult(Trial(cell, index), TrialStatus.OK, metric=TrialMetric(round(sum(speeds[20:]) / 100, 2)),
                       samples=samples, nodes=["node1"], started_at=T0 - 5)


def test_attach_and_markdown_section(tmp_path):
    cell = Cell("smoke", "smoke_bert", "bert-base", "amp", 32, Topology.parse("1n1g"), window=Window(20, 100))
    flat = [100.0 + (i % 3) * 0.1 for i in range(120)]
    ramp = [70.0 + 30 * min(1.0, i / 70) + (i % 3) * 0.1 for i in range(120)]
    results = [_result(1, flat, cell), _result(2, ramp, cell), _result(3, flat, cell)]
    mems = {1: 14362, 2: 14100, 3: 14200}
    for r in results:
        thr = (lambda i: 0x40 if 30 <= i < 80 else 0) if r.trial.index == 3 else (lambda i: 0)
        save_raw(tmp_path, r.trial.key, {"node1": NodeRaw(gpu=_gpu_csv(125, mems[r.trial.index], thr), gpu_indices=[0])})
    assert load_raw(tmp_path, results[0].trial.key)["node1"].gpu_indices == [0]
    sums = {r.trial.key: report.summarise_run_trial(tmp_path, r) for r in results}
    assert (tmp_path / "telemetry" / results[0].trial.key / "summary.json").is_file()
    assert sums[results[0].trial.key]["startup_s"] == 6.0
    result = build_result(aggregate(results), {"run_id": "r1", "suite": "smoke"})
    report.attach(result, tmp_path, results, sums)
    c = result["cells"][0]
    assert c["gpu_memory_mib"] == 14362 and c["telemetry_labels"] == ["throttled"]
    st = c["steady_state"]
    assert not st["steady"] and st["unsteady_trials"] == [results[1].trial.id] and st["suggested_warmup"] > 20
    md = report.markdown_section(result)
    assert f"{cell.id} | 14362 | - |" in md
    assert f"* {results[2].trial.id} [throttled] node node1: GPU 0 throttled" in md and "hw_thermal_slowdown" in md
    assert f"warm-up of {st['suggested_warmup']} iterations would have been steady" in md
    png = report.plot_trial(tmp_path, results[2].trial.key, sums[results[2].trial.key], tmp_path / "p.png")
    assert png.stat().st_size > 5000


def test_policy_makes_xid_trial_invalid_and_no_telemetry_means_no_section(tmp_path):
    cell = Cell("smoke", "smoke_bert", "bert-base", "amp", 32, Topology.parse("1n1g"), window=Window(20, 100))
    r = _result(1, [100.0] * 120, cell)
    snap = "=== dlperf:inventory ===\n0, 00000000:07:00.0, A100, GPU-x, 1410, 1215, 400.00, 450.80.02\n=== dlperf:xid ===\n"
    save_raw(tmp_path, r.trial.key, {"node1": NodeRaw(gpu=_gpu_csv(10, 1000), before=snap,
                                                      after=snap + "NVRM: Xid (PCI:0000:07:00): 48, pid=1, DBE\n")})
    s = report.summarise_run_trial(tmp_path, r)
    report.apply_policy(r, s)
    assert r.status == TrialStatus.INVALID_LOG and r.reason.startswith("GPU telemetry: node1: new XID 48 on GPU 0")
    assert report.summarise_run_trial(tmp_path, _result(2, [1.0] * 120, cell)) is None
    assert report.markdown_section(build_result(aggregate([_result(2, [100.0] * 120, cell)]), {"run_id": "x"})) == ""


def test_hooks_local_sampler_absent_gpu_end_to_end(tmp_path, monkeypatch):
    """The engine's hooks around a (2 s) trial on this machine, which has no nvidia-smi: recorded as
    absent, never fatal; the report says so; the stand-in's path makes it present."""
    import time

    from dlperf_tasks.telemetry import hooks

    monkeypatch.setenv("DLPERF_TELEMETRY", '{"interval_s": 0.2, "nvidia_smi": "/nonexistent/nvidia-smi"}')
    cell = Cell("smoke", "smoke_bert", "bert-tiny", "fp32", 8, Topology.parse("1n1g"), window=Window(20, 100))
    r = _result(1, [100.0] * 120, cell)
    with hooks.sampled_local(r.trial, tmp_path) as s:
        assert s is not None
        time.sleep(1.0)
    sums = hooks.before_aggregate(tmp_path, [r])
    assert sums[r.trial.key]["nodes"]["local0"]["gpu"] == "absent" and r.status == TrialStatus.OK
    assert sums[r.trial.key]["nodes"]["local0"]["host"]["samples"] >= 2
    result = build_result(aggregate([r]), {"run_id": "r1"})
    md = tmp_path / "report.md"
    md.write_text("# report\n")
    assert hooks.after_result(result, tmp_path, [r], sums, report_md=md, plots_dir=tmp_path / "plots") == []
    assert f"{cell.id} | no GPU (nvidia-smi absent) |" in md.read_text()
    monkeypatch.setenv("DLPERF_TELEMETRY", '{"enabled": false}')
    with hooks.sampled_local(r.trial, tmp_path / "off") as s:
        assert s is None


def test_fast_but_wrong_from_index_history(tmp_path):
    from dlperf_tasks.store.index import run_summary

    cell = Cell("smoke", "smoke_bert", "bert-base", "amp", 32, Topology.parse("1n1g"), window=Window(20, 100))

    def run(losses):
        rs = []
        for i, loss in enumerate(losses, 1):
            r = _result(i, [100.0] * 120, cell)
            r.metric.details = {"final_loss": loss}
            rs.append(r)
        res = build_result(aggregate(rs), {"run_id": f"r{losses[0]}", "suite": "smoke"})
        report.attach(res, tmp_path, rs, {})
        return res, rs

    index = {"runs": [run_summary(run([7.0 + d, 7.01 + d, 6.99 + d])[0], "p", "2026-11-22") for d in (0, 0.02, -0.02)]}
    hist = report.loss_history_from_index(index)
    assert sorted(hist[cell.id]) == pytest.approx([6.98, 7.0, 7.02])  # one figure per run: its trials' median
    res, rs = run([9.9, 9.8, 9.95])  # fast, but the loss went somewhere else
    report.attach(res, tmp_path, rs, {}, loss_history=hist)
    c = res["cells"][0]
    assert c["loss_check"]["label"] == "fast but wrong?" and c["final_losses"] == [9.9, 9.8, 9.95]
    assert c["loss_check"]["final_loss"] == 9.9 and c["loss_check"]["history_runs"] == 3
    ok, rs2 = run([7.0, 7.02, 6.98])
    report.attach(ok, tmp_path, rs2, {}, loss_history=hist)
    assert ok["cells"][0]["loss_check"]["status"] == "ok" and ok["cells"][0]["loss_check"]["label"] is None
    assert "[fast but wrong?]" in report.markdown_section(res) and "[fast but wrong?]" not in report.markdown_section(ok)
    new, rs3 = run([7.0, 7.02, 6.98])
    report.attach(new, tmp_path, rs3, {}, loss_history={})  # a cell without history: no flag, and it says so
    assert new["cells"][0]["loss_check"]["status"] == "no_history"
    assert "no loss history yet" in report.markdown_section(new) and cell.id in report.markdown_section(new)
    assert res["cells"][0]["loss_check"]["status"] == "fast but wrong?"
    report.attach(new, tmp_path, rs3, {})  # no history read in this step: said so, never flagged
    assert new["cells"][0]["loss_check"]["status"] == "not_checked"
