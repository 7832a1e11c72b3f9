"""The stand-in enforces each upstream entry point's real contract and prints what a
real cluster prints. Driven by the REAL launch commands, as in test_standin.py."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

from dlperf_tasks.frameworks import get
from dlperf_tasks.core.model import ParallelLayout, Trial
from dlperf_tasks.remote.envcapture import nccl_transport
from tests.unit.test_standin import BASE_CONFIG, DIST, ROOTFS, STANDIN, TIME_SCALE, _cell, _nodes, _settings, _start

CONTRACTS = DIST / "dlperf_standin_contracts"
LARGE = ROOTFS / "workspace" / "bert" / "bert_config.json"  # the repository's own file: BERT-large


def _run(fw, cell, tmp_path, **settings):
    f = get(fw)
    env = {"PYTHONPATH": str(DIST), "DLPERF_STANDIN_TIME_SCALE": TIME_SCALE, "DLPERF_STANDIN_SPEED": "100"}
    env.update(settings.pop("env", {}))
    s = {**_settings(env), **settings}
    nodes = _nodes(cell.topology.nodes, cell.topology.gpus_per_node)
    ranks = [0] if f.launch_mode == "mpi" else list(range(cell.topology.nodes))
    out = {}
    for r in ranks:
        log = tmp_path / f"node{r}.log"
        rc = _start(f.launch(Trial(cell, 1), r, nodes, s), log).wait(timeout=120)
        out[r] = (rc, log.read_text(errors="replace"))
    return out


def test_contracts_name_upstream_path_and_commit():
    for fmt in ("pytorch_bert", "mxnet_bert", "mxnet_resnet50", "megatron_gpt", "tensorflow_bert"):
        doc = json.loads((CONTRACTS / f"{fmt}.json").read_text())
        assert doc["repo"].startswith("https://github.com/") and doc["paths"] and doc["arguments"]
        assert len(doc["commit"]) == 40 or doc.get("ref") == "r2.3.0"
    dle = json.loads((CONTRACTS / "pytorch_bert.json").read_text())
    required = sorted(a["flags"][0] for a in dle["arguments"] if a["required"])
    assert required == ["--config_file", "--input_dir", "--output_dir"]
    assert dle["commit"] == "5cc03caa153faab7a2c3b1b5b5d63663f06ce1b4"
    assert "--no_compute_acc" in {a["flags"][0] for a in json.loads((CONTRACTS / "mxnet_bert.json").read_text())["arguments"]}


def test_misspelled_flag_exits_2_with_argparse_message(tmp_path):
    res = _run("pytorch_bert", _cell("pytorch_bert", 32, "1n1g"), tmp_path, extra_args=["--learning-rate=1e-3"])
    rc, log = res[0]
    assert rc != 0
    assert "run_pretraining.py: error: unrecognized arguments: --learning-rate=1e-3" in log
    assert "returned non-zero exit status 2" in log  # torch.distributed.launch reports the script's exit 2
    assert "Training Iteration" not in log


def test_optimizer_flag_does_not_exist_in_dle(tmp_path):
    res = _run("pytorch_bert", _cell("pytorch_bert", 32, "1n1g"), tmp_path, extra_args=["--optimizer=adam"])
    assert "error: unrecognized arguments: --optimizer=adam" in res[0][1]


def test_bert_large_config_trains_silently_and_slower_like_dle(tmp_path):
    """DLE builds the model from --config_file alone: a BERT-large config under bert-base-uncased trains
    BERT-large without a word. The stand-in does the same, at a third of the configured speed,
    so a launch of the wrong model is visible in the number; refusing the cell is the pre-launch guard's job."""
    f = get("pytorch_bert")
    cell = _cell("pytorch_bert", 32, "1n1g")
    for config, speed in ((BASE_CONFIG, 100.0), (LARGE, 33.33)):
        rc, log = _run("pytorch_bert", cell, tmp_path, config_file=str(config))[0]
        assert rc == 0 and "Traceback" not in log
        parsed = f.parse(log.splitlines(keepends=True))
        assert parsed.facts.framework_figure == speed


def test_missing_config_file_fails_like_dle(tmp_path):
    res = _run("pytorch_bert", _cell("pytorch_bert", 32, "1n1g"), tmp_path, config_file=str(tmp_path / "nope.json"))
    assert "FileNotFoundError: [Errno 2] No such file or directory" in res[0][1]


def test_accumulation_must_divide_train_batch_size_and_is_logged(tmp_path):
    cell = _cell("pytorch_bert", 32, "1n1g")
    rc, log = _run("pytorch_bert", cell, tmp_path, gradient_accumulation_steps=4)[0]
    assert rc == 0 and "gradient_accumulation_steps=4" in log and "train_batch_size=32" in log
    bad = _run("pytorch_bert", cell, tmp_path, extra_args=["--train_batch_size=30", "--gradient_accumulation_steps=4"])
    assert "ValueError: Invalid gradient_accumulation_steps parameter: 4, batch size 30 should be divisible" in bad[0][1]


