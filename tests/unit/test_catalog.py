"""Catalog: every built-in suite loads; every kind of broken suite file gives an error naming file, line and key."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml

from dlperf_tasks import frameworks
from dlperf_tasks.catalog import BUILTIN_DIR, list_suites, load_suite
from dlperf_tasks.catalog.validate import suite_to_dict
from dlperf_tasks.core.errors import CatalogError

SUITE_IDS = ["llama31-70b-megatron-bridge", "llama31-8b-megatron-bridge", "llama31-8b-torchtitan", "megatron-gpt", "mxnet-bert", "mxnet-resnet50", "pytorch-bert", "smoke", "tensorflow-bert"]


def test_every_builtin_suite_loads():
    suites = list_suites()
    assert [s.id for s in suites] == SUITE_IDS
    for s in suites:
        assert s.framework in frameworks.names()
        assert s.trials >= 1 and s.topologies and s.precisions
        assert Path(s.source).name == f"{s.id}.yaml"


def test_builtin_suites_pass_the_json_schema():
    """The loader reads an edited built-in suite's YAML without the JSON Schema pass (``dlperf catalog
    build`` runs it at install); this is where the tests run it, so a broken built-in suite still fails."""
    from dlperf_tasks.catalog.problems import Problems
    from dlperf_tasks.catalog.validate import _schema_problems
    from dlperf_tasks.catalog.yamlsrc import parse_yaml

    for sid in SUITE_IDS:
        path = BUILTIN_DIR / f"{sid}.yaml"
        data, lines = parse_yaml(path.read_text(), str(path))
        problems = Problems(str(path), lines)
        _schema_problems(data, problems)
        assert not problems.items, (sid, problems.items)
    # a user file still gets the schema (an unknown key is the schema's finding)
    bad = dict(yaml.safe_load((BUILTIN_DIR / "smoke.yaml").read_text()), no_such_key=1)
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "smoke.yaml"
        p.write_text(yaml.safe_dump(bad))
        with pytest.raises(CatalogError, match="no_such_key"):
            load_suite(str(p))


def test_seed_facts_are_held():
    bert = load_suite("mxnet-bert")
    assert bert.container.image == "nvcr.io/nvidia/mxnet:20.03-py3"
    assert bert.upstream.commit == "7b7bf60259e28b3bf1f4d70569a7e5c18e2f4b3e"
    assert bert.trials == 7 and bert.batch_sizes == (32, 24) and bert.precisions == ("fp32",)
    assert [t.name for t in bert.topologies] == ["1n1g", "1n8g", "2n8g", "4n8g"]
    assert "/usr/local/mpi/bin/" in bert.env["PATH"]
    (patch,) = bert.upstream.patches  # DLPerf's four changes, one diff applied on the nodes (catalog/patches.py)
    assert patch.file == "gluon-nlp-7b7bf60-dlperf-bert.diff" and "+                end_of_batch = True" in \
        bert.node_files()[patch.file].decode()
    assert bert.container.devices == ("/dev/infiniband",) and bert.container.cap_add == ("IPC_LOCK",)

    rn50 = load_suite("mxnet-resnet50")
    assert rn50.batch_sizes_for("fp32") == (128,) and rn50.batch_sizes_for("amp") == (256,)
    assert rn50.upstream.commit == "f9a8a284b8222794bc842453e2bebe5746516048" and rn50.trials == 5

    pt = load_suite("pytorch-bert")
    assert pt.container.image == "nvcr.io/nvidia/pytorch:20.06-py3"
    assert pt.upstream.commit.startswith("5cc03caa")
    assert pt.batch_sizes_for("fp32") == (32, 48) and pt.batch_sizes_for("amp") == (64, 96)

    tf = load_suite("tensorflow-bert")
    assert tf.upstream.ref == "r2.3.0" and tf.xla == (False, True)
    assert tf.batch_sizes_for("amp") == (64, 96, 128)
    from dlperf_tasks.core.topology import Topology

    assert tf.excluded(128, "amp", False, Topology(1, 1)) and not tf.excluded(128, "amp", True, Topology(1, 1))
    assert tf.env_for(Topology(2, 8))["NCCL_DEBUG"] == "INFO" and "NCCL_DEBUG" not in tf.env_for(Topology(1, 8))

    smoke = load_suite("smoke")
    assert smoke.container is None and smoke.framework == "smoke_bert" and smoke.dag == "smoke"
    assert [t.name for t in smoke.topologies] == ["1n1g", "1n2g"] and smoke.trials == 3


def test_megatron_has_the_18_seed_cases():
    s = load_suite("megatron-gpt")
    assert s.container.image == "nvcr.io/nvidia/pytorch:20.12-py3"
    assert s.upstream.commit == "8aa4619f2b2a57b5725026a50ebd2b15e8121482"
    assert len(s.layouts) == 18
    for topo, lay in s.layouts:
        assert lay.dp * lay.mp * lay.pp == topo.world_size, lay.case
        assert lay.global_batch % (lay.micro_batch * lay.dp) == 0
    cases = {lay.case: (topo, lay) for topo, lay in s.layouts}
    assert [g for g in ("DP", "MP", "2D", "PP") if any(l.group == g for _, l in s.layouts)] == ["DP", "MP", "2D", "PP"]
    # rows whose heads differ from the case-name suffix are copied as in the seed
    topo, lay = cases["MP_1x16x1_16_3072x16"]
    assert (topo.name, lay.num_heads, lay.num_layers, lay.hidden_size) == ("2n8g", 32, 16, 3072)
    topo, lay = cases["2D_PP_2x8x2_512_2304x24"]
    assert (topo.name, lay.dp, lay.mp, lay.pp, lay.accumulation_steps) == ("4n8g", 2, 8, 2, 32)
    assert cases["MP_1x1x1_8_768x12"][1].num_heads == 12


def test_show_roundtrips_through_yaml(tmp_path):
    for sid in SUITE_IDS:
        d = suite_to_dict(load_suite(sid))
        f = tmp_path / f"{sid}.yaml"
        f.write_text(yaml.safe_dump(d, sort_keys=False))
        again = load_suite(str(f))
        assert suite_to_dict(again) == d


def test_loading_is_fast_and_cached():
    list_suites()
    t0 = time.perf_counter()
    for _ in range(20):
        list_suites()
    assert (time.perf_counter() - t0) / 20 < 0.05


# ---- broken files -----------------------------------------------------------------------

def _base() -> dict:
    return yaml.safe_load((BUILTIN_DIR / "smoke.yaml").read_text())


def _write(tmp_path: Path, data, name="bad.yaml") -> Path:
    d = dict(data)
    if name.endswith(".yaml") and isinstance(d, dict) and "id" in d:
        d["id"] = name[:-5]
    p = tmp_path / name
    p.write_text(yaml.safe_dump(d, sort_keys=False) if not isinstance(data, str) else data)
    return p


def _error(path: Path) -> str:
    with pytest.raises(CatalogError) as ei:
        load_suite(str(path))
    return str(ei.value)


def _megatron() -> dict:
    return yaml.safe_load((BUILTIN_DIR / "megatron-gpt.yaml").read_text())


def test_megatron_world_size_mismatch(tmp_path):
    d = _megatron()
    d["layouts"][2]["dp"] = 8
    d["layouts"][2]["micro_batch_times_dp"] = 16
    d["layouts"][2]["accumulation_steps"] = 2
    msg = _error(_write(tmp_path, d, "megatron-gpt.yaml"))
    assert "megatron-gpt.yaml:" in msg
    assert "layouts[2] (DP_16x1x1_32_1536x16): dp*mp*pp = 8 != nodes*gpus = 16" in msg


def test_megatron_pp_must_divide_layers_and_batch_divisible(tmp_path):
    d = _megatron()
    d["layouts"][14]["num_layers"] = 18  # DP_PP_8x1x4 with pp 4
    d["layouts"][0]["global_batch"] = 3
    msg = _error(_write(tmp_path, d, "megatron-gpt.yaml"))
    assert "layouts[14] (DP_PP_8x1x4_512_1536x16): pp = 4 does not divide num_layers = 18" in msg
    assert "layouts[0] (DP_1x1x1_2_1536x16): global_batch = 3 is not divisible by micro_batch*dp = 2" in msg


def test_unknown_precision_points_at_line(tmp_path):
    d = _base()
    d["precisions"] = ["fp32", "bf8"]
    p = _write(tmp_path, d)
    msg = _error(p)
    line = next(i for i, text in enumerate(p.read_text().splitlines(), 1) if "bf8" in text)
    assert f"bad.yaml:{line}: precisions[1]: unknown precision 'bf8'" in msg


def test_topologies_sort_by_nodes_then_gpus():
    from dlperf_tasks.core.topology import Topology as T
    assert sorted([T(2, 1), T(1, 8), T(1, 1)]) == [T(1, 1), T(1, 8), T(2, 1)] and T(1, 8) <= T(1, 8)


def test_bad_topology_string(tmp_path):
    d = _base()
    d["topologies"] = ["1n1g", "2x8"]
    assert "topologies[1]: invalid topology '2x8'" in _error(_write(tmp_path, d))


def test_unknown_framework(tmp_path):
    d = _base()
    d["framework"] = "caffe_alexnet"
    msg = _error(_write(tmp_path, d))
    assert "framework: unknown framework 'caffe_alexnet'" in msg and "mxnet_bert" in msg


def test_negative_trials_and_window(tmp_path):
    d = _base()
    d["trials"] = -1
    d["window"] = {"warmup": -2, "measure": 0}
    msg = _error(_write(tmp_path, d))
    assert "trials: trials = -1 must be >= 1" in msg
    assert "window.warmup: warmup = -2 must be >= 0" in msg and "window.measure: measure = 0 must be >= 1" in msg


def test_malformed_yaml_has_line_number(tmp_path):
    p = tmp_path / "broken.yaml"
    p.write_text("id: broken\nframework: smoke_bert\nprecisions: [fp32\ntrials: 3\n")
    msg = _error(p)
    assert msg.startswith(f"{p}:") and "malformed YAML" in msg
    assert int(msg.split(":")[1]) in (3, 4)


def test_duplicate_key_is_an_error(tmp_path):
    p = tmp_path / "dup.yaml"
    text = (BUILTIN_DIR / "smoke.yaml").read_text().replace("id: smoke", "id: dup") + "trials: 9\n"
    p.write_text(text)
    msg = _error(p)
    assert "trials: duplicate key (first defined on line" in msg


def test_unknown_key_and_wrong_type(tmp_path):
    d = _base()
    d["trails"] = 3
    d["batch_sizes"] = "eight"
    msg = _error(_write(tmp_path, d))
    assert "unknown key(s) 'trails'" in msg
    assert "batch_sizes: must be a list of positive integers" in msg


def test_shell_unsafe_values_rejected(tmp_path):
    d = yaml.safe_load((BUILTIN_DIR / "mxnet-bert.yaml").read_text())
    d["container"]["image"] = "nvcr.io/nvidia/mxnet:20.03-py3\nrm -rf /"
    d["launcher"]["extra_args"] = ["--ok", "bad\x00arg"]
    d["env"]["BAD NAME"] = "x"
    msg = _error(_write(tmp_path, d, "mxnet-bert.yaml"))
    assert "container.image: contains control character '\\n'" in msg
    assert "launcher.extra_args[1]: contains control character '\\x00'" in msg


def test_invalid_image_mount_and_commit(tmp_path):
    d = yaml.safe_load((BUILTIN_DIR / "mxnet-bert.yaml").read_text())
    d["container"]["image"] = "nvcr.io/nvidia/mxnet:20.03 py3"
    d["container"]["mounts"] = ["/data"]
    d["upstream"]["commit"] = "7b7bf602"
    d["env"] = {"BAD NAME": "x"}
    msg = _error(_write(tmp_path, d, "mxnet-bert.yaml"))
    assert "container.image: invalid image reference" in msg
    assert "container.mounts[0]: invalid mount '/data'" in msg
    assert "upstream.commit: commit '7b7bf602' must be the full 40-hex-digit" in msg
    assert "env.BAD NAME: invalid environment variable name" in msg


def test_id_must_match_file_name(tmp_path):
    p = tmp_path / "other.yaml"
    p.write_text((BUILTIN_DIR / "smoke.yaml").read_text())
    assert "id: id 'smoke' must equal the file name 'other'" in _error(p)


def test_batch_sizes_per_precision_must_cover_precisions(tmp_path):
    d = _base()
    d["precisions"] = ["fp32", "amp"]
    d["batch_sizes"] = {"fp32": [8], "fp16": [0]}
    msg = _error(_write(tmp_path, d))
    assert "batch_sizes.fp16: precision 'fp16' is not in precisions" in msg
    assert "batch size 0 must be >= 1" in msg
    assert "no batch sizes for precision 'amp'" in msg


def test_empty_file(tmp_path):
    p = tmp_path / "empty.yaml"
    p.write_text("")
    assert "empty.yaml: file is empty" in _error(p)


def test_unknown_suite_lists_known():
    with pytest.raises(CatalogError, match="unknown suite 'nope'; known suites: .*mxnet-bert"):
        load_suite("nope")


def test_user_catalog_dir_adds_and_overrides(tmp_path, monkeypatch):
    d = _base()
    d["trials"] = 9
    _write(tmp_path, d, "smoke.yaml")
    _write(tmp_path, dict(d, description="mine"), "my-smoke.yaml")
    monkeypatch.setenv("DLPERF_CATALOG_PATH", str(tmp_path))
    ids = [s.id for s in list_suites()]
    assert "my-smoke" in ids and ids.count("smoke") == 1
    assert load_suite("smoke").trials == 9  # the user's directory wins
    assert load_suite("my-smoke").description == "mine"


def test_broken_user_file_collected_not_fatal(tmp_path, monkeypatch):
    (tmp_path / "broken.yaml").write_text("id: [\n")
    monkeypatch.setenv("DLPERF_CATALOG_PATH", str(tmp_path))
    with pytest.raises(CatalogError):
        list_suites()
    errors: list = []
    suites = list_suites(errors=errors)
    assert len(suites) == len(SUITE_IDS) and len(errors) == 1 and "broken.yaml" in str(errors[0])


def test_catalog_path_must_be_a_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("DLPERF_CATALOG_PATH", str(tmp_path / "missing"))
    with pytest.raises(CatalogError, match="is not a directory"):
        list_suites()


def test_wrong_type_names_key(tmp_path):
    d = _base()
    d["trials"] = "three"
    d["container"] = {"image": "nvcr.io/nvidia/mxnet:20.03-py3", "sshd_port": 70000}
    msg = _error(_write(tmp_path, d))
    assert "trials: 'three' is not of type 'integer'" in msg
    assert "container.sshd_port: 70000 is greater than the maximum of 65535" in msg
