"""The A/B driver's pure parts (dlperf_tasks/engine/abrun.py): the plan reduced to the finding's cells,
and the A/B environment taken from a sweep's result."""

from __future__ import annotations

import pytest

from dlperf_tasks.engine import abrun
from dlperf_tasks.catalog.loader import load_suite
from dlperf_tasks.core.errors import DlperfError
from dlperf_tasks.catalog.plan import plan


def test_plan_for_keeps_only_the_cells_one_trial_each():
    suite = load_suite("mxnet-bert")
    cells = [c.id for c in plan(suite).cells]
    multi = next(c for c in cells if c.endswith("/2n8g"))
    base = next(c for c in cells if c.endswith("/1n1g") and c.rsplit("/", 1)[0] == multi.rsplit("/", 1)[0])
    p = abrun.plan_for(suite, [multi, base])
    assert sorted(c.id for c in p.cells) == sorted([multi, base])
    assert sorted((t.trial.cell.id, t.trial.index) for t in p.trials) == sorted([(multi, 1), (base, 1)])
    with pytest.raises(DlperfError, match="has no cell"):
        abrun.plan_for(suite, ["mxnet-bert/bz999/fp32/1n1g"])


def test_env_of_a_sweep_result():
    res = {"run": {"image": "r/x:1", "image_digest": "r/x@sha256:ab", "env": {
        "driver": "535", "nccl": "2.18", "nccl_transport": {"t1": {"network": "IB"}, "t2": {"network": "IB"}},
        "gpus": [1, 2]}}}
    assert abrun.env_of(res) == {"image": "r/x:1", "image_digest": "r/x@sha256:ab", "driver": "535", "nccl": "2.18",
                               "transport": "IB"}


def test_redacted_registry_resolved_from_the_cluster():
    from dlperf_tasks.remote.inventory import Cluster

    c = Cluster.from_dict({"registry": {"server": "127.0.0.1:5000"}, "nodes": [{"name": "n1", "host": "127.0.0.1"}]})
    assert abrun.resolve_ref("<ip-1>:5000/nvidia/tf@sha256:ab", c) == "127.0.0.1:5000/nvidia/tf@sha256:ab"
    assert abrun.resolve_ref("nvcr.io/nvidia/tf:20.12", c) == "nvcr.io/nvidia/tf:20.12"
    bare = Cluster.from_dict({"nodes": [{"name": "n1", "host": "127.0.0.1"}]})
    with pytest.raises(DlperfError, match="--image-a"):
        abrun.resolve_ref("<host-2>/nvidia/tf@sha256:ab", bare)
