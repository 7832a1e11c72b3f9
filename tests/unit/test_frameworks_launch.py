"""Launch commands (seed flags), log paths and metric nodes of the five framework modules."""

from __future__ import annotations

import pytest

from dlperf_tasks.frameworks import get
from dlperf_tasks.frameworks.base import Framework, NodeSpec
from dlperf_tasks.core.model import Cell, MetricKind, ParallelLayout, Trial, Window
from dlperf_tasks.core.topology import Topology

FRAMEWORKS = ["mxnet_bert", "mxnet_resnet50", "pytorch_bert", "tensorflow_bert", "megatron_gpt"]
PP = ParallelLayout("PP", "DP_PP_8x1x4_512_1536x16", 8, 1, 4, 2, 512, 1536, 16, 16)


def trial(fw, topo="2n8g", bsz=32, precision="fp32", xla=False, window=Window(), layout=None, index=1):
    if fw == "megatron_gpt" and layout is None:
        t = Topology.parse(topo)
        layout = ParallelLayout("DP", "DP_x", t.world_size, 1, 1, 2, 2 * t.world_size, 1536, 16, 16)
    return Trial(Cell(suite="s", framework=fw, model="m", precision=precision, batch_size_per_device=bsz,
                      topology=Topology.parse(topo), xla=xla, layout=layout, window=window), index)


def nodes(n=2, gpus=8):
    return [NodeSpec(f"node{i + 1}", f"10.11.0.{i + 2}", gpus) for i in range(n)]


def after(argv, flag):
    return argv[argv.index(flag) + 1]


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_registered_with_defaults_only(fw):
    f = get(fw)
    assert isinstance(f, Framework) and f.name == fw
    spec = f.launch(trial(fw, "1n1g"), 0, nodes(1, 1), {})
    assert spec.argv and spec.workdir and spec.workdir.startswith("/workspace/")


def test_mxnet_bert_mpirun_seed_flags():
    spec = get("mxnet_bert").launch(trial("mxnet_bert", window=Window(20, 100)), 0, nodes(),
                                    {"ssh_port": 2222, "mpi_export": ["DLPERF_STANDIN_SPEED"]})
    a = spec.argv
    assert a[0] == "mpirun" and after(a, "-np") == "16" and after(a, "-H") == "10.11.0.2:8,10.11.0.3:8"
    for pair in (["-bind-to", "none"], ["-map-by", "slot"], ["-mca", "pml", "ob1"], ["-mca", "btl", "^openib"]):
        assert any(a[i:i + len(pair)] == pair for i in range(len(a)))
    assert {"NCCL_DEBUG", "LD_LIBRARY_PATH", "PATH", "DLPERF_STANDIN_SPEED"} <= {a[i + 1] for i, w in enumerate(a) if w == "-x"}
    assert "-p 2222 -q -o StrictHostKeyChecking=no" in a
    script = a[a.index("python3"):]
    assert script[1] == "run_pretraining.py"
    assert after(script, "--total_batch_size") == "512" and after(script, "--num_steps") == "120"
    assert after(script, "--log_interval") == "1" and after(script, "--dtype") == "float32"
    assert get("mxnet_bert").launch_mode == "mpi"
    with pytest.raises(ValueError, match="node 0"):
        get("mxnet_bert").launch(trial("mxnet_bert"), 1, nodes(), {})
    single = get("mxnet_bert").launch(trial("mxnet_bert", "1n8g"), 0, nodes(1), {}).argv
    assert after(single, "-H") == "localhost:8"


def test_mxnet_resnet50_flags():
    a = get("mxnet_resnet50").launch(trial("mxnet_resnet50", "1n8g", 256, "amp"), 0, nodes(1), {}).argv
    assert "--batch-size=256" in a and "--dtype=float16" in a and "--log-interval=1" in a
    assert "--num-batches=120" in a and "--model=resnet50_v1b" in a
    a = get("mxnet_resnet50").launch(trial("mxnet_resnet50", "1n8g"), 0, nodes(1), {"batches_arg": ""}).argv
    assert not any(w.startswith("--num-batches") for w in a)


