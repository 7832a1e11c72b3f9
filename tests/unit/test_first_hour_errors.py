"""One fit check on every path, and one-line errors naming the file: ``dlperf sweep`` (real and
``--dry-run``) refuses a topology the local machine or the inventory cannot hold before anything
starts, as the DAG's plan step does; a store location that holds no store, malformed YAML and
every inventory error name the file in one line."""

from __future__ import annotations

import pytest

from dlperf_tasks.cli import main
from dlperf_tasks.core.errors import RemoteError
from dlperf_tasks.engine.errors import NonRetriable
from dlperf_tasks.engine.clusterconf import check_fits, local_cores
from dlperf_tasks.core.model import Topology
from dlperf_tasks.core.settings import Settings
from dlperf_tasks.remote.inventory import Cluster


def _err(capsys, *argv) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.mark.parametrize("dry", [True, False], ids=["dry-run", "sweep"])
def test_local_sweep_refuses_what_this_machine_cannot_hold(capsys, tmp_path, dry):
    extra = ["--dry-run"] if dry else ["--out", str(tmp_path / "out")]
    rc, out, err = _err(capsys, "sweep", "--suite", "smoke", "--cluster", "local", "--topologies", "4n8g", *extra)
    assert rc == 2 and out == ""
    assert err.strip() == "dlperf: error: topologies: 4n8g needs 4 nodes; the local cluster (this machine) has 1"
    assert not (tmp_path / "out").exists()  # nothing started, nothing written


def test_local_ranks_are_bounded_by_the_cores():
    s = Settings.load(cluster="local")
    cores = local_cores()
    check_fits([Topology.parse(f"1n{min(cores, 8)}g")], s)
    if cores < 8:
        with pytest.raises(NonRetriable, match=rf"1n8g runs 8 processes; the local cluster \(this machine\) has "
                                               rf"{cores} core\(s\)"):
            check_fits([Topology.parse("1n8g")], s)


def test_the_dag_and_the_cli_refuse_with_the_same_words(capsys):
    with pytest.raises(NonRetriable) as exc:
        check_fits([Topology.parse("4n8g")], Settings.load(cluster="local"))
    rc, _, err = _err(capsys, "sweep", "--suite", "smoke", "--cluster", "local", "--topologies", "4n8g", "--dry-run")
    assert str(exc.value).split(": ", 1)[1] in err


@pytest.mark.parametrize("make", ["missing", "empty", "file"])
def test_a_store_location_without_a_store_is_an_error(capsys, tmp_path, make):
    where = tmp_path / "stroe"
    if make == "empty":
        where.mkdir()
    elif make == "file":
        where.write_text("x")
    rc, out, err = _err(capsys, "results", "ls", "--store", str(where))
    assert rc == 2 and out == ""
    (line,) = [x for x in err.splitlines() if x.startswith("dlperf: error:")]
    assert line.startswith(f"dlperf: error: no store at file://{where}")


def test_malformed_inventory_yaml_is_one_line_with_file_and_line(tmp_path):
    p = tmp_path / "cluster.yaml"
    p.write_text("name: pod\nnodes:\n  - name: a\n    host: 10.0.0.1\n  - name: b\n    host: [10.0.0.2\n")
    with pytest.raises(RemoteError) as exc:
        Cluster.from_yaml(p)
    msg = str(exc.value)
    assert "\n" not in msg and msg.startswith(f"cluster inventory {p}:") and "malformed YAML" in msg
    assert int(msg.split(f"{p}:", 1)[1].split(":", 1)[0]) >= 6  # the line where the problem is


@pytest.mark.parametrize("text, words", [
    ("nodes:\n  - {name: a, host: h, gpus: x}\n", "gpus must be an integer"),
    ("nodes:\n  - {name: a, host: h, workdir: rel/dir}\n", "workdir must be an absolute path"),
    ("nodes: []\n", "'nodes' must be a non-empty list"),
    ("", "file is empty"),
])
def test_every_inventory_error_names_the_file(tmp_path, text, words):
    p = tmp_path / "inv.yaml"
    p.write_text(text)
    with pytest.raises(RemoteError) as exc:
        Cluster.from_yaml(p)
    assert str(p) in str(exc.value) and words in str(exc.value) and "\n" not in str(exc.value)


def test_malformed_suite_yaml_is_one_line_with_file_and_line(capsys, tmp_path):
    p = tmp_path / "mine.yaml"
    p.write_text("id: mine\nframework: pytorch_bert\ntopologies: [1n1g\n")
    rc, _, err = _err(capsys, "plan", str(p))
    (line,) = err.strip().splitlines()
    assert rc == 2 and line.startswith(f"dlperf: error: {p}:") and "malformed YAML" in line
