"""The stand-in is as strict as upstream at the pinned commits, and no stricter.

Each case is a launch the real entry point refuses (or, for gluon-nlp with no ``--data``, runs
without training) that the stand-in used to accept and print the configured speed for. The facts
come from the upstream sources at the seeds' commits:

* gluon-nlp 7b7bf60 ``scripts/bert/run_pretraining.py``: ``model.cast(args.dtype)`` (NumPy dtype
  names only), ``if args.data:`` (no data: no training, exit 0); ``pretraining_utils.py:218``
  ``assert num_files >= num_parts``; ``src/gluonnlp/utils/files.py:29`` ``glob`` (comma-separated
  shell patterns).
* gluon-cv f9a8a28 ``scripts/classification/imagenet/train_horovod.py``: ``net.cast(args.dtype)``.
* tensorflow/models ``official/utils/flags/_performance.py``: ``DEFINE_enum("dtype", ...,
  enum_values=DTYPE_MAP.keys())`` = fp16|bf16|fp32; ``official/nlp/bert/run_pretraining.py``:
  ``input_file_pattern.split(',')`` with ``--input_files`` unset.
"""

from __future__ import annotations

import subprocess
import sys

from dlperf_tasks.frameworks import get
from tests.unit.test_standin import BASE_CONFIG, DIST, PATCHED, ROOTFS, _cell, standin_data_dir
from tests.unit.test_standin_contract import _run


def test_mxnet_bert_fp16_is_not_a_numpy_dtype(tmp_path):
    rc, log = _run("mxnet_bert", _cell("mxnet_bert", 32, "1n1g"), tmp_path, extra_args=["--dtype", "fp16"])[0]
    assert rc != 0 and "TypeError: data type 'fp16' not understood" in log
    assert "[step " not in log


def test_mxnet_resnet50_fp16_is_not_a_numpy_dtype(tmp_path):
    rc, log = _run("mxnet_resnet50", _cell("mxnet_resnet50", 128, "1n1g"), tmp_path, extra_args=["--dtype=fp16"])[0]
    assert rc != 0 and "TypeError: data type 'fp16' not understood" in log
    assert "Speed:" not in log


def test_mxnet_bert_one_data_file_for_two_workers_fails_the_assert(tmp_path):
    one = standin_data_dir() / "part-000.npy"
    rc, log = _run("mxnet_bert", _cell("mxnet_bert", 32, "1n2g"), tmp_path, data=str(one))[0]
    assert rc != 0
    assert ("AssertionError: The number of training text files must be no less than the number of "
            f"workers/partitions (2). Only 1 files at {one} are found.") in log


def test_mxnet_bert_default_data_is_every_shard_and_counts_them(tmp_path):
    rc, log = _run("mxnet_bert", _cell("mxnet_bert", 32, "1n2g"), tmp_path)[0]
    assert rc == 0 and "INFO:root:64 files are found." in log


def test_mxnet_bert_without_data_trains_nothing_and_exits_0(tmp_path):
    """gluon-nlp builds the model and skips training when --data is unset: no step line, status 0;
    dlperf's gate then refuses the trial (no iteration line), never the configured speed."""
    from dlperf_tasks.frameworks._lines import read_log
    from dlperf_tasks.core.model import Trial, Window
    from dlperf_tasks.measure.validity import gate

    script = ROOTFS / "workspace" / "gluon-nlp" / "scripts" / "bert" / "run_pretraining.py"
    log = tmp_path / "node0.log"
    with open(log, "wb") as fh:
        rc = subprocess.run([sys.executable, str(script), "--total_batch_size", "32", "--num_steps", "120",
                             "--dtype", "float32"], stdout=fh, stderr=subprocess.STDOUT, timeout=60,
                            env={"PYTHONPATH": str(DIST), "PATH": "/usr/bin:/bin", **PATCHED},
                            cwd=tmp_path).returncode
    text = log.read_text()
    assert rc == 0 and "Namespace(" in text and "[step " not in text
    f, cell = get("mxnet_bert"), _cell("mxnet_bert", 32, "1n1g")
    res = gate(f, Trial(cell, 1), f.parse(read_log(str(log))), Window(20, 100), exit_codes={"node1": 0})
    assert not res.valid and "no '[step N]" in res.reason


def test_mxnet_bert_large_model_trains_slower(tmp_path):
    f = get("mxnet_bert")
    cell = _cell("mxnet_bert", 32, "1n1g")
    values = []
    for model in ("bert_12_768_12", "bert_24_1024_16"):
        rc, log = _run("mxnet_bert", cell, tmp_path, model=model)[0]
        assert rc == 0
        parsed = f.parse(log.splitlines(keepends=True))
        values.append(f.trial_metric(parsed, cell, cell.window).value)
    assert values[0] == 100.0 and abs(values[1] - 33.33) < 0.2, values


def test_tensorflow_dtype_float16_is_not_in_the_enum(tmp_path):
    rc, log = _run("tensorflow_bert", _cell("tensorflow_bert", 32, "1n1g"), tmp_path, extra_args=["--dtype=float16"])[0]
    assert rc == 1
    assert "FATAL Flags parsing error: flag --dtype=float16: value should be one of <fp16|bf16|fp32>" in log


