"""A trial as a Slurm batch script (remote/slurm_script.py, remote/slurm_trial.build_job): the sbatch line,
each framework's launch as srun steps, each container mode, and quoting. Rendered commands are run
through the real bash to check that catalog values stay literal and node placeholders expand."""

from __future__ import annotations

import json
import re
import shlex
import subprocess

from pathlib import Path

import pytest

from dlperf_tasks.catalog import load_suite
from dlperf_tasks.catalog.overrides import Overrides
from dlperf_tasks.catalog.plan import plan
from dlperf_tasks.core.errors import PlanError
from dlperf_tasks.frameworks.launchspec import LaunchSpec
from dlperf_tasks.remote.slurm_inventory import enroot_uri
from dlperf_tasks.remote.slurm_script import SlurmOptions, command_line, job_name, mpi_script_argv, render_job
from dlperf_tasks.remote.slurm_trial import build_job

ROOT = Path(__file__).resolve().parents[2]
#: the srun options pyxis defines (its args.c and README "Usage", recorded as data with the source named)
PYXIS = {o["name"]: o["arg"] for o in json.loads((ROOT / "dlperf_tasks/remote/pyxis_options.json").read_text())["options"]}
IMAGE = "nvcr.io/nvidia/pytorch@sha256:" + "ab" * 32


def _opts(**kw):
    base = dict(shared_dir="/shared/dlperf", partition="gpu", account="bench", qos="normal", reservation="bench-res",
                time_limit="00:30:00", exclude=("gpu07", "gpu03"))
    base.update(kw)
    return SlurmOptions(**base)


def _job(suite_id: str, topology: str, mode: str = "pyxis", **kw):
    suite = load_suite(suite_id)
    trial = plan(suite, Overrides(topologies=(topology,), trials=1)).trials[0].trial
    return trial, build_job(trial, suite, "nightly-20261128", _opts(container=mode, **kw), image=IMAGE,
                            gpus_per_node=8, telemetry=["nvidia-smi -l 1"])


def _bash(line: str, **env) -> str:
    return subprocess.run(["bash", "-c", line], capture_output=True, text=True, check=True, timeout=30,
                          env={"PATH": "/usr/bin:/bin", **env}).stdout


def test_sbatch_line_carries_the_cell_and_the_inventory():
    trial, job = _job("pytorch-bert", "2n8g")
    argv = job.sbatch_argv
    assert argv[:2] == ["sbatch", "--parsable"]
    assert "--nodes=2" in argv and "--gpus-per-node=8" in argv and "--exclusive" in argv
    for flag in ("--partition=gpu", "--account=bench", "--qos=normal", "--reservation=bench-res",
                 "--time=00:30:00", "--exclude=gpu03,gpu07"):
        assert flag in argv
    assert f"--job-name=dlperf.nightly-20261128.{trial.key}.a1" in argv
    subprocess.run(["bash", "-n"], input=job.script, text=True, check=True)


def test_per_node_framework_is_one_task_per_node_with_the_rendezvous_from_slurm():
    _, job = _job("pytorch-bert", "2n8g", mode="none")
    train = job.srun_lines[-1]
    assert "--ntasks-per-node=1" in train and "--mpi" not in train and "--container" not in train
    assert 'scontrol show hostnames "$SLURM_JOB_NODELIST"' in job.script
    assert re.search(r'^  0\) .*--node_rank=0 --master_addr="\$\{DLPERF_HOST_0\}"', job.script, re.M)
    assert re.search(r'^  1\) .*--node_rank=1 --master_addr="\$\{DLPERF_HOST_0\}"', job.script, re.M)
    assert f"DLPERF_OUT={job.log_dir}" in job.script


def test_mpi_framework_becomes_srun_pmix_one_task_per_gpu():
    _, job = _job("mxnet-bert", "2n8g", mode="none")
    train = job.srun_lines[-1]
    assert "--mpi=pmix" in train and "--ntasks-per-node=8" in train and "--nodes=2" in train
    assert "mpirun" not in job.script and "-np" not in job.script.split()
    assert "run_pretraining.py" in job.script


