"""Every built-in suite's commands match what upstream takes at the pinned commits, and
the guard before launch refuses a command that would train another model, precision, batch or data than
its cell, with one line, before any GPU time.

The upstream facts are the stand-in's contracts (``docker/standin/.../dlperf_standin_contracts``: every
``add_argument`` of the entry point at the pinned commit, with type, choices and required flags; flags a
source patch adds are marked ``patch``). Each command of every cell of every suite is parsed with that
contract (argparse, as the real script parses it): an unknown flag, a bad type or choice, a missing
required flag fails here, not on the GPUs.
"""

from __future__ import annotations

import dataclasses
import argparse
import contextlib
import io
import json
import sys

import pytest

from dlperf_tasks.catalog import plan as P
from dlperf_tasks.catalog.loader import load_suite
from dlperf_tasks.frameworks import get
from dlperf_tasks.frameworks.base import NodeSpec
from dlperf_tasks.frameworks.preflight import LaunchGuardError, check, script_flags
from dlperf_tasks.core.model import Trial
from dlperf_tasks.remote.local import launch_specs
from tests.unit.test_standin import DIST

SUITES = ["mxnet-bert", "mxnet-resnet50", "pytorch-bert", "tensorflow-bert", "megatron-gpt"]
FORMAT = {"mxnet_bert": "mxnet_bert", "mxnet_resnet50": "mxnet_resnet50", "pytorch_bert": "pytorch_bert",
          "tensorflow_bert": "tensorflow_bert", "megatron_gpt": "megatron_gpt"}


@pytest.fixture(scope="module")
def contract():
    sys.path.insert(0, str(DIST))
    try:
        import dlperf_standin_contract as C
    finally:
        sys.path.remove(str(DIST))
    return C


def _commands(suite_id):
    suite = load_suite(suite_id)
    seen = set()
    for pt in P.plan(suite).trials:
        cell = pt.trial.cell
        if cell in seen:
            continue
        seen.add(cell)
        fw = get(cell.framework)
        nodes = [NodeSpec(f"gpu{i}", f"10.9.0.{11 + i}", 8) for i in range(cell.topology.nodes)]
        for r in ([0] if fw.launch_mode == "mpi" else range(cell.topology.nodes)):
            yield suite, fw, pt.trial, fw.launch(pt.trial, r, nodes, dict(suite.launcher or {}))


@pytest.mark.parametrize("suite_id", SUITES)
def test_every_command_parses_with_the_upstream_contract_and_passes_the_guard(suite_id, contract, monkeypatch):
    from dlperf_tasks.catalog.patches import patch_files

    n = 0
    applied = patch_files(load_suite(suite_id))
    monkeypatch.setenv("DLPERF_PATCHES_APPLIED", ",".join(applied))  # what the applier exports on the node
    for suite, fw, trial, spec in _commands(suite_id):
        script = suite.launcher.get("script") or {"megatron_gpt": "pretrain_gpt.py", "mxnet_resnet50":
                                                  "train_horovod.py"}.get(fw.name, "run_pretraining.py")
        i = next(k for k, a in enumerate(spec.argv) if a.endswith(script))
        doc = contract.load(FORMAT[fw.name])
        args = spec.argv[i + 1:]
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            try:
                ns = contract.parse(FORMAT[fw.name], args, script)
            except SystemExit as exc:
                pytest.fail(f"{suite_id} {trial.id}: upstream {doc['repo']}@{doc.get('commit') or doc.get('ref')} "
                            f"refuses the command ({exc}): {err.getvalue().strip()}")
        assert isinstance(ns, argparse.Namespace)
        used_patches = {a["patch"] for a in doc["arguments"] if a.get("patch") and any(
            w == a["flags"][0] or w.startswith(a["flags"][0] + "=") for w in args)}
        # a flag outside upstream comes only from a patch the suite applies (catalog/patches.py)
        assert used_patches <= set(applied), (suite_id, used_patches)
        assert check(fw.name, trial.cell, spec.argv, suite.launcher) == [], (suite_id, trial.id)
        n += 1
    assert n >= 4


def _trial(suite_id, **cell_kw):
    suite = load_suite(suite_id)
    pt = P.plan(suite, cell_kw).trials[0] if cell_kw else P.plan(suite).trials[0]
    return suite, pt.trial


def _refused(suite_id, overrides, launcher_extra):
    suite, trial = _trial(suite_id, **overrides)
    launcher = {**dict(suite.launcher or {}), **launcher_extra}
    with pytest.raises(LaunchGuardError) as exc:
        launch_specs(trial, get(trial.cell.framework), launcher)
    msg = str(exc.value)
    assert "\n" not in msg and msg.startswith("pre-launch guard refused ")
    return msg