def test_tensorflow_without_input_files_fails_like_r2_3(tmp_path):
    script = ROOTFS / "workspace" / "models" / "official" / "nlp" / "bert" / "run_pretraining.py"
    out = subprocess.run([sys.executable, str(script), f"--bert_config_file={BASE_CONFIG}", "--num_gpus=1",
                          "--train_batch_size=32", "--num_steps_per_epoch=20", "--num_train_epochs=1"],
                         capture_output=True, text=True, timeout=60, cwd=tmp_path,
                         env={"PYTHONPATH": str(DIST), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 1
    assert "AttributeError: 'NoneType' object has no attribute 'split'" in out.stderr
    assert "Train Step" not in out.stderr


def test_patch_flags_exist_only_when_the_applier_ran(tmp_path):
    """Unpatched gluon-cv f9a8a28 has no --num-batches and gluon-nlp 7b7bf60 requires --data_eval: the
    stand-in accepts the suites' commands only after dlperf's applier patched the scripts."""
    unpatched = {"DLPERF_PATCHES_APPLIED": ""}
    rc, log = _run("mxnet_resnet50", _cell("mxnet_resnet50", 128, "1n1g"), tmp_path, env=unpatched)[0]
    assert rc == 2 and "train_horovod.py: error: unrecognized arguments: --num-batches=120" in log
    rc, log = _run("mxnet_bert", _cell("mxnet_bert", 32, "1n1g"), tmp_path, env=unpatched)[0]
    assert rc == 2 and "error: the following arguments are required: --data_eval" in log


def test_the_applier_runs_in_front_of_the_real_command_on_the_overlay(tmp_path):
    """The suite's command started through the applier (as on a node): the overlay's scripts carry the
    patches' marks (an image built with them), so nothing is rewritten and the run parses back."""
    from dlperf_tasks.catalog import patches
    from dlperf_tasks.catalog.loader import load_suite
    from dlperf_tasks.frameworks.base import LaunchSpec
    from tests.unit.test_standin import _nodes, _start

    suite = load_suite("mxnet-resnet50")
    cell = _cell("mxnet_resnet50", 128, "1n1g")
    settings = {"env": {"PYTHONPATH": str(DIST), "DLPERF_STANDIN_TIME_SCALE": "0.002", "DLPERF_STANDIN_SPEED": "300"},
                "python": sys.executable, "node_files_dir": str(patches.applier().__file__.rsplit("/", 1)[0])}
    f = get("mxnet_resnet50")
    from dlperf_tasks.core.model import Trial

    spec = f.launch(Trial(cell, 1), 0, _nodes(1, 1), settings)
    wrapped = LaunchSpec(argv=patches.wrap(suite, spec.argv, spec.workdir, settings), env=spec.env,
                         workdir=spec.workdir)
    root = wrapped.argv[wrapped.argv.index("--root") + 1]
    assert root == "/workspace/gluon-cv"
    wrapped.argv[wrapped.argv.index("--root") + 1] = str(ROOTFS / "workspace" / "gluon-cv")
    before = (ROOTFS / "workspace/gluon-cv/scripts/classification/imagenet/train_horovod.py").read_bytes()
    log = tmp_path / "node0.log"
    assert _start(wrapped, log).wait(timeout=120) == 0, log.read_text()[-2000:]
    text = log.read_text()
    assert "dlperf-patch: gluon-cv-f9a8a28-dlperf-rn50.diff already applied" in text
    parsed = f.parse(text.splitlines(keepends=True))
    assert f.trial_metric(parsed, cell, cell.window).value == 300.0
    assert (ROOTFS / "workspace/gluon-cv/scripts/classification/imagenet/train_horovod.py").read_bytes() == before


def test_a_log_that_trained_another_precision_is_invalid_with_the_reason(tmp_path):
    """What the stand-in prints follows the launched precision (Namespace dtype, DLE's fp16), and the
    gate compares it with the cell: a run of the wrong precision never passes as the cell's number."""
    from dlperf_tasks.core.model import Trial
    from dlperf_tasks.measure.validity import gate

    for fw, cell, extra, want in (
            ("mxnet_bert", _cell("mxnet_bert", 32, "1n1g", "amp"), ["--dtype", "float32"],
             "log's dtype=float32 (gluon-nlp Namespace line) trains fp32, the cell's precision is amp"),
            ("mxnet_resnet50", _cell("mxnet_resnet50", 128, "1n1g", "fp32"), ["--dtype=float16"],
             "log's dtype=float16 (gluon-cv Namespace line) trains amp, the cell's precision is fp32"),
            ("pytorch_bert", _cell("pytorch_bert", 32, "1n1g", "fp32"), ["--fp16"],
             "trains amp, the cell's precision is fp32")):
        rc, log = _run(fw, cell, tmp_path, extra_args=extra)[0]
        assert rc == 0, log[-500:]
        f = get(fw)
        res = gate(f, Trial(cell, 1), f.parse(log.splitlines(keepends=True)), cell.window, exit_codes={"node1": 0})
        assert not res.valid and want in res.reason, (fw, res.reason)