def test_mpirun_options_without_a_slurm_meaning_are_refused_by_name():
    prefix, script = mpi_script_argv(["py", "apply", "--", "mpirun", "-np", "16", "-x", "A", "-mca", "pml", "ob1",
                                      "python3", "train.py", "--lr", "1"])
    assert prefix == ["py", "apply", "--"] and script == ["python3", "train.py", "--lr", "1"]
    with pytest.raises(PlanError, match="'--report-bindings'"):
        mpi_script_argv(["mpirun", "--report-bindings", "python3", "t.py"])


def test_pyxis_flags_are_documented_pyxis_options_and_use_the_digest():
    _, job = _job("pytorch-bert", "1n8g", mode="pyxis", mounts=("/data:/datasets:ro",))
    train = shlex.split(job.srun_lines[-1])
    flags = [w for w in train if w.startswith("--container") or w.startswith("--no-container")]
    assert len(flags) == 3
    for flag in flags:  # each a pyxis option, with an argument exactly where pyxis takes one
        name, eq, _ = flag.partition("=")
        assert name in PYXIS and bool(eq) == (PYXIS[name] is not None), flag
    assert f"--container-image={enroot_uri(IMAGE)}" in train
    assert enroot_uri(IMAGE).startswith("nvcr.io#nvidia/pytorch@sha256:")
    # the shared directory, the suite's mounts (${data_dir}, ${workdir}/catalog on the shared directory), the inventory's
    assert ("--container-mounts=/shared/dlperf:/shared/dlperf,/shared/dlperf/data:/datasets:ro,"
            "/shared/dlperf/catalog:/dlperf/catalog:ro,/data:/datasets:ro") in train
    assert "--container-workdir=/workspace/bert" in train


def test_apptainer_runs_the_task_through_apptainer_exec_nv():
    _, job = _job("pytorch-bert", "1n8g", mode="apptainer")
    assert (f"apptainer exec --nv --bind=/shared/dlperf:/shared/dlperf --bind=/shared/dlperf/data:/datasets:ro "
            f"--bind=/shared/dlperf/catalog:/dlperf/catalog:ro docker://{IMAGE} bash -c") in job.script
    assert "--container-image" not in job.script


def test_telemetry_is_an_overlapping_step_on_every_node():
    _, job = _job("pytorch-bert", "2n8g", mode="none")
    tel = job.srun_lines[0]
    assert tel.startswith("srun --overlap --nodes=2 --ntasks-per-node=1")
    assert job.script.index("srun --overlap") < job.script.index(job.srun_lines[-1])


def test_catalog_values_stay_literal_and_node_placeholders_expand():
    nasty = "a'b $(touch /tmp/pwned) `id` ;|&"
    spec = LaunchSpec(argv=["printf", "%s\\n", nasty, "--addr=dlperf-slurm-host-1", "x dlperf-slurm-host-0 y"],
                      workdir="/")
    out = _bash(command_line(spec), DLPERF_HOST_0="10.0.0.1", DLPERF_HOST_1="10.0.0.2")
    assert out.splitlines() == [nasty, "--addr=10.0.0.2", "x 10.0.0.1 y"]
    assert not __import__("os").path.exists("/tmp/pwned")


def test_env_values_are_not_expanded():
    spec = LaunchSpec(argv=["sh", "-c", 'printf "%s" "$V"'], env={"V": "$HOME;`id`"})
    assert _bash(command_line(spec), HOME="/h") == "$HOME;`id`"


@pytest.mark.parametrize("key,value", [("partition", "gpu;rm"), ("account", "a b"), ("qos", "$(x)"),
                                       ("time_limit", "30 min"), ("container", "docker")])
def test_bad_inventory_values_are_refused_naming_the_key(key, value):
    with pytest.raises(PlanError, match=key):
        _opts(**{key: value})


def test_job_name_is_slurm_safe():
    assert job_name("run id;$(x)", "abc", 2) == "dlperf.run-id---x-.abc.a2"


def test_unknown_launch_mode_is_refused():
    with pytest.raises(PlanError, match="launch mode"):
        render_job(_opts(), run_id="r", trial_key="k", attempt=1, launch_mode="ssh", specs=[], nodes=1,
                   gpus_per_node=1, image=None)
