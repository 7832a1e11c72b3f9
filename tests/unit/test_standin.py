"""The stand-in trainer (docker/standin) driven by the REAL launch commands.

For every framework, ``Framework.launch()``'s command is run here with ``bash -c``
exactly as a node would run it, with the image overlay (docker/standin/rootfs) put
in place by PYTHONPATH and the workdir prefix: real ``mpirun`` (OpenMPI) for MXNet,
the stand-in ``torch.distributed.launch`` for PyTorch/Megatron, the stand-in training
scripts for all. The log each node writes is parsed back with the framework's
parser and DLPerf rule and must give the configured speed exactly (2 decimals).
GPUs are the only thing mocked: the stand-in prints the log a GPU run would print.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from dlperf_tasks.frameworks import get
from dlperf_tasks.frameworks._lines import read_log
from dlperf_tasks.frameworks.base import LaunchSpec, NodeSpec
from dlperf_tasks.core.model import Cell, MetricKind, ParallelLayout, Trial, Window
from dlperf_tasks.core.topology import Topology

ROOT = Path(__file__).resolve().parents[2]
ROOTFS = ROOT / "docker" / "standin" / "rootfs"
DIST = ROOTFS / "usr" / "lib" / "python3" / "dist-packages"
STANDIN = ROOT / "docker" / "standin" / "standin.py"
TIME_SCALE = "0.002"
#: the catalog's BERT-base config (what prepare puts on the nodes); the stand-in reads it like the real scripts
BASE_CONFIG = ROOT / "dlperf_tasks" / "catalog" / "data" / "bert_config_base.json"


def standin_data_dir() -> Path:
    """A data directory as the nodes have it: 64 .npy shards (gluon-nlp asserts files >= workers)."""
    d = Path(tempfile.gettempdir()) / f"dlperf-standin-data-{os.getuid()}"
    if not (d / "part-063.npy").exists():
        d.mkdir(parents=True, exist_ok=True)
        for i in range(64):
            (d / f"part-{i:03d}.npy").touch()
    return d


#: what dlperf's patch applier exports after patching (catalog/patches.py): these tests start the
#: commands directly, on the overlay's scripts that carry the patches' marks
PATCHED = {"DLPERF_PATCHES_APPLIED": "gluon-cv-f9a8a28-dlperf-rn50.diff,gluon-nlp-7b7bf60-dlperf-bert.diff"}


def _settings(env: dict) -> dict:
    """Launcher settings as a suite gives them: env, the BERT-base config file, the data shards."""
    return {"env": {**PATCHED, **env}, "config_file": str(BASE_CONFIG), "bert_config_file": str(BASE_CONFIG),
            "data_dir": str(standin_data_dir())}


def _cell(fw, bsz, topo, precision="fp32", layout=None, window=Window(20, 100)):
    return Cell(suite="s", framework=fw, model="m", precision=precision, batch_size_per_device=bsz,
                topology=Topology.parse(topo), layout=layout, window=window)


def _nodes(n, gpus):
    return [NodeSpec(f"node{i + 1}", "127.0.0.1", gpus) for i in range(n)]


def _local(spec: LaunchSpec) -> LaunchSpec:
    """Point the container paths of a spec at the overlay in this checkout."""
    assert spec.workdir and spec.workdir.startswith("/workspace/"), spec.workdir
    local = ROOTFS / spec.workdir.lstrip("/")
    assert local.is_dir(), f"the overlay has no default workdir {spec.workdir}"
    return LaunchSpec(argv=spec.argv, env=spec.env, workdir=str(local))


def _start(spec: LaunchSpec, log: Path) -> subprocess.Popen:
    fh = open(log, "wb")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DLPERF_STANDIN_", "OMPI_"))}
    return subprocess.Popen(["bash", "-c", _local(spec).shell()], stdout=fh, stderr=subprocess.STDOUT,
                            env=env, start_new_session=True)


def _run_trial(fw, cell, settings_env, tmp_path, timeout=120):
    f = get(fw)
    trial = Trial(cell, 1)
    record = tmp_path / "record.jsonl"
    env = {"PYTHONPATH": str(DIST), "DLPERF_STANDIN_TIME_SCALE": TIME_SCALE,
           "DLPERF_STANDIN_RECORD": str(record), **settings_env}
    settings = _settings(env)
    nodes = _nodes(cell.topology.nodes, cell.topology.gpus_per_node)
    ranks = [0] if f.launch_mode == "mpi" else list(range(cell.topology.nodes))
    procs = []
    for r in ranks:
        log = tmp_path / f"node{r}.log"
        procs.append((r, log, _start(f.launch(trial, r, nodes, settings), log)))
    codes = {}
    for r, log, p in procs:
        codes[r] = p.wait(timeout=timeout)
    records = [json.loads(l) for l in record.read_text().splitlines()] if record.exists() else []
    return f, {r: log for r, log, _ in procs}, codes, records


CASES = [
    # framework, bsz, topology, precision, env, expected global speed
    ("mxnet_bert", 32, "1n2g", "fp32",
     {"DLPERF_STANDIN_SPEED_PER_GPU": "77.77", "DLPERF_STANDIN_SCALING": "0.9"}, round(77.77 * 2 * 0.9, 2)),
    ("mxnet_bert", 24, "1n1g", "fp32", {"DLPERF_STANDIN_SPEED_PER_GPU": "126.29"}, 126.29),
    ("mxnet_resnet50", 128, "1n2g", "amp", {"DLPERF_STANDIN_SPEED_1N2G": "771.05"}, 771.05),
    ("pytorch_bert", 96, "1n2g", "amp", {"DLPERF_STANDIN_SPEED": "1005.37"}, 1005.37),
    ("pytorch_bert", 96, "2n1g", "fp32", {"DLPERF_STANDIN_SPEED_PER_GPU": "463.11"}, 926.22),
    ("tensorflow_bert", 32, "1n2g", "fp32", {"DLPERF_STANDIN_SPEED_PER_GPU": "103.6"}, 207.2),
    ("tensorflow_bert", 64, "2n1g", "amp", {"DLPERF_STANDIN_SPEED_2N1G": "221.13"}, 221.13),
]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("fw,bsz,topo,prec,env,expected", CASES, ids=[f"{c[0]}-{c[2]}" for c in CASES])
def test_launch_through_standin_parses_back_to_configured_speed(fw, bsz, topo, prec, env, expected, tmp_path):
    cell = _cell(fw, bsz, topo, prec)
    f, logs, codes, records = _run_trial(fw, cell, env, tmp_path)
    assert set(codes.values()) == {0}, {r: logs[r].read_text()[-2000:] for r in logs}
    node = f.metrics_nodes(cell)[0]
    parsed = f.parse(read_log(str(logs[node])))
    assert f.check(parsed, cell, cell.window) == []
    assert parsed.facts.crash_markers == [] and parsed.facts.errors == []
    assert f.trial_metric(parsed, cell, cell.window).value == expected
    # every rank started once, with the launcher's rank/world and the real flags
    world = cell.topology.world_size
    procs_expected = cell.topology.nodes if fw == "tensorflow_bert" else world
    assert sorted(r["rank"] for r in records) == list(range(procs_expected))
    assert {r["world"] for r in records} == {world}
    assert {r["batch_size_per_device"] for r in records} == {bsz}
    assert {r["precision"] for r in records} == {prec}
    assert {r["speed"] for r in records} == {expected}


def test_mxnet_bert_every_rank_prints_and_mpirun_exports_env(tmp_path):
    cell = _cell("mxnet_bert", 32, "1n2g")
    f, logs, codes, records = _run_trial("mxnet_bert", cell, {"DLPERF_STANDIN_SPEED": "300"}, tmp_path)
    assert codes == {0: 0}
    parsed = f.parse(read_log(str(logs[0])))
    assert parsed.extra["lines_per_step"][120] == 2  # no rank prefix: counted per step
    for r in records:  # -x exported the suite env to the ranks started by mpirun
        assert r["env"]["NCCL_DEBUG"] == "INFO"
        assert r["env"]["DLPERF_STANDIN_SPEED"] == "300"
        assert r["env"]["OMPI_COMM_WORLD_SIZE"] == "2"
        assert "--total_batch_size" in r["argv"] and r["argv"][r["argv"].index("--total_batch_size") + 1] == "64"
        assert r["argv"][r["argv"].index("--num_steps") + 1] == "120"


@pytest.mark.timeout(300)
@pytest.mark.parametrize("latency,window", [(464.12, Window(20, 100)), (664.2, Window(10, 120)),
                                            (13037.85, Window(20, 100))])
def test_megatron_two_nodes_latency_from_last_node(latency, window, tmp_path):
    layout = ParallelLayout("DP", "DP_4x1x1_8_1536x16", 4, 1, 1, 2, 8, 1536, 16, 16)
    cell = _cell("megatron_gpt", 2, "2n2g", "amp", layout, window)
    env = {"DLPERF_STANDIN_LATENCY_MS": str(latency), "DLPERF_STANDIN_MEMORY_MB": "14508.0",
           "DLPERF_STANDIN_TIME_SCALE": "0.0001"}
    f, logs, codes, records = _run_trial("megatron_gpt", cell, env, tmp_path)
    assert codes == {0: 0, 1: 0}
    last = f.parse(read_log(str(logs[1])))
    node0 = f.parse(read_log(str(logs[0])))
    assert node0.samples == [] and last.extra.get("memory_mib") is None
    assert f.check(last, cell, window) == []
    both = f.parse(list(read_log(str(logs[0]))) + list(read_log(str(logs[1]))))
    m = f.trial_metric(both, cell, window)
    assert (m.kind, m.value, m.memory_mib) == (MetricKind.LATENCY, latency, 14508.0)
    assert m.throughput == round(8 * 1000 / latency, 2)
    assert sorted(r["rank"] for r in records) == [0, 1, 2, 3]
    by_rank = {r["rank"]: r for r in records}
    assert by_rank[3]["env"]["NODE_RANK"] == "1" and by_rank[3]["env"]["MASTER_ADDR"] == "127.0.0.1"
    assert by_rank[2]["local_rank"] == 0 and by_rank[3]["local_rank"] == 1


def test_crash_injection_fails_the_launcher_and_the_log(tmp_path):
    cell = _cell("pytorch_bert", 32, "1n2g")
    env = {"DLPERF_STANDIN_CRASH_AFTER": "30", "DLPERF_STANDIN_CRASH_RANK": "1", "DLPERF_STANDIN_EXIT_CODE": "3"}
    f, logs, codes, _ = _run_trial("pytorch_bert", cell, env, tmp_path)
    assert codes[0] != 0
    parsed = f.parse(read_log(str(logs[0])))
    assert any(m.startswith("Traceback") for m in parsed.facts.crash_markers)
    assert any(m.startswith("NCCL error") for m in parsed.facts.crash_markers)
    assert "returned non-zero exit status 3" in logs[0].read_text()
    # how far rank 0 got before the launcher stopped it depends on the machine's load (none of
    # its steps, or all of them: then the speed rule still yields the raw value, which the gate
    # keeps beside the non-OK status by design); the gate refuses the trial either way, naming the crash
    from dlperf_tasks.core.model import TrialStatus
    from dlperf_tasks.measure.validity import gate

    res = gate(f, Trial(cell, 1), parsed, exit_codes={"node1": codes[0]})
    assert res.status is TrialStatus.NONZERO_EXIT and not res.valid, res
    assert "crash marker in log" in res.reason and "NCCL error" in res.reason, res.reason


def test_mpirun_crash_kills_job_with_nonzero_exit(tmp_path):
    cell = _cell("mxnet_resnet50", 32, "1n2g")
    env = {"DLPERF_STANDIN_CRASH_AFTER": "10", "DLPERF_STANDIN_CRASH_RANK": "0"}
    f, logs, codes, _ = _run_trial("mxnet_resnet50", cell, env, tmp_path)
    assert codes[0] != 0
    parsed = f.parse(read_log(str(logs[0])))
    assert parsed.facts.iterations_seen == list(range(1, 11))
    assert "Traceback" in parsed.facts.crash_markers[0]


def test_hang_injection_stops_progress_until_killed(tmp_path):
    f = get("tensorflow_bert")
    cell = _cell("tensorflow_bert", 32, "1n1g")
    env = {"PYTHONPATH": str(DIST), "DLPERF_STANDIN_TIME_SCALE": TIME_SCALE, "DLPERF_STANDIN_HANG_AFTER": "7"}
    log = tmp_path / "node0.log"
    p = _start(f.launch(Trial(cell, 1), 0, _nodes(1, 1), _settings(env)), log)
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            p.wait(timeout=3)
        parsed = f.parse(read_log(str(log)))
        assert parsed.facts.iterations_seen == list(range(1, 8))
    finally:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()


def test_cli_runs_in_real_time_scaled(tmp_path):
    """The CLI sleeps step_time x time_scale per step (2 s of synthetic time at scale 0.5 ~ 1 s)."""
    t0 = time.monotonic()
    res = subprocess.run([sys.executable, str(STANDIN), "--format", "mxnet_resnet50", "--speed", "640",
                          "--batch-size", "32", "--iters", "40", "--time-scale", "0.5"],
                         capture_output=True, text=True, timeout=60)
    took = time.monotonic() - t0
    assert res.returncode == 0, res.stderr
    assert 0.9 < took < 10, took  # 40 steps x 0.05 s x 0.5 = 1 s
    parsed = get("mxnet_resnet50").parse(res.stderr.splitlines())
    assert get("mxnet_resnet50").trial_metric(parsed, _cell("mxnet_resnet50", 32, "1n1g", window=Window(10, 30)),
                                              Window(10, 30)).value == 640.0


def test_cli_help_and_bad_input():
    res = subprocess.run([sys.executable, str(STANDIN), "--help"], capture_output=True, text=True, timeout=30)
    assert res.returncode == 0 and "--format" in res.stdout and "--time-scale" in res.stdout
    res = subprocess.run([sys.executable, str(STANDIN), "--format", "nope"], capture_output=True, text=True, timeout=30)
    assert res.returncode == 2 and "invalid choice" in res.stderr
    res = subprocess.run([sys.executable, str(STANDIN), "--format", "tensorflow_bert", "--speed", "-3"],
                         capture_output=True, text=True, timeout=30)
    assert res.returncode == 2 and "invalid configuration" in res.stderr


def _pipe_unread(pid: int) -> int:
    """Bytes waiting in process ``pid``'s stderr pipe (0 once it is gone)."""
    import fcntl
    import termios
    try:
        fd = os.open(f"/proc/{pid}/fd/2", os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return 0
    try:
        return int.from_bytes(fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"), sys.byteorder)
    finally:
        os.close(fd)


def _exited(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1][:1] in "ZX"
    except OSError:
        return True


@pytest.mark.timeout(120)
def test_mxnet_lines_stay_whole_through_mpirun_forwarding_that_falls_behind(tmp_path):
    """OpenMPI forwards a rank's output in chunks of at most 4 KiB as it reads them; a stand-in running
    far faster than a real trainer must not get more than that ahead of mpirun, or a chunk ends
    mid-line and another rank's line lands inside it (a log the parser then rightly refuses). Here
    mpirun is stopped until every rank has filled its pipe up to that point, then let go."""
    ranks = 4
    code = ("import os, sys; from dlperf_standin import main; "
            "sys.exit(main(['--format', 'mxnet_bert', '--rank', os.environ['OMPI_COMM_WORLD_RANK'], "
            f"'--world', '{ranks}', '--iters', '120', '--time-scale', '0', '--speed', '300']))")
    env = {**os.environ, "PYTHONPATH": str(DIST)}
    log = tmp_path / "rank0.log"
    with log.open("wb") as out:
        mpirun = subprocess.Popen(["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(ranks),
                                   sys.executable, "-c", code], stdout=out, stderr=subprocess.STDOUT, env=env)
        try:
            deadline = time.monotonic() + 60
            while "[step" not in log.read_text() and time.monotonic() < deadline:
                time.sleep(0.01)
            os.kill(mpirun.pid, signal.SIGSTOP)
            kids = [int(c) for c in Path(f"/proc/{mpirun.pid}/task/{mpirun.pid}/children").read_text().split()]
            assert len(kids) == ranks
            # each rank either waits with its pipe nearly full, or (were it not to wait) wrote it all and exited
            while time.monotonic() < deadline and not all(_exited(k) or _pipe_unread(k) >= 4096 - 300 for k in kids):
                time.sleep(0.01)
        finally:
            os.kill(mpirun.pid, signal.SIGCONT)
            rc = mpirun.wait(timeout=60)
    assert rc == 0
    text = log.read_text()
    steps = [line for line in text.splitlines() if "[step" in line and "Saving" not in line]
    assert len(steps) == 120 * ranks
    cut = [line for line in steps if line.count("[step") != 1 or not line.endswith("ms/batch")]
    assert cut == []
