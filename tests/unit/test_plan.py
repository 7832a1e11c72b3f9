"""Planning: deterministic cells and trials, overrides validated, JSON round trip, and the CLI."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from dlperf_tasks.catalog import load_suite
from dlperf_tasks.cli import main
from dlperf_tasks.core.errors import PlanError
from dlperf_tasks.catalog.plan import Overrides, Plan, plan


def test_mxnet_bert_default_plan_order_and_ids():
    p = plan(load_suite("mxnet-bert"))
    assert [c.id for c in p.cells] == [
        "mxnet-bert/bz32/fp32/1n1g", "mxnet-bert/bz32/fp32/1n8g", "mxnet-bert/bz32/fp32/2n8g",
        "mxnet-bert/bz32/fp32/4n8g", "mxnet-bert/bz24/fp32/1n1g", "mxnet-bert/bz24/fp32/1n8g",
        "mxnet-bert/bz24/fp32/2n8g", "mxnet-bert/bz24/fp32/4n8g",
    ]
    assert len(p.trials) == 8 * 7
    first = p.trials[:7]
    assert [t.trial.index for t in first] == list(range(1, 8))
    assert first[0].id == "mxnet-bert/bz32/fp32/1n1g/t1"
    assert first[2].log_paths == ("logs/mxnet/bert/bz32/1n1g/bert_base_b32_fp32_3.log",)
    # multi-node trial: one log per node
    t = next(t for t in p.trials if t.trial.cell.topology.name == "4n8g")
    assert len(t.log_paths) == 4 and t.log_paths[1].endswith("_1.node1.log")
    # deterministic: planning twice gives the same ids and keys
    again = plan(load_suite("mxnet-bert"))
    assert [t.id for t in again.trials] == [t.id for t in p.trials]
    assert [t.trial.key for t in again.trials] == [t.trial.key for t in p.trials]


def test_topologies_sorted_by_world_size_and_big_clusters():
    p = plan(load_suite("mxnet-bert"), Overrides.from_dict({"topologies": "16n8g,1n8g,10n8g,1n1g,2n8g",
                                                            "batch_sizes": "32"}))
    assert [c.topology.name for c in p.cells] == ["1n1g", "1n8g", "2n8g", "10n8g", "16n8g"]
    big = p.trials_of(p.cells[-1])[0]
    assert len(big.log_paths) == 16 and big.log_paths[0] == "logs/mxnet/bert/bz32/16n8g/bert_base_b32_fp32_1.log"


def test_precision_specific_batch_sizes_rn50():
    p = plan(load_suite("mxnet-resnet50"), {"topologies": ["1n1g"]})
    assert [c.id for c in p.cells] == ["mxnet-resnet50/bz128/fp32/1n1g", "mxnet-resnet50/bz256/fp16/1n1g"]


def test_tensorflow_xla_and_oom_exclusion():
    s = load_suite("tensorflow-bert")
    p = plan(s, {"topologies": "1n1g", "precisions": "amp"})
    ids = [c.id for c in p.cells]
    assert ids == ["tensorflow-bert/bz64/fp16/1n1g", "tensorflow-bert/bz64/fp16_xla/1n1g",
                   "tensorflow-bert/bz96/fp16/1n1g", "tensorflow-bert/bz96/fp16_xla/1n1g",
                   "tensorflow-bert/bz128/fp16_xla/1n1g"]
    p2 = plan(s, {"topologies": "1n1g", "precisions": "amp", "batch_sizes": "128", "include_excluded": True})
    assert [c.id for c in p2.cells] == ["tensorflow-bert/bz128/fp16/1n1g", "tensorflow-bert/bz128/fp16_xla/1n1g"]
    # XLA and non-XLA logs of the same batch size do not overwrite each other
    paths = [path for t in plan(s).trials for path in t.log_paths]
    assert len(paths) == len(set(paths))
    full = plan(s)
    assert len(full.cells) == (3 * 2 + 2 * 2 + 1) * 6  # fp32 32/48/64 x xla, amp 64/96 x xla + 128 xla only


def test_megatron_layouts_by_topology_and_case():
    s = load_suite("megatron-gpt")
    p = plan(s)
    assert len(p.cells) == 18 and p.cells[0].layout.case == "DP_1x1x1_2_1536x16"
    p1 = plan(s, {"topologies": "1n8g"})
    assert [c.layout.case for c in p1.cells] == [
        "DP_8x1x1_16_1536x16", "MP_1x8x1_16_1536x16", "2D_8x1x1_16_1536x16", "2D_1x8x1_16_1536x16",
        "2D_2x4x1_16_1536x16", "2D_4x2x1_16_1536x16"]
    assert all(c.topology.name == "1n8g" for c in p1.cells)
    p2 = plan(s, {"cases": "MP_1x16x1_16_3072x16", "trials": 2})
    assert [c.id for c in p2.cells] == ["megatron-gpt/bz16/fp16/MP_1x16x1_16_3072x16/2n8g"]
    assert len(p2.trials) == 2 and len(p2.trials[0].log_paths) == 2
    paths = [path for t in p.trials for path in t.log_paths]
    assert len(paths) == len(set(paths))
    with pytest.raises(PlanError, match="no parallel layout .* for topology 16n8g"):
        plan(s, {"topologies": "16n8g"})
    with pytest.raises(PlanError, match="unknown case"):
        plan(s, {"cases": "DP_9x9x9"})
    with pytest.raises(PlanError, match="batch sizes come from the parallel layouts"):
        plan(s, {"batch_sizes": "2"})


@pytest.mark.parametrize("overrides, message", [
    ({"topologies": "1n8"}, "invalid topology '1n8'"),
    ({"topologies": "0n8g"}, "invalid topology '0n8g'"),
    ({"batch_sizes": "32,0"}, "batch_sizes: 0 must be a positive integer"),
    ({"batch_sizes": "32,x"}, "batch_sizes: 'x' is not an integer"),
    ({"precisions": "int8"}, "unknown precision 'int8'"),
    ({"trials": 0}, "trials: 0 must be >= 1"),
    ({"warmup_iters": -1}, "warmup_iters: -1 must be >= 0"),
    ({"measure_iters": 0}, "measure_iters: 0 must be >= 1"),
    ({"xla": "maybe"}, "xla: 'maybe' is not one of on, off, both"),
    ({"xla": "on"}, "does not support XLA"),
    ({"image_tag": "20.03 py3"}, "image tag '20.03 py3' is invalid"),
    ({"cases": "DP_1x1x1_2_1536x16"}, "has no parallel layouts"),
    ({"models": "resnet50"}, "unknown model(s) resnet50"),
    ({"batch_size": 3}, "unknown override(s): batch_size"),
])
def test_override_errors(overrides, message):
    with pytest.raises(PlanError) as ei:
        plan(load_suite("mxnet-bert"), overrides)
    assert message in str(ei.value)


def test_image_tag_override():
    assert plan(load_suite("pytorch-bert"), {"image_tag": "20.12-py3"}).image == "nvcr.io/nvidia/pytorch:20.12-py3"
    with pytest.raises(PlanError, match="runs on the host"):
        plan(load_suite("smoke"), {"image_tag": "x"})


def test_window_and_trials_override_reach_cells():
    p = plan(load_suite("smoke"), Overrides(trials=2, warmup_iters=1, measure_iters=4))
    assert all(c.window.warmup == 1 and c.window.measure == 4 for c in p.cells)
    assert [t.id for t in p.trials] == ["smoke/bz8/fp32/1n1g/t1", "smoke/bz8/fp32/1n1g/t2",
                                        "smoke/bz8/fp32/1n2g/t1", "smoke/bz8/fp32/1n2g/t2"]


def test_plan_json_roundtrip():
    for sid in ("mxnet-bert", "megatron-gpt", "tensorflow-bert", "smoke"):
        p = plan(load_suite(sid), {"trials": 2})
        d = json.loads(json.dumps(p.to_dict()))
        back = Plan.from_dict(d)
        assert back.to_dict() == p.to_dict()
        assert back.cells == p.cells and [t.trial for t in back.trials] == [t.trial for t in p.trials]


def test_log_names_come_from_the_framework_module():
    """One owner of log names: the plan's paths are Framework.log_relpath's (DLPerf's file names)."""
    s = load_suite("tensorflow-bert")
    p = plan(s, {"topologies": "4n8g", "batch_sizes": "64", "precisions": "fp32", "xla": "off", "trials": 2})
    t = p.trials[1]
    assert t.trial.index == 2 and t.log_paths[0] == "logs/tensorflow/bert/bz64/4n8g/bert_b64_fp32_2.log"
    assert t.log_paths[3] == "logs/tensorflow/bert/bz64/4n8g/bert_b64_fp32_2.node3.log"


def test_summary_table():
    text = plan(load_suite("mxnet-bert"), {"topologies": "1n1g,1n8g"}).summary()
    assert "mxnet-bert/bz24/fp32/1n8g" in text and text.rstrip().endswith("4 cells, 28 trials")


# ---- CLI ----------------------------------------------------------------------------------

def test_cli_catalog_table(capsys):
    assert main(["catalog"]) == 0
    out = capsys.readouterr().out
    header = out.splitlines()[0].split()
    assert header[:3] == ["id", "framework", "image"]
    for sid in ("megatron-gpt", "mxnet-bert", "smoke", "tensorflow-bert"):
        assert any(line.startswith(sid + " ") for line in out.splitlines())
    assert "nvcr.io/nvidia/mxnet:20.03-py3" in out and "fp32:128 amp:256" in out


def test_cli_catalog_show_and_check(capsys, tmp_path):
    assert main(["catalog", "show", "megatron-gpt"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# source: ") and "MP_1x16x1_16_3072x16" in out
    assert main(["catalog", "show", "smoke", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["container"] is None
    bad = tmp_path / "x.yaml"
    bad.write_text("id: x\n")
    assert main(["catalog", "check", str(bad)]) == 2
    assert "x.yaml" in capsys.readouterr().err


def test_cli_plan_table_and_json(capsys):
    assert main(["plan", "mxnet-bert", "--topologies", "1n1g,1n8g", "--batch-sizes", "32", "--trials", "3"]) == 0
    out = capsys.readouterr().out
    assert "mxnet-bert/bz32/fp32/1n8g" in out and "2 cells, 6 trials" in out
    assert main(["plan", "tensorflow-bert", "--topologies", "16n8g", "--batch-sizes", "64", "--precisions", "fp16",
                 "--xla", "both", "--format", "json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert [c["cell_id"] for c in d["cells"]] == ["tensorflow-bert/bz64/fp16/16n8g", "tensorflow-bert/bz64/fp16_xla/16n8g"]
    assert d["n_trials"] == 10 and len(d["trials"][0]["log_paths"]) == 16


def test_cli_plan_error_exit_code():
    r = subprocess.run([sys.executable, "-m", "dlperf_tasks", "plan", "mxnet-bert", "--topologies", "1n8"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert r.stderr.strip() == "dlperf: error: invalid topology '1n8': expected <nodes>n<gpus>g, e.g. 1n8g or 16n8g"


def test_suite_launcher_settings_are_accepted_by_the_framework_modules():
    """Every suite's ``launcher:`` block builds a command for every node of every planned topology."""
    from dlperf_tasks import frameworks
    from dlperf_tasks.catalog import list_suites
    from dlperf_tasks.frameworks.base import NodeSpec

    for suite in list_suites():
        fw = frameworks.get(suite.framework)
        p = plan(suite, {"trials": 1})
        seen = set()
        for t in p.trials:
            cell = t.trial.cell
            if cell.topology in seen:
                continue
            seen.add(cell.topology)
            nodes = [NodeSpec(name=f"node{i + 1}", address=f"127.0.0.{i + 1}", gpus=cell.topology.gpus_per_node)
                     for i in range(cell.topology.nodes)]
            ranks = [0] if fw.launch_mode == "mpi" else range(cell.topology.nodes)
            for r in ranks:
                spec = fw.launch(t.trial, r, nodes, suite.launcher)
                assert spec.argv and all(isinstance(a, str) for a in spec.argv), (suite.id, cell.id)
                assert len(t.log_paths) == cell.topology.nodes