def test_pytorch_per_node_flags():
    f = get("pytorch_bert")
    for r in (0, 1):
        spec = f.launch(trial("pytorch_bert", bsz=96, precision="amp"), r, nodes(), {"master_port": 22334})
        a = spec.argv
        assert a[:3] == ["python3", "-m", "torch.distributed.launch"]
        assert "--nproc_per_node=8" in a and after(a, "--nnodes") == "2" and f"--node_rank={r}" in a
        assert "--master_addr=10.11.0.2" in a and "--master_port=22334" in a
        assert "--train_batch_size=96" in a and "--fp16" in a and "--max_steps=125" in a
        assert spec.env["NCCL_DEBUG"] == "INFO"
    a = f.launch(trial("pytorch_bert", "1n1g"), 0, nodes(1, 1), {}).argv
    assert "--fp16" not in a and "--nproc_per_node=1" in a


def test_tensorflow_flags():
    f = get("tensorflow_bert")
    spec = f.launch(trial("tensorflow_bert", bsz=64, precision="amp", xla=True), 1, nodes(), {})
    a = spec.argv
    assert "--train_batch_size=1024" in a and "--num_gpus=8" in a and "--dtype=fp16" in a
    assert "--enable_xla=true" in a and "--distribution_strategy=multi_worker_mirrored" in a
    assert "--worker_hosts=10.11.0.2:11111,10.11.0.3:11111" in a and "--task_index=1" in a
    assert spec.env["TF_XLA_FLAGS"] == "--tf_xla_cpu_global_jit"
    a = f.launch(trial("tensorflow_bert", "1n8g"), 0, nodes(1), {}).argv
    assert "--distribution_strategy=mirrored" in a and "--enable_xla=false" in a
    assert not any(w.startswith("--worker_hosts") for w in a)


def test_megatron_flags_env_paths_nodes():
    f = get("megatron_gpt")
    t = trial("megatron_gpt", "4n8g", layout=PP, window=Window(10, 120), index=3)
    spec = f.launch(t, 2, nodes(4), {})
    a = spec.argv
    assert after(a, "--pipeline-model-parallel-size") == "4" and after(a, "--tensor-model-parallel-size") == "1"
    assert after(a, "--global-batch-size") == "512" and after(a, "--micro-batch-size") == "2"
    assert after(a, "--train-iters") == "130" and after(a, "--log-interval") == "10"
    assert after(a, "--seq-length") == "2048" and "--fp16" in a and after(a, "--node_rank") == "2"
    assert spec.env["NODE_RANK"] == "2" and spec.env["MASTER_ADDR"] == "10.11.0.2"
    assert f.metric_kind == MetricKind.LATENCY and f.metrics_nodes(t.cell) == [3]
    assert f.log_relpath(t, 3) == ("logs/megatron/gpt/DP_PP_8x1x4_512_1536x16/4n8g/3/megatron_lm_perf_4n8g_dp8_mp1"
                                   "_pp4_mbs2_gbs512_l16_hsz1536_ahs16_pretrain_3.log")
    bad = ParallelLayout("DP", "bad", 3, 1, 1, 2, 6, 1536, 16, 16)
    with pytest.raises(ValueError, match="DP\\*MP\\*PP"):
        f.launch(trial("megatron_gpt", "1n8g", layout=bad), 0, nodes(1), {})


def test_dlperf_log_paths():
    assert get("mxnet_bert").log_relpath(trial("mxnet_bert", "1n8g", index=3)) == \
        "logs/mxnet/bert/bz32/1n8g/bert_base_b32_fp32_3.log"
    assert get("mxnet_resnet50").log_relpath(trial("mxnet_resnet50", "1n1g", 128)) == \
        "logs/mxnet/resnet50/bz128/1n1g/rn50_b128_fp32_1.log"
    assert get("pytorch_bert").log_relpath(trial("pytorch_bert", bsz=96, precision="amp"), 1) == \
        "logs/ngc/pytorch/bert/bz96/2n8g/bert-base-adam-training_b96_fp16_1.node1.log"
    assert get("tensorflow_bert").log_relpath(trial("tensorflow_bert", "4n8g", 64)) == \
        "logs/tensorflow/bert/bz64/4n8g/bert_b64_fp32_1.log"


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_node_count_must_match_topology(fw):
    with pytest.raises(ValueError, match="needs 2 node"):
        get(fw).launch(trial(fw), 0, nodes(1), {})
    with pytest.raises(ValueError, match="invalid address"):
        get(fw).launch(trial(fw), 0, [NodeSpec("a", "-oProxyCommand=x"), NodeSpec("b", "10.0.0.1")], {})