def test_mxnet_fp16_dtype_and_bert_large_model_are_refused():
    msg = _refused("mxnet-bert", {"topologies": "1n1g", "precisions": "fp32"}, {"extra_args": ["--dtype", "fp16"]})
    assert "--dtype fp16 is not a NumPy dtype name" in msg
    msg = _refused("mxnet-bert", {"topologies": "1n1g", "precisions": "fp32"}, {"model": "bert_24_1024_16"})
    assert "--model bert_24_1024_16 is BERT-large, the cell's model is bert-base" in msg
    msg = _refused("mxnet-resnet50", {"topologies": "1n1g", "precisions": "amp"}, {"extra_args": ["--dtype=float32"]})
    assert "--dtype says float32, the cell needs float16 (precision amp)" in msg


def test_mxnet_bert_one_data_file_for_many_workers_is_refused():
    msg = _refused("mxnet-bert", {"topologies": "1n8g"}, {"data": "/datasets/bert/part-000.npy"})
    assert "--data names 1 file(s) for 8 workers" in msg


def test_dle_own_config_is_bert_large_and_refused_for_a_bert_base_cell():
    msg = _refused("pytorch-bert", {"topologies": "1n1g", "precisions": "fp32"},
                   {"bert_config": None, "config_file": "/workspace/bert/bert_config.json"})
    assert "upstream repository's own bert_config.json (BERT-large" in msg


def test_tensorflow_precision_and_dtype_enum():
    msg = _refused("tensorflow-bert", {"topologies": "1n1g", "precisions": "fp32"}, {"extra_args": ["--dtype=float16"]})
    assert "--dtype=float16 is not one of fp16|bf16|fp32" in msg


def test_the_guard_reason_reaches_the_trial_without_starting_it(tmp_path):
    from dlperf_tasks.core.model import TrialStatus
    from dlperf_tasks.remote.local import run_trial

    suite, trial = _trial("mxnet-bert", topologies="1n1g", precisions="fp32")
    res = run_trial(trial, get("mxnet_bert"), {**dict(suite.launcher), "extra_args": ["--dtype", "fp16"]}, tmp_path)
    assert res.status == TrialStatus.LAUNCH_FAILED and "pre-launch guard refused" in res.reason
    assert not list(tmp_path.rglob("*.log"))  # nothing ran


def test_script_flags_reads_the_last_occurrence_like_argparse():
    argv = ["mpirun", "-np", "2", "python3", "run_pretraining.py", "--dtype", "float32", "--no_compute_acc",
            "--dtype=float16", "--data", "/d/*"]
    assert script_flags(argv, "run_pretraining.py") == {"dtype": "float16", "no_compute_acc": True, "data": "/d/*"}
    assert json.dumps(script_flags(["python3", "x.py"], "run_pretraining.py")) == "{}"


def test_a_cell_without_model_size_is_not_guessed():
    suite, trial = _trial("mxnet-bert", topologies="1n1g")
    cell = trial.cell
    odd = dataclasses.replace(cell, model="custom")
    assert check("mxnet_bert", odd, ["python3", "run_pretraining.py", "--model", "bert_24_1024_16",
                                     "--dtype", "float32", "--total_batch_size", str(cell.batch_size_per_device),
                                     "--data", "/d/*"], {}) == []
    assert Trial(cell, 1).cell == cell


def test_the_launch_table_leaves_nothing_open_and_names_real_tests():
    """docs/launch.md: every difference is fixed or declared (none open) and each test it cites exists."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    table = (root / "docs" / "launch.md").read_text()
    rows = [l for l in table.splitlines() if l.startswith("| ") and not l.startswith("| suite") and "---|" not in l]
    assert len(rows) >= 10
    assert not [r for r in rows if "**open**" in r], "an open row in docs/launch.md"
    for r in rows:
        status = r.rstrip(" |").rsplit(" | ", 1)[-1]
        assert re.match(r"(fixed|declared|kept|\*\*declared\*\*)", status), status[:80]
    for name in set(re.findall(r"(tests/(?:unit|integration)/test_\w+\.py|test_\w+\.py)", table)):
        path = root / name if name.startswith("tests/") else next(root.glob(f"tests/*/{name}"), None)
        assert path is not None and path.is_file(), name
    suites = {"mxnet-bert", "mxnet-resnet50", "pytorch-bert", "tensorflow-bert", "megatron-gpt"}
    assert suites <= {r.split(" | ")[0].lstrip("| ") for r in rows}
