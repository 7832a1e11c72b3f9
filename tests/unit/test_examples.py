"""The example inventory in examples/ loads with the real inventory loader and says what it documents."""

from pathlib import Path

from dlperf_tasks.remote.inventory import Cluster

ROOT = Path(__file__).resolve().parents[2]


def test_example_cluster_inventory_loads():
    c = Cluster.from_yaml(ROOT / "examples" / "cluster.yaml")
    assert [n.name for n in c.nodes] == ["node1", "node2", "node3"]
    assert [n.gpus for n in c.nodes] == [8, 8, 4]
    n1 = c.nodes[0]
    assert (n1.user, n1.port, n1.interface, n1.workdir) == ("bench", 22, "ib0", "/var/tmp/dlperf")
    assert c.name == "dgx-pod"
    import re

    text = (ROOT / "examples" / "cluster.yaml").read_text()
    assert not re.search(r"^\s*(password|private_key)\s*:", text, re.M)  # no secret in the example
    assert "## `cluster.yaml`" in (ROOT / "examples" / "README.md").read_text()


def test_topology_check_reads_the_inventory_and_no_credential():
    """The trigger-time and plan-time topology check counts the inventory's nodes and GPUs; the
    entry point's credential lookup (Airflow connections: ``resolve_cluster``) is not called for it."""
    import dataclasses

    import pytest

    from dlperf_tasks.engine.errors import NonRetriable
    from dlperf_tasks.engine.clusterconf import check_fits
    from dlperf_tasks.core.model import Topology
    from dlperf_tasks.core.settings import Settings

    @dataclasses.dataclass(frozen=True)
    class NoLookups(Settings):
        def resolve_cluster(self, cluster):
            raise AssertionError("credentials were looked up to count nodes")

    s = NoLookups(**{f.name: getattr(Settings.load(cluster=str(ROOT / "examples" / "cluster.yaml")), f.name)
                     for f in dataclasses.fields(Settings)})
    check_fits([Topology.parse("3n4g"), Topology.parse("2n8g")], s)
    with pytest.raises(NonRetriable, match="3n8g needs 3 nodes with 8 GPUs; cluster dgx-pod has 2 such node"):
        check_fits([Topology.parse("3n8g")], s)  # node3 has 4 GPUs
    with pytest.raises(NonRetriable, match="4n8g needs 4 nodes; cluster dgx-pod has 3"):
        check_fits([Topology.parse("4n8g")], s)
