"""Straggler detection (dlperf_tasks/measure/stragglers.py): unit checks on synthetic step times, and a
real 2-node TensorFlow-format sweep on the private simulated cluster where the stand-in trainer
on ONE node is configured 2x slower (its python3 is a per-node wrapper mounted from that node's
workdir, which lowers that node's speed). GPUs are simulated; everything else is real (sshd
nodes, dockerd, registry, the sweep). The comparison must name the slow node in
stragglers.json and in report.md."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from dlperf_tasks.measure import stragglers
from dlperf_tasks.core.model import Sample, TrialStatus, Window
from dlperf_tasks.catalog.plan import plan
from dlperf_tasks.remote.inventory import Cluster
from dlperf_tasks.engine.sweep import SweepOptions, run_sweep
from tests.faults._fault_helpers import fault_sim, run_leftovers, sim_suite  # noqa: F401 (fixture)


# ---- pure logic ---------------------------------------------------------------------------
def _ts(rank, steps, dt, t0=100.0):
    return [Sample(iteration=i, value=t0 + i * dt, unit="s", rank=rank, timestamp=t0 + i * dt) for i in range(1, steps + 1)]


def test_compare_names_the_slow_node_only():
    rep = stragglers.compare({"node1": [0.32] * 10, "node2": [0.64] * 10, "node3": [0.33] * 10}, trial_id="t")
    assert rep.slow == ["node2"]
    assert rep.slowdown["node2"] == pytest.approx(0.64 / 0.325 - 1, rel=1e-4)
    assert "node node2 is a straggler" in rep.text() and "node1" not in rep.slow
    even = stragglers.compare({"node1": [0.32] * 10, "node2": [0.33] * 10})
    assert even.slow == [] and "no straggler among 2 node(s)" in even.text()


def test_compare_threshold_and_too_few_steps():
    per = {"node1": [1.0] * 10, "node2": [1.08] * 10}
    assert stragglers.compare(per).slow == []  # 8 % < default 10 %
    assert stragglers.compare(per, threshold=0.05).slow == ["node2"]
    few = stragglers.compare({"node1": [1.0] * 10, "node2": [9.0]})
    assert few.slow == [] and "node node2: only 1 measured step(s), not judged" in few.notes
    with pytest.raises(ValueError, match="threshold must be > 0"):
        stragglers.compare(per, threshold=0)


def test_step_times_per_unit_and_window():
    w = Window(warmup=2, measure=5)
    st = stragglers.step_times(_ts(None, 10, 0.5), w)
    assert st[None] == pytest.approx([0.5] * 5)  # steps 3..7 only
    lat = [Sample(iteration=i, value=250.0, unit="ms/iter", rank=i % 2) for i in range(1, 9)]
    assert stragglers.step_times(lat)[0] == pytest.approx([0.25] * 4)
    thr = [Sample(iteration=i, value=200.0, unit="samples/s", rank=0) for i in range(1, 4)]
    assert stragglers.step_times(thr)[0] == pytest.approx([0.005] * 3)


def test_one_log_with_every_rank_is_split_by_node():
    """mpirun writes every rank into node 0's log: global rank r belongs to node r // gpus_per_node."""
    samples = []
    for rank in range(16):
        lat = 400.0 if rank >= 8 else 200.0  # ranks 8..15 = node2 are slow
        samples += [Sample(iteration=i, value=lat, unit="ms/iter", rank=rank) for i in range(1, 11)]
    per, ranks = stragglers.per_node_step_times({0: samples}, ["node1", "node2"], 8)
    assert ranks == {"node1": list(range(8)), "node2": list(range(8, 16))}
    rep = stragglers.compare(per, ranks=ranks)
    assert rep.slow == ["node2"] and rep.nodes[1].ranks == list(range(8, 16))


def test_write_adds_json_and_report_section(tmp_path):
    (tmp_path / "report.md").write_text("# dlperf result\n\n## Cells\nx\n")
    rep = stragglers.compare({"node1": [1.0] * 5, "node2": [2.0] * 5}, trial_id="s/t1")
    stragglers.write(tmp_path, [rep])
    stragglers.write(tmp_path, [rep])  # idempotent: the section is replaced, not repeated
    md = (tmp_path / "report.md").read_text()
    assert md.count("## Stragglers") == 1 and "**Slow node(s): node2 (1 trial(s))**" in md and "## Cells" in md
    doc = json.loads((tmp_path / "stragglers.json").read_text())
    assert doc["slow_nodes"] == ["node2"] and doc["trials"][0]["slow"] == ["node2"]


# ---- on the simulated cluster ----------------------------------------------------------------
SLOW_WRAPPER = "#!/bin/sh\nexport DLPERF_STANDIN_SPEED_2N8G={speed}\nexec python3 \"$@\"\n"
FAST_WRAPPER = "#!/bin/sh\nexec python3 \"$@\"\n"


@pytest.mark.cluster
def test_slow_node_named_after_a_real_sweep(fault_sim, tmp_path):
    sim = fault_sim
    tag = f"strag{int(time.time())}"
    for n in sim.nodes[:2]:  # the per-node wrapper lives in each node's own workdir
        d = Path(n.workdir) / tag
        d.mkdir(parents=True, exist_ok=True)
        (d / "python3").write_text(SLOW_WRAPPER.format(speed=400.0) if n.name == "node2" else FAST_WRAPPER)
        (d / "python3").chmod(0o755)
    suite = sim_suite(tmp_path, "tensorflow-bert", tag, {"2n8g": 800.0}, mounts=[f"${{workdir}}/{tag}:/straggle:ro"],
                      launcher={"python": "/straggle/python3"}, env={"DLPERF_STANDIN_TIME_SCALE": "0.01"})
    p = plan(suite, {"precisions": "fp32", "batch_sizes": "32", "xla": "off", "trials": 1})
    out = tmp_path / "out"
    res = run_sweep(suite, p, Cluster.from_yaml(sim.yaml_path), out,
                    SweepOptions(progress=None, nodes=["node1", "node2"], capture_env=False, retries=0,
                                 image=sim.image("tensorflow:20.12-tf2-py3")))
    (r,) = res.ran
    assert r.status == TrialStatus.OK, r.reason  # node 0's log (the metrics log) is fine
    # the sweep itself wrote the comparison (stragglers.json + the report.md section)
    assert json.loads((out / "stragglers.json").read_text())["slow_nodes"] == ["node2"]
    assert "node2 (1 trial(s))" in (out / "report.md").read_text()
    (rep,) = stragglers.scan(res.all, out)
    assert rep.slow == ["node2"], rep.to_dict()
    assert rep.slowdown["node2"] == pytest.approx(1.0, abs=0.02)  # half the speed = twice the step time
    assert "node node2 is a straggler" in rep.text()
    # the slow node's log is kept next to node 0's
    assert len(r.log_paths) == 2 and all((out / lp).is_file() for lp in r.log_paths)
    assert run_leftovers(sim, res) == []
