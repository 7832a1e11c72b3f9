"""The guard compares the whole built argument list with the pinned upstream entry point's argument
set (``frameworks/entry_flags.json``, read from upstream at the pinned commits, source named): a flag
the entry point does not define (``--bf16`` on Megatron 8aa4619) or an override that replaces the
model (``--model=resnet101_v1b`` appended to a ResNet-50 cell: the last value wins upstream) is
refused in one line before launch, on the launch path every runner takes (CLI sweep, DAG) and in
the dry run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dlperf_tasks.catalog import plan as P
from dlperf_tasks.catalog.loader import load_suite
from dlperf_tasks.cli import main
from dlperf_tasks.frameworks import get
from dlperf_tasks.frameworks.argcheck import ENTRY_POINTS
from dlperf_tasks.frameworks.preflight import LaunchGuardError
from dlperf_tasks.remote.local import launch_specs

CONTRACTS = Path(__file__).resolve().parents[2] / "docker/standin/rootfs/usr/lib/python3/dist-packages" \
    / "dlperf_standin_contracts"


@pytest.mark.parametrize("framework", sorted(ENTRY_POINTS))
def test_the_argument_sets_are_upstreams_at_the_pinned_commits(framework):
    """Two independent reads of upstream agree: the stand-in's contracts (every add_argument with
    type and choices, docker/standin/tools/gen_contracts.py) and the guard's flag sets."""
    doc = json.loads((CONTRACTS / f"{framework}.json").read_text())
    ep = ENTRY_POINTS[framework]
    assert set(ep["flags"]) == {f for a in doc["arguments"] for f in a["flags"]}
    assert doc["commit"] in ep["source"] and doc["repo"].split("github.com/")[1] in ep["source"]
    assert bool(ep["abbrev"]) == bool(doc.get("allow_abbrev", True))


def _refused(suite_id: str, extra: list[str], **cell) -> str:
    suite = load_suite(suite_id)
    trial = (P.plan(suite, cell) if cell else P.plan(suite)).trials[0].trial
    with pytest.raises(LaunchGuardError) as exc:
        launch_specs(trial, get(trial.cell.framework), {**dict(suite.launcher or {}), "extra_args": extra})
    msg = str(exc.value)
    assert "\n" not in msg and msg.startswith("pre-launch guard refused ")
    return msg


def test_an_override_that_replaces_the_model_is_refused():
    msg = _refused("mxnet-resnet50", ["--model=resnet101_v1b"])
    assert "--model=resnet101_v1b (the last value wins upstream) trains resnet101_v1b" in msg
    assert "resnet50-v1b" in msg


def test_megatron_counts_replaced_by_an_override_are_refused():
    msg = _refused("megatron-gpt", ["--num-layers", "48"])
    assert "--num-layers 48 (the last value wins upstream) replaces the cell's num_layers" in msg


@pytest.mark.parametrize("suite_id,flag", [("megatron-gpt", "--bf16"), ("mxnet-bert", "--no_such_flag"),
                                           ("pytorch-bert", "--bf16"), ("mxnet-resnet50", "--zzz")])
def test_a_flag_the_entry_point_does_not_define_is_refused(suite_id, flag):
    msg = _refused(suite_id, [flag])
    assert f"{flag} is a flag it does not define" in msg and "would stop at start" in msg


def test_an_ambiguous_abbreviation_is_refused_and_a_unique_one_accepted():
    assert "ambiguous abbreviation" in _refused("mxnet-resnet50", ["--use", "1"])
    suite = load_suite("mxnet-resnet50")
    trial = P.plan(suite).trials[0].trial
    launch_specs(trial, get("mxnet_resnet50"), {**dict(suite.launcher or {}), "extra_args": ["--mode", "hybrid"]})


def test_the_dry_run_refuses_in_one_line(tmp_path, monkeypatch, capsys):
    src = Path(load_suite("mxnet-resnet50").source).read_text()
    site = tmp_path / "catalog"
    site.mkdir()
    text = src.replace("id: mxnet-resnet50", "id: rn50-site").replace(
        "  batches_arg: --num-batches", "  batches_arg: --num-batches\n  extra_args: ['--model=resnet101_v1b']")
    (site / "rn50-site.yaml").write_text(text)
    monkeypatch.setenv("DLPERF_CATALOG_PATH", str(site))
    inv = tmp_path / "inv.yaml"
    inv.write_text("name: pod\ndefaults: {user: b, key_file: /nonexistent/k, gpus: 8, workdir: /var/tmp/d, "
                   "data_dir: /data, strict_host_key_checking: false}\nnodes:\n  - {name: gpu-a, host: 10.9.0.11}\n")
    rc = main(["sweep", "--dry-run", "--suite", "rn50-site", "--cluster", str(inv), "--topologies", "1n8g",
               "--trials", "1"])
    out = capsys.readouterr()
    assert rc == 0 and "Traceback" not in out.err  # the dry run lists every trial, a refused one as REFUSED
    lines = [l for l in out.out.splitlines() if "REFUSED: pre-launch guard refused" in l]
    assert len(lines) == 2 and all("--model=resnet101_v1b (the last value wins upstream)" in l for l in lines)
