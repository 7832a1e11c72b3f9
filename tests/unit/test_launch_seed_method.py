"""Run what the seeds ran (BERT-base config, seed 001's method, --no_compute_acc)."""

from __future__ import annotations

import json

import pytest

from dlperf_tasks.catalog import load_suite
from dlperf_tasks.catalog.loader import load_file
from dlperf_tasks.catalog.nodefiles import BERT_DIMS, CONTAINER_DIR
from dlperf_tasks.core.errors import CatalogError
from dlperf_tasks.frameworks import get
from dlperf_tasks.frameworks.base import NodeSpec
from dlperf_tasks.catalog.plan import plan

DLE_LARGE = {"attention_probs_dropout_prob": 0.1, "hidden_act": "gelu", "hidden_dropout_prob": 0.1,
             "hidden_size": 1024, "initializer_range": 0.02, "intermediate_size": 4096,
             "max_position_embeddings": 512, "num_attention_heads": 16, "num_hidden_layers": 24,
             "type_vocab_size": 2, "vocab_size": 30522}


def _argv(suite, cell_id_part, node_rank=0):
    p = plan(suite)
    t = next(pt.trial for pt in p.trials if cell_id_part in pt.trial.cell.id)
    n = t.cell.topology.nodes
    nodes = [NodeSpec(f"node{i + 1}", f"10.0.0.{i + 1}", t.cell.topology.gpus_per_node) for i in range(n)]
    return t, get(suite.framework).launch(t, node_rank, nodes, suite.launcher).argv


def test_pytorch_bert_ships_and_uses_the_base_config():
    suite = load_suite("pytorch-bert")
    files = suite.node_files()
    assert list(files) == ["bert_config_base.json"]
    cfg = json.loads(files["bert_config_base.json"])
    assert {k: cfg[k] for k in BERT_DIMS["bert-base"]} == BERT_DIMS["bert-base"]
    _, argv = _argv(suite, "bz32/fp32/ga2112/1n1g")
    assert f"--config_file={CONTAINER_DIR}/bert_config_base.json" in argv
    assert not any(a.endswith("/workspace/bert/bert_config.json") for a in argv)
    assert any(m.endswith(":/dlperf/catalog:ro") for m in suite.container.mounts)
    meta = suite.launch_metadata()
    assert meta["bert_config"]["model"] == "bert-base" and meta["bert_config"]["hidden_size"] == 768
    assert meta["optimizer"] == "lamb"


def test_bert_large_config_under_bert_base_suite_is_refused(tmp_path):
    src = (load_suite("pytorch-bert").source)
    text = open(src).read().replace("bert_config: bert_config_base.json", "bert_config: bert_config.json")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "bert_config.json").write_text(json.dumps(DLE_LARGE))
    (tmp_path / "pytorch-bert.yaml").write_text(text)
    with pytest.raises(CatalogError, match=r"launcher\.bert_config.*bert-large, not the suite's model bert-base"):
        load_file(tmp_path / "pytorch-bert.yaml")


def test_seed001_accumulation_is_a_cell_parameter_and_no_gradacc_only_on_32_gpus():
    p = plan(load_suite("pytorch-bert"))
    by_topo = {}
    for c in p.cells:
        by_topo.setdefault(c.topology.name, set()).add(c.accumulation)
    # seed 001 (PaddlePaddle/Perf a26f150, run_benchmark.sh): accumulation = 67584 / (batch x GPUs)
    assert by_topo == {"1n1g": {2112, 1408, 1056, 704}, "1n8g": {264, 176, 132, 88}, "4n8g": {66, 44, 33, 22, 1}}
    for c in p.cells:
        if c.accumulation != 1:
            assert c.accumulation * c.batch_size_per_device * c.topology.world_size == 67584
    ids = [c.id for c in p.cells]
    assert "pytorch-bert/bz96/fp16/ga1/4n8g" in ids and "pytorch-bert/bz96/fp16/ga22/4n8g" in ids
    # the "no GradAcc" cells are compared with nothing measured with accumulation
    c1 = next(c for c in p.cells if c.id.endswith("bz96/fp16/ga1/4n8g"))
    c32 = next(c for c in p.cells if c.id.endswith("bz96/fp16/ga704/1n1g"))
    assert c1.baseline_key != c32.baseline_key
    logs = {pt.log_paths[0] for pt in p.trials}
    assert len(logs) == len(p.trials)
    assert any("_b96_fp16_ga1_1.log" in path for path in logs)


def test_seed001_launch_dle_phase1_with_lamb_and_accumulation():
    suite = load_suite("pytorch-bert")
    t, argv = _argv(suite, "bz96/fp16/ga22/4n8g", node_rank=3)
    # DLE divides --train_batch_size by the accumulation: micro-batch = the cell's 96 (67584 / 32 GPUs)
    assert "--train_batch_size=2112" in argv and "--gradient_accumulation_steps=22" in argv
    assert "--allreduce_post_accumulation" in argv and "--allreduce_post_accumulation_fp16" in argv
    assert "--max_steps=4" in argv  # seed 001's logs: max_steps=4.0 (summary rule: no skipped head)
    # DLE's run_pretraining.sh passes both allreduce flags for every precision (seed 001's fp32 logs show them)
    _, argv32 = _argv(suite, "bz32/fp32/ga264/1n8g")
    assert "--allreduce_post_accumulation" in argv32 and "--allreduce_post_accumulation_fp16" in argv32
    assert "--fp16" not in argv32
    _, argv1 = _argv(suite, "bz96/fp16/ga1/4n8g")
    assert "--train_batch_size=96" in argv1 and "--gradient_accumulation_steps=1" in argv1
    assert "--allreduce_post_accumulation" not in argv1
    assert not any(a.startswith("--optimizer") for a in argv)  # DLE has no such flag: LAMB is its code


def test_max_iter_and_optimizer_are_catalog_fields(tmp_path):
    src = load_suite("pytorch-bert").source
    text = open(src).read().replace("optimizer: lamb", "optimizer: sgd")
    (tmp_path / "pytorch-bert.yaml").write_text(text)
    with pytest.raises(CatalogError, match=r"launcher\.optimizer.*unknown optimizer 'sgd'"):
        load_file(tmp_path / "pytorch-bert.yaml")
    text = open(src).read().replace("optimizer: lamb", "optimizer: adam\n  max_iter: 500")
    (tmp_path / "pytorch-bert.yaml").write_text(text)
    suite = load_file(tmp_path / "pytorch-bert.yaml")
    assert suite.launch_metadata()["optimizer"] == "adam"
    _, argv = _argv(suite, "bz32/fp32/ga2112/1n1g")
    assert "--max_steps=500" in argv


def test_mxnet_bert_passes_no_compute_acc_like_dlperf_pretrain_sh():
    suite = load_suite("mxnet-bert")
    _, argv = _argv(suite, "bz32/fp32/1n8g")
    script = argv[argv.index("run_pretraining.py"):]
    assert "--no_compute_acc" in script


def test_plan_cli_shows_base_config_and_accumulation(capsys):
    from dlperf_tasks.cli import main

    assert main(["plan", "pytorch-bert", "--topologies", "4n8g", "--batch-sizes", "96"]) == 0
    out = capsys.readouterr().out
    assert "grad_acc" in out and "pytorch-bert/bz96/fp16/ga1/4n8g" in out
    assert "bert_config_base.json (bert-base: hidden 768, 12 layers, 12 heads, intermediate 3072" in out
    assert "optimizer lamb" in out
