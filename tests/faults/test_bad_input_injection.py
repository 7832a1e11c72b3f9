"""Bad input: injection strings in every value that reaches a shell or a path.

Values that are legitimately free text (launcher ``extra_args``, ``script``, launcher and suite
``env`` values, the node's workdir, run ids, node names) must reach the program LITERALLY, one
argv word each; the rest is refused at load time (tests/faults/test_bad_input_catalog.py and
test_bad_input_params.py). Proof here is by execution, not by reading strings:

* Docker runtime (all five container suites): a hostile suite YAML passes ``dlperf catalog check``,
  is loaded and planned, each framework builds its launch, ``DockerRuntime.node_command`` wraps it
  into ``docker run`` (env values in the job's env file, ``-e NAME`` in argv), the remote job
  runner (``remote/jobs.py``) starts that, and real ``bash`` runs the result with a stub ``docker``
  first on PATH that records the argv and env it received.
  (The stub stands in for dockerd + GPUs; the command string is byte-for-byte what goes over SSH.)
* Host runtime, end to end: ``run_trial`` over real OpenSSH servers (tests/fixtures/sshd_nodes.py)
  with a hostile run id, node names, workdir and launcher settings; the "python" is a stub that
  records argv/env/cwd. GPUs are not needed; the stub prints no training log, so the trial must
  end INVALID_LOG (not crash) and leave no process behind.

Every case checks that a canary file that each injected command would create never appears.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from dlperf_tasks.catalog.loader import BUILTIN_DIR, load_suite
from dlperf_tasks.cli import main
from dlperf_tasks.core.errors import RemoteError, StoreError
from dlperf_tasks.catalog.plan import plan
from dlperf_tasks.remote import jobs
from dlperf_tasks.remote.inventory import Cluster, Node
from dlperf_tasks.remote.runtime import NodeFacts, make_runtime, safe_name
from dlperf_tasks.store.layout import Layout, validate_relpath, validate_run_id

CANARY = "PWNED"
#: {c} = the canary path; every entry would create it if a shell evaluated it
HOSTILE = [
    "; touch {c}",
    "$(touch {c})",
    "`touch {c}`",
    "' ; touch {c} ; '",
    '" ; touch {c} ; "',
    "&& touch {c}",
    "| tee {c}",
    "> {c}",
    "../../../../{c}",
    "--output={c}",
    "${{IFS}}touch${{IFS}}{c}",
    "a b\tc",
    "*",
    "~root",
    "",
]
HOSTILE_RUN_ID = "run;$(touch {c})`touch {c}`'q\"x"
#: node names cannot hold '/', so these create the canary in the command's working directory
HOSTILE_NODE_NAMES = ["n1;$(touch${IFS}PWNED)", "n2`touch${IFS}PWNED`'\"|&"]

STUB = r"""#!{python}
import json, os, sys
out = os.environ["STUB_OUT"] + "." + str(os.getpid())
keys = [k for k in os.environ if k.startswith(("HOSTILE", "DLPERF_TRIAL"))]
env_file = {{}}
if "--env-file" in sys.argv:  # docker's format: NAME=value lines, the value literal to the line end
    with open(sys.argv[sys.argv.index("--env-file") + 1]) as fh:
        env_file = dict(line.rstrip("\n").split("=", 1) for line in fh if line.strip())
with open(out, "w") as fh:
    json.dump({{"argv": sys.argv[1:], "env": {{k: os.environ[k] for k in keys}}, "env_file": env_file,
               "cwd": os.getcwd()}}, fh)