def test_megatron_asserts_of_the_real_code(tmp_path):
    # 12 heads cannot be split over 8 tensor-parallel ranks (mpu.divide)
    lay = ParallelLayout("MP", "MP_1x8x1_16_768x12", 1, 8, 1, 16, 16, 768, 12, 12)
    res = _run("megatron_gpt", _cell("megatron_gpt", 16, "1n8g", "amp", layout=lay), tmp_path)
    assert "AssertionError: 12 is not divisible by 8" in res[0][1]
    # 16 layers over 3 pipeline stages
    lay = ParallelLayout("PP", "PP_1x1x3", 1, 1, 3, 2, 2, 768, 12, 16)
    res = _run("megatron_gpt", _cell("megatron_gpt", 2, "1n3g", "amp", layout=lay), tmp_path)
    assert "num_layers must be divisible by pipeline_model_parallel_size" in res[0][1]
    # an unknown Megatron flag (allow_abbrev=False: no prefix matching either)
    lay = ParallelLayout("DP", "DP_1x1x1", 1, 1, 1, 2, 2, 768, 12, 12)
    res = _run("megatron_gpt", _cell("megatron_gpt", 2, "1n1g", "amp", layout=lay), tmp_path,
               extra_args=["--num-layer", "12"])
    assert "pretrain_gpt.py: error: unrecognized arguments: --num-layer 12" in res[0][1]


def test_tensorflow_unknown_flag_is_absl_fatal(tmp_path):
    rc, log = _run("tensorflow_bert", _cell("tensorflow_bert", 32, "1n1g"), tmp_path, extra_args=["--use_xla=true"])[0]
    assert rc == 1 and "FATAL Flags parsing error: Unknown command line flag 'use_xla'" in log


def test_mxnet_unknown_flag_through_mpirun(tmp_path):
    res = _run("mxnet_bert", _cell("mxnet_bert", 32, "1n1g"), tmp_path, extra_args=["--no_compute_accuracy"])
    assert "run_pretraining.py: error: unrecognized arguments: --no_compute_accuracy" in res[0][1]


def test_cluster_prints_nccl_and_openmpi_lines_in_their_real_format(tmp_path):
    host = socket.gethostname()
    res = _run("pytorch_bert", _cell("pytorch_bert", 32, "2n2g"), tmp_path,
               env={"NCCL_DEBUG": "INFO", "NCCL_SOCKET_IFNAME": "lo", "DLPERF_STANDIN_NCCL_NET": "IB"})
    rc, log = res[1]
    assert rc == 0
    assert f"{host}:" in log and "NCCL INFO Bootstrap : Using [0]lo:127." in log
    assert "%lo<0>" in log and "[1]lo:fe80::" in log
    assert "NCCL INFO NET/IB : Using [0]mlx5_" in log and "via NET/IB/0" in log
    t = nccl_transport(log.splitlines())
    assert t["network"] == "IB" and "NET/IB" in t["paths"]
    rc, log = _run("mxnet_bert", _cell("mxnet_bert", 32, "1n2g"), tmp_path, env={"NCCL_DEBUG": "INFO"})[0]
    assert rc == 0 and f"  Local host:   {host}" in log and "more processes have sent help message" in log
    assert "NCCL INFO Using network" in log


def test_standin_cli_help_still_works():
    out = subprocess.run([sys.executable, str(STANDIN), "--help"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0 and "--format" in out.stdout
    assert BASE_CONFIG.is_file()


def test_required_flags_of_the_real_script(tmp_path):
    script = ROOTFS / "workspace" / "examples" / "bert" / "run_pretraining.py"
    out = subprocess.run([sys.executable, str(script), "--input_dir=/d", f"--config_file={BASE_CONFIG}", "--do_train"],
                         capture_output=True, text=True, timeout=60, env={"PYTHONPATH": str(DIST), "PATH": "/usr/bin:/bin"},
                         cwd=tmp_path)
    assert out.returncode == 2
    assert "run_pretraining.py: error: the following arguments are required: --output_dir" in out.stderr


def test_the_trials_reason_names_what_the_script_refused(tmp_path):
    """The validity gate's reason carries the stand-in's own message (argparse / setup check line)."""
    from dlperf_tasks.frameworks._lines import read_log
    from dlperf_tasks.core.model import Window
    from dlperf_tasks.measure.validity import gate

    f = get("pytorch_bert")
    cell = _cell("pytorch_bert", 32, "1n1g")
    for settings, want in (({"extra_args": ["--learning-rate=1e-3"]},
                            "usage error: run_pretraining.py: error: unrecognized arguments: --learning-rate=1e-3"),
                           ({"config_file": str(tmp_path / "none.json")}, "setup error: FileNotFoundError: ")):
        _run("pytorch_bert", cell, tmp_path, **settings)
        parsed = f.parse(read_log(str(tmp_path / "node0.log")))
        res = gate(f, Trial(cell, 1), parsed, Window(20, 100), exit_codes={"node1": 1})
        assert not res.valid and want in res.reason, res.reason
