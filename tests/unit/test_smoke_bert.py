"""The smoke suite: SmokeBert (launch command, log parser, speed rule) and the real trainer.

The trainer tests run real PyTorch (CPU, gloo) through torchrun; no GPU is needed."""

import shlex
import sys

import pytest

from dlperf_tasks.frameworks import get
from dlperf_tasks.frameworks.base import NodeSpec
from dlperf_tasks.core.model import Cell, Trial, TrialStatus, Window
from dlperf_tasks.core.topology import Topology

FW = get("smoke_bert")


def _trial(topo="1n2g", warmup=2, measure=4, index=1):
    return Trial(Cell("smoke", "smoke_bert", "bert-tiny", "fp32", 4, Topology.parse(topo),
                      window=Window(warmup, measure)), index)


def _log(iters=6, world=2, loss="9.7"):
    lines = ["[smoke-bert] config model=tiny hidden=128 layers=2 heads=2 seq=64 world_size=%d" % world]
    lines += [f"[smoke-bert] iteration={i} samples_per_sec={100 + i}.5 loss={loss} time=1700000000.{i}"
              for i in range(1, iters + 1)]
    lines += [f"[smoke-bert] final rank={r} world_size={world} iterations={iters} elapsed_s=1.0" for r in range(world)]
    return lines


def test_launch_is_an_argv_list_with_torchrun_and_the_cell():
    nodes = [NodeSpec("n1", "10.0.0.1", 8), NodeSpec("n2", "10.0.0.2", 8, interface="ib0")]
    spec = FW.launch(_trial("2n8g", 20, 100), 1, nodes, {"python": "/opt/py/bin/python3", "master_port": 29511})
    argv = spec.argv
    assert argv[:3] == ["/opt/py/bin/python3", "-m", "torch.distributed.run"]
    assert "--nnodes=2" in argv and "--nproc_per_node=8" in argv and "--node_rank=1" in argv
    assert "--master_addr=10.0.0.1" in argv and "--master_port=29511" in argv
    assert argv[argv.index("--iterations") + 1] == "120"
    assert argv[argv.index("--batch-size") + 1] == "4"
    assert spec.env["NCCL_SOCKET_IFNAME"] == "ib0"
    # the shell form is safely quoted: a hostile setting stays one literal argument
    spec = FW.launch(_trial(), 0, nodes, {"extra_args": ["--x; rm -rf /"]})
    assert shlex.split(spec.shell())[-1] == "--x; rm -rf /"


def test_launch_rejects_a_node_rank_outside_the_topology():
    with pytest.raises(ValueError, match="node_rank 2"):
        FW.launch(_trial("2n8g"), 2, [NodeSpec("a", "a"), NodeSpec("b", "b")], {})


def test_parse_and_speed_rule_drop_warmup_then_average():
    parsed = FW.parse(_log())
    assert parsed.facts.iterations_seen == [1, 2, 3, 4, 5, 6]
    assert parsed.extra["ranks_finished"] == [0, 1]
    assert parsed.extra["config"]["hidden"] == "128"
    cell = _trial().cell
    assert FW.check(parsed, cell, cell.window) == []
    # iterations 3..6 -> 103.5, 104.5, 105.5, 106.5
    assert FW.trial_metric(parsed, cell, cell.window).value == pytest.approx(105.0)


def test_parse_survives_carriage_returns_and_garbage():
    parsed = FW.parse(["[smoke-bert] iteration=1 samples_per_sec=nan? loss=1 time=1\r[smoke-bert] iteration=2 "
                       "samples_per_sec=5.0 loss=1 time=2", "\x00\xff garbage", "Traceback (most recent call last):"])
    assert [s.iteration for s in parsed.samples] == [2]
    assert parsed.facts.errors and "non-numeric" in parsed.facts.errors[0]
    assert "Traceback (most recent call last)" in parsed.facts.crash_markers


def test_check_names_missing_ranks_and_iterations():
    cell = _trial().cell
    parsed = FW.parse(_log(iters=4, world=1))
    reasons = FW.check(parsed, cell, cell.window)
    assert any("ranks without a final line: [1]" in r for r in reasons)
    assert any("of iterations 3..6 missing" in r for r in reasons)


@pytest.mark.slow
def test_real_trainer_1n2g_through_the_local_runner(tmp_path):
    """Real torchrun, 2 CPU processes with gloo, tiny BERT; the validity gate passes."""
    from dlperf_tasks.remote import local as local_runner

    res = local_runner.run_trial(_trial("1n2g", 2, 4), FW, {"python": "ignored"}, tmp_path, timeout_s=240)
    log = (tmp_path / res.log_paths[0]).read_text()
    assert res.status == TrialStatus.OK, f"{res.reason}\n{log[-2000:]}"
    assert res.exit_codes == {"local0": 0}
    assert res.metric.value > 0 and len(res.samples) == 6
    assert "world_size=2" in log and "backend=gloo" in log
    assert "threads_per_process=1" in log  # as in the 1-process baseline (below)
    assert res.log_paths == ["logs/smoke/bert/bz4/1n2g/bert_b4_fp32_1.log"]


def test_one_process_runs_one_thread_as_each_of_two_processes_does(tmp_path):
    """Like with like: the 1n1g baseline's process runs as many CPU threads as each process of
    1n2g (it used to take every core, and on a busy machine ran 5-10x slower per process)."""
    import subprocess

    from dlperf_tasks.smoke import train_bert

    env = {"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "4"}  # an inherited setting does not change it
    out = subprocess.run([sys.executable, train_bert.__file__, "--iterations", "1", "--device", "cpu"],
                         capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    assert "world_size=1" in out.stdout and "threads_per_process=1" in out.stdout, out.stdout


@pytest.mark.slow
def test_failing_trainer_is_nonzero_exit_and_stop_kills_the_group(tmp_path):
    from dlperf_tasks.remote import local as local_runner

    res = local_runner.run_trial(_trial("1n1g"), FW, {"extra_args": ["--device", "cuda"]}, tmp_path, timeout_s=120)
    assert res.status == TrialStatus.NONZERO_EXIT, res.reason
    assert res.exit_codes["local0"] != 0
    # stop() (what on_kill calls) ends a running trial's whole process group
    import os
    import subprocess
    import time

    trial = _trial("1n1g")
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    local_runner._RUNNING[trial.key] = [p]
    t0 = time.monotonic()
    assert local_runner.stop(trial.key) == 1
    assert p.wait(timeout=10) is not None and time.monotonic() - t0 < 10
    with pytest.raises(ProcessLookupError):
        os.killpg(p.pid, 0)


def test_parse_splits_final_lines_glued_by_concurrent_ranks():
    """Seen in a real 1n2g run: rank 1's final line lost its newline to rank 0's write."""
    from dlperf_tasks.frameworks import get

    glued = ("[smoke-bert] final rank=1 world_size=2 iterations=25 elapsed_s=3.660"
             "[smoke-bert] final rank=0 world_size=2 iterations=25 elapsed_s=3.650\n")
    parsed = get("smoke_bert").parse([glued])
    assert parsed.extra["ranks_finished"] == [0, 1]
