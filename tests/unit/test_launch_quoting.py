"""Every launcher value reaches the remote shell as one literal word.

For each framework, ``LaunchSpec.shell()`` built from hostile settings (shell
metacharacters, command substitutions, quotes, newlines, spaces) is run with a real
``bash -c``; the "interpreter" is a stub that records the argv, environment and
working directory it received. They must equal the spec exactly, and no injected
command may run.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

import pytest

from dlperf_tasks.core.errors import CatalogError
from dlperf_tasks.frameworks import get
from dlperf_tasks.frameworks.base import NodeSpec
from dlperf_tasks.core.model import Cell, ParallelLayout, Trial, Window
from dlperf_tasks.core.topology import Topology

HOSTILE = [
    "; touch {canary}",
    "$(touch {canary})",
    "`touch {canary}`",
    "' ; touch {canary} ; '",
    '" ; touch {canary} ; "',
    "a b\tc",
    "line1\nline2; touch {canary}",
    "--flag=$HOME",
    "*",
    "~root",
    "x > {canary}",
    "-rf /",
    "",
]
FRAMEWORKS = ["mxnet_bert", "mxnet_resnet50", "pytorch_bert", "tensorflow_bert", "megatron_gpt"]
LAYOUT = ParallelLayout("DP", "DP_16x1x1_32_1536x16", 16, 1, 1, 2, 32, 1536, 16, 16)

STUB = """#!{python}
import json, os, sys
keys = [k for k in os.environ if k.startswith("HOSTILE_") or k in ("NCCL_DEBUG", "NODE_RANK", "MASTER_ADDR")]
with open(os.environ["STUB_OUT"], "w") as fh:
    json.dump({{"argv": sys.argv[1:], "env": {{k: os.environ[k] for k in keys}}, "cwd": os.getcwd()}}, fh)
"""


@pytest.fixture
def stub(tmp_path):
    p = tmp_path / "stub interp"
    p.write_text(STUB.format(python=sys.executable))
    p.chmod(p.stat().st_mode | stat.S_IXUSR)
    return p


def _trial(fw: str) -> Trial:
    layout = LAYOUT if fw == "megatron_gpt" else None
    c = Cell(suite="s", framework=fw, model="m", precision="amp", batch_size_per_device=32,
             topology=Topology.parse("2n8g"), layout=layout, window=Window(20, 100))
    return Trial(c, 1)


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_hostile_settings_reach_the_program_literally(fw, tmp_path, stub):
    canary = tmp_path / "INJECTED"
    values = [v.format(canary=canary) for v in HOSTILE]
    workdir = tmp_path / "work dir; $(touch INJECTED) `x` 'q' \"d\""
    workdir.mkdir()
    out = tmp_path / "out.json"
    settings = {
        "python": str(stub),
        "mpirun": str(stub),
        "workdir": str(workdir),
        "data_dir": values[1],
        "script": values[0],
        "extra_args": values,
        "env": {"STUB_OUT": str(out), **{f"HOSTILE_{i}": v for i, v in enumerate(values)}},
    }
    nodes = [NodeSpec("node1", "10.0.0.1", 8), NodeSpec("node2", "10.0.0.2", 8)]
    spec = get(fw).launch(_trial(fw), 0, nodes, settings)
    res = subprocess.run(["bash", "-c", spec.shell()], capture_output=True, text=True, timeout=60,
                         cwd=tmp_path, env={"PATH": os.environ["PATH"], "HOME": str(tmp_path)})
    assert res.returncode == 0, res.stderr
    got = json.loads(out.read_text())
    assert got["argv"] == spec.argv[1:]
    for v in values:  # every hostile word arrived intact, as one argument
        assert v in got["argv"]
    assert got["env"] == {k: v for k, v in spec.env.items() if k in got["env"]}
    assert all(got["env"][f"HOSTILE_{i}"] == v for i, v in enumerate(values))
    assert got["cwd"] == str(workdir)
    assert not canary.exists()
    assert not (workdir / "INJECTED").exists() and not (tmp_path / "INJECTED").exists()


@pytest.mark.parametrize("fw", FRAMEWORKS)
@pytest.mark.parametrize("bad", [
    {"extra_args": "--foo bar"},          # a string would need word splitting
    {"extra_args": [["nested"]]},
    {"env": {"BAD NAME": "x"}},
    {"env": {"A=B": "x"}},
    {"env": ["A=B"]},
    {"master_port": "22; id"},
    {"master_port": 0},
])
def test_bad_settings_are_rejected_with_the_key_named(fw, bad):
    nodes = [NodeSpec("node1", "10.0.0.1", 8), NodeSpec("node2", "10.0.0.2", 8)]
    key = next(iter(bad))
    if key == "master_port" and fw in ("mxnet_bert", "mxnet_resnet50", "tensorflow_bert"):
        bad = {"ssh_port" if fw.startswith("mxnet") else "worker_port": bad[key]}
        key = next(iter(bad))
    with pytest.raises(CatalogError, match=f"launcher\\.{key}"):
        get(fw).launch(_trial(fw), 0, nodes, bad)