"""

#: a node's scratch dir (inventory ``workdir``): everything but $ ` " \ and control characters, which
#: the inventory refuses (test_inventory_refuses_values_that_cannot_be_literal)
NODE_WORKDIR = "node wd;|&'q'<x>*~ -rf"

CONTAINER_SUITES = {"mxnet-bert": "2n8g", "mxnet-resnet50": "2n8g", "tensorflow-bert": "2n8g",
                    "pytorch-bert": "2n8g", "megatron-gpt": "2n8g"}


def make_stub(directory: Path, name: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    p = directory / name
    p.write_text(STUB.format(python=sys.executable))
    p.chmod(p.stat().st_mode | stat.S_IXUSR)
    return p


def records(out: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(out.parent.glob(out.name + ".*"))]


def hostile(canary: Path) -> list[str]:
    return [h.format(c=canary) for h in HOSTILE]


def canaries(*dirs: Path) -> list[Path]:
    """Files an injected command would have created: named exactly CANARY under ``dirs``, or in the
    places a remote shell starts in (cwd, the SSH user's home, /)."""
    found = [p for d in dirs for p in d.rglob(CANARY)]
    return found + [p for p in (Path.cwd() / CANARY, Path.home() / CANARY, Path("/") / CANARY) if p.exists()]


def hostile_suite(tmp_path: Path, base: str, canary: Path, **launcher) -> Path:
    """``base`` with hostile extra_args/script/env written to ``tmp_path/base.yaml``; it must pass
    ``dlperf catalog check`` (free text is allowed there, control characters are not)."""
    d = yaml.safe_load((BUILTIN_DIR / f"{base}.yaml").read_text())
    values = hostile(canary)
    d.setdefault("launcher", {})
    d["launcher"].update({"extra_args": values, "script": values[1],
                          "env": {f"HOSTILE_L{i}": v for i, v in enumerate(values)}, **launcher})
    d["env"] = {**(d.get("env") or {}), "HOSTILE_SUITE": values[0], "HOSTILE_SUITE2": values[2]}
    p = tmp_path / f"{base}.yaml"
    p.write_text(yaml.safe_dump(d, sort_keys=False))
    assert main(["catalog", "check", str(p)]) == 0
    return p


def launch_settings(suite, trial) -> dict:
    """What remote/trial.py hands Framework.launch: launcher settings with the suite env merged in."""
    settings = dict(suite.launcher or {})
    settings["env"] = {**suite.env_for(trial.cell.topology), **(settings.get("env") or {})}
    return settings


@pytest.mark.parametrize("base", sorted(CONTAINER_SUITES))
def test_docker_command_delivers_hostile_values_literally(tmp_path, base):
    canary = tmp_path / CANARY
    values = hostile(canary)
    suite = load_suite(hostile_suite(tmp_path, base, canary))
    the_plan = plan(suite, {"topologies": [CONTAINER_SUITES[base]], "trials": 1})
    trial = the_plan.trials[0].trial
    run_id = HOSTILE_RUN_ID.format(c=canary)
    workdir = tmp_path / NODE_WORKDIR
    nodes = [Node(name=n, host=f"127.0.0.{i + 1}", workdir=str(workdir), data_dir=str(tmp_path))
             for i, n in enumerate(HOSTILE_NODE_NAMES)]
    fw_launch = __import__("dlperf_tasks.frameworks", fromlist=["get"]).get(suite.framework)
    runtime = make_runtime(suite.container, image=the_plan.image, launcher=suite.launcher)
    settings = launch_settings(suite, trial)
    if fw_launch.launch_mode == "mpi":
        settings["ssh_port"] = runtime.ssh_port
    spec = fw_launch.launch(trial, 0, [n.node_spec() for n in nodes], settings)
    log_dir = f"{workdir}/runs/{safe_name(run_id)}/t"
    cmd = runtime.node_command(spec, trial=trial, run_id=run_id, node=nodes[0], node_rank=0,
                               facts=NodeFacts(nodes[0].name), log_dir=log_dir)
    paths = jobs.JobPaths(jobs.new_job_id(safe_name(f"{run_id}_{nodes[0].name}")), jobs.jobs_base_dir(str(workdir)))
    line = jobs.start_command(paths, cmd)
    stubs = tmp_path / "bin"
    make_stub(stubs, "docker")
    out = tmp_path / "docker-argv"
    env = {"PATH": f"{stubs}:{os.environ['PATH']}", "HOME": str(tmp_path), "STUB_OUT": str(out)}
    # what SSHPool.run executes on the node (jobs.start_job): the start line, the env on stdin
    r = subprocess.run(["bash", "-c", line], input=jobs.env_payload(cmd.env, cmd.stdin), capture_output=True,
                       env=env, cwd=tmp_path, timeout=60)
    assert r.returncode == 0 and r.stdout.decode().strip() == f"started {paths.job_id}", r.stderr
    exit_file = Path(paths.exit_file)
    deadline = time.monotonic() + 30
    while not exit_file.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert exit_file.read_text() == "0", Path(paths.log_file).read_text()
    (rec,) = records(out)
    argv = rec["argv"]
    # exactly the argv the runtime built (bash parsed the quoted start line back into the same list)
    assert argv == cmd.argv[1:]
    got_env = rec["env_file"]  # the container's environment: docker --env-file, never -e K=V in argv
    for v in values:  # every hostile word arrived intact, as one argument or as one env value
        assert v in argv or v in got_env.values(), v
    for i, v in enumerate(values):
        assert got_env[f"HOSTILE_L{i}"] == v and f"HOSTILE_L{i}={v}" not in argv
    assert got_env["HOSTILE_SUITE"] == values[0] and got_env["DLPERF_TRIAL"] == trial.key
    assert argv[argv.index("--label") + 1] == f"dlperf.run={run_id}"
    assert f"dlperf.node={nodes[0].name}" in argv
    assert "-v" in argv and f"{log_dir}:/dlperf/out" in argv
    assert Path(log_dir).is_dir()  # mkdir -p of the hostile path created exactly that directory
    assert rec["env"]["DLPERF_TRIAL"] == trial.key
    assert canaries(tmp_path) == []


@pytest.fixture(scope="module")
def sshd_nodes(tmp_path_factory):
    from tests.fixtures.sshd_nodes import make_nodes, stop_nodes

    nodes, path = make_nodes(tmp_path_factory.mktemp("inj-sshd"), 2, base_octet=66)
    yield nodes, path
    stop_nodes(nodes)


def test_run_trial_over_ssh_passes_hostile_values_literally(tmp_path, sshd_nodes):
    """The real trial runner over real sshd: hostile run id, node names, node workdir, launcher
    args/env/workdir. The trial ends INVALID_LOG (the stub prints no iterations), nothing ran
    that was not asked for, and nothing is left running."""
    from dlperf_tasks.core.model import TrialStatus
    from dlperf_tasks.remote.runtime import HostRuntime
    from dlperf_tasks.remote.ssh import SSHPool
    from dlperf_tasks.remote.trial import TrialWatch, run_trial

    nodes, inv_path = sshd_nodes
    canary = tmp_path / CANARY
    values = hostile(canary)
    inv = yaml.safe_load(inv_path.read_text())
    names = [n for n in HOSTILE_NODE_NAMES]
    for n, name in zip(inv["nodes"], names):
        n["name"] = name
        n["workdir"] = str(Path(n["workdir"]) / NODE_WORKDIR)
    cluster = Cluster.from_dict(inv, source="hostile-inventory")
    workdir = tmp_path / "launch dir;$(touch PWNED)`x`'q'\""
    workdir.mkdir()
    stub = make_stub(tmp_path / "stub bin;$(x)", "python")
    out = tmp_path / "python-argv"
    suite_path = hostile_suite(tmp_path, "pytorch-bert", canary, python=str(stub), workdir=str(workdir))
    suite = load_suite(suite_path)
    import dataclasses

    suite = dataclasses.replace(suite, container=None, timeout_s=30, hang_timeout_s=20,
                                env={**suite.env, "STUB_OUT": str(out)})
    trial = plan(suite, {"topologies": ["2n1g"], "trials": 1, "warmup_iters": 1, "measure_iters": 2}).trials[0].trial
    run_id = HOSTILE_RUN_ID.format(c=canary)
    with SSHPool(cluster) as pool:
        res = run_trial(cluster, names, trial, suite, run_id, tmp_path / "out", pool=pool, watch=TrialWatch(poll_s=0.2))
        leftovers = [x for n in names for x in HostRuntime().leftovers(pool, n, run_id, trial.key)]
    assert res.status == TrialStatus.INVALID_LOG, (res.status, res.reason)
    assert "no iteration lines" in res.reason
    assert leftovers == []
    recs = records(out)
    assert len(recs) == 2  # one launcher per node
    for rec in recs:
        assert rec["cwd"] == str(workdir)
        for v in values:
            assert v in rec["argv"], v
        assert all(rec["env"][f"HOSTILE_L{i}"] == v for i, v in enumerate(values))
        assert rec["env"]["HOSTILE_SUITE"] == values[0]
        assert rec["env"]["DLPERF_TRIAL"] == trial.key
    for n in inv["nodes"]:  # the hostile workdirs were used as literal directories
        assert Path(n["workdir"]).is_dir()
    assert canaries(tmp_path, *(Path(n["workdir"]).parent for n in inv["nodes"])) == []


# ------------------------------------------------------------------------- refused at the door
@pytest.mark.parametrize("node", [
    {"name": "n1", "host": "10.0.0.1;touch /tmp/x"},
    {"name": "n1", "host": "$(id)"},
    {"name": "n1", "host": "h", "address": "10.0.0.1`id`"},
    {"name": "n1", "host": "h", "address": "10.0.0.1 10.0.0.2"},
    {"name": "n1", "host": "-oProxyCommand=id"},
    {"name": "n1/../x", "host": "h"},
    {"name": "n1\nrm -rf /", "host": "h"},
    {"name": "n1\x00", "host": "h"},
    {"name": "n1", "host": "h", "workdir": "relative/dir"},
    {"name": "n1", "host": "h", "workdir": "/tmp/$(touch PWNED)"},
    {"name": "n1", "host": "h", "workdir": "/tmp/`touch PWNED`"},
    {"name": "n1", "host": "h", "workdir": '/tmp/a"b'},
    {"name": "n1", "host": "h", "workdir": "/tmp/a\\b"},
    {"name": "n1", "host": "h", "workdir": "/tmp/a\nb"},
    {"name": "n1", "host": "h", "port": "22; id"},
    {"name": "n1", "host": "h", "gpus": "8`id`"},
    {"name": "n1", "host": "h", "strict_host_key_checking": "$(id)"},
    {"name": "n1", "host": "h", "proxy": "x"},
])
def test_inventory_refuses_values_that_cannot_be_literal(node, capsys, tmp_path):
    """Addresses reach MASTER_ADDR, mpirun -H and /dev/tcp probes, names reach paths and log
    lines: shell syntax, options and control characters there are refused with the node named."""
    with pytest.raises(RemoteError) as ei:
        Cluster.from_dict({"nodes": [node]}, source="inv.yaml")
    msg = str(ei.value)
    assert "inventory" in msg or "inv.yaml" in msg
    # and through the CLI: the sweep stops before any connection, naming the inventory problem
    inv = tmp_path / "inv.yaml"
    inv.write_text(yaml.safe_dump({"nodes": [node]}))
    rc = main(["sweep", "--suite", "smoke", "--cluster", str(inv), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("dlperf: error: ") and "Traceback" not in err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


@pytest.mark.parametrize("bad", ["../../etc/passwd", "a/b", "..", "run\n1", "run\x001", "$(id)", "`id`", "a b",
                                 "-rf", "", "x" * 201, "run;id", "'q'", "a..b"])
def test_store_run_ids_refuse_traversal_and_shell_syntax(bad):
    with pytest.raises(StoreError, match="invalid run id"):
        validate_run_id(bad)
    with pytest.raises(StoreError):
        Layout("dlperf").run_path("mxnet-bert", "2026-01-02", bad)


@pytest.mark.parametrize("rel", ["../x", "logs/../../x", "/etc/passwd", "logs//x", "logs/./x", "logs\\x",
                                 "logs/a\nb", "logs/a\x00b", "", "logs/$(id)", "logs/`id`"])
def test_store_object_paths_refuse_traversal(tmp_path, rel):
    from dlperf_tasks.store import Store

    with pytest.raises(StoreError, match="invalid object path"):
        validate_relpath(rel)
    with pytest.raises(StoreError):
        Layout("p").run_key("mxnet-bert", "2026-01-02", "r1", rel)
    with pytest.raises(StoreError):  # the read API of a real (local) store
        Store.from_url(f"file://{tmp_path}").read_object("r1", rel)


@pytest.mark.parametrize("prefix", ["../up", "a/../../b", "a\x00b", "a\nb", "a\\b"])
def test_store_prefix_cannot_escape(tmp_path, prefix):
    from dlperf_tasks.store import Store

    with pytest.raises(StoreError):
        Layout(prefix)
    with pytest.raises(StoreError):
        Store.from_settings({"type": "s3", "bucket": "b", "prefix": prefix,
                             "endpoint_url": "http://127.0.0.1:9"}).publish(tmp_path)


@pytest.mark.parametrize("image", ["--privileged", "-v/:/host", "img;id", "img:$(id)", "a b", "x\nprivileged"])
def test_image_override_that_docker_would_read_as_an_option_is_refused(image):
    """An image override (``dlperf sweep --image``, the inventory's ``images:``, the Airflow
    image tag) reaches ``docker pull/run`` argv after the options: it must be a plain reference."""
    from dlperf_tasks.catalog.model import ContainerSpec
    from dlperf_tasks.core.errors import CatalogError
    from dlperf_tasks.remote.runtime import make_runtime

    with pytest.raises(CatalogError, match="not a Docker image reference"):
        make_runtime(ContainerSpec(image="nvcr.io/nvidia/pytorch:20.06-py3"), image=image)
