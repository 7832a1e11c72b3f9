"""Bad input: malformed suite YAML files and unknown suites ("malformed catalog YAML",
"unknown topology or suite").

Every case goes through the CLI entry point ``dlperf catalog check FILE`` / ``dlperf plan SUITE``
(``dlperf_tasks.cli.main``, in process) and, for the Airflow side, through ``list_suites(errors=[])``
which the DAG factory uses. Asserted each time: exit status 2, the message names the file, the
line and the key path (``layouts[2].dp``), no traceback, and a good file next to a bad one is
still checked.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from dlperf_tasks.catalog.loader import BUILTIN_DIR, list_suites, load_suite
from dlperf_tasks.cli import main
from dlperf_tasks.core.errors import CatalogError


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    """Run ``dlperf ARGV`` in process; argparse usage errors (SystemExit) count as exit codes."""
    try:
        rc = main(list(argv))
    except SystemExit as exc:
        rc = exc.code
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return rc, out, err


def builtin(name: str) -> dict:
    return yaml.safe_load((BUILTIN_DIR / f"{name}.yaml").read_text())


def write(tmp_path: Path, data, name: str) -> Path:
    """``data`` (a dict, dumped as YAML, ``id`` set to the file name) or raw text/bytes."""
    p = tmp_path / f"{name}.yaml"
    if isinstance(data, dict):
        data = dict(data, id=name)
        p.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
    elif isinstance(data, bytes):
        p.write_bytes(data)
    else:
        p.write_text(data)
    return p


def line_of(path: Path, needle: str) -> int:
    return next(i for i, t in enumerate(path.read_text().splitlines(), 1) if needle in t)


# ------------------------------------------------------------------------- syntax / encoding
SMOKE_TEXT = (BUILTIN_DIR / "smoke.yaml").read_text()

SYNTAX_CASES = {
    # name: (file content, expected line, words)
    "unclosed_flow_list": (SMOKE_TEXT.replace("topologies: [1n1g, 1n2g]", "topologies: [1n1g, 1n2g"),
                           None, "malformed YAML"),
    "tab_indentation": (SMOKE_TEXT.replace("  python: python3", "\tpython: python3"), None, "malformed YAML"),
    "duplicate_key": (SMOKE_TEXT + "trials: 9\n", None, "trials: duplicate key (first defined on line"),
    "empty_file": ("", None, "file is empty"),
    "only_a_comment": ("# nothing here\n", None, "file is empty"),
    "top_level_list": ("- id: x\n- framework: y\n", 1, "a suite file must be a mapping (got list)"),
    "top_level_scalar": ("just some text\n", 1, "a suite file must be a mapping (got str)"),
    "binary_garbage": (b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe garbage", None, "not UTF-8"),
    "unclosed_quote": (SMOKE_TEXT.replace("model: bert-tiny", "model: 'bert-tiny"), None, "malformed YAML"),
    "yaml_python_tag": (SMOKE_TEXT.replace("model: bert-tiny", "model: !!python/object/apply:os.system [id]"),
                        None, "malformed YAML"),
}


@pytest.mark.parametrize("case", sorted(SYNTAX_CASES))
def test_unparsable_suite_file_names_file_and_line(tmp_path, capsys, case):
    text, line, words = SYNTAX_CASES[case]
    p = write(tmp_path, text.replace("id: smoke", f"id: {case}") if isinstance(text, str) else text, case)
    good = BUILTIN_DIR / "smoke.yaml"
    rc, out, err = cli(capsys, "catalog", "check", str(p), str(good))
    assert rc == 2
    assert err.startswith(str(p)), err
    assert words in err, err
    if line is not None:
        assert err.startswith(f"{p}:{line}:"), err
    assert f"{good}: ok (smoke" in out  # the good file next to it is still checked


# ------------------------------------------------------------------------- shape: types, keys
def _mut(base: str, fn) -> dict:
    d = builtin(base)
    fn(d)
    return d


TYPE_CASES = {
    # name: (suite dict, key path in the message, words)
    "trials_is_text": (_mut("smoke", lambda d: d.update(trials="seven")), "trials", "is not of type 'integer'"),
    "trials_is_float": (_mut("smoke", lambda d: d.update(trials=2.5)), "trials", "is not of type 'integer'"),
    "trials_zero": (_mut("smoke", lambda d: d.update(trials=0)), "trials", "must be >= 1"),
    "warmup_negative": (_mut("smoke", lambda d: d["window"].update(warmup=-1)), "window.warmup", "must be >= 0"),
    "measure_text": (_mut("smoke", lambda d: d["window"].update(measure="100")), "window.measure",
                     "is not of type 'integer'"),
    "batch_size_text": (_mut("smoke", lambda d: d.update(batch_sizes=[8, "big"])), "batch_sizes",
                        "must be a list of positive integers"),
    "batch_size_zero": (_mut("smoke", lambda d: d.update(batch_sizes=[0])), "batch_sizes[0]", "must be >= 1"),
    "batch_size_negative": (_mut("smoke", lambda d: d.update(batch_sizes=[-32])), "batch_sizes[0]",
                            "must be >= 1"),
    "topologies_not_a_list": (_mut("smoke", lambda d: d.update(topologies="1n1g")), "topologies",
                              "is not of type 'array'"),
    "topology_malformed": (_mut("smoke", lambda d: d.update(topologies=["1n1g", "0n8g"])), "topologies[1]",
                           "invalid topology '0n8g'"),
    "topology_reversed": (_mut("smoke", lambda d: d.update(topologies=["8g1n"])), "topologies[0]",
                          "invalid topology"),
    "topology_duplicate": (_mut("smoke", lambda d: d.update(topologies=["1n1g", "1n1g"])), "topologies[1]",
                           "duplicate topology"),
    "precision_unknown": (_mut("smoke", lambda d: d.update(precisions=["fp8"])), "precisions[0]",
                          "unknown precision 'fp8'"),
    "framework_unknown": (_mut("smoke", lambda d: d.update(framework="caffe")), "framework",
                          "unknown framework 'caffe'"),
    "image_is_number": (_mut("mxnet-bert", lambda d: d["container"].update(image=5)), "container.image",
                        "is not of type 'string'"),
    "env_value_is_list": (_mut("smoke", lambda d: d.update(env={"A": [1, 2]})), "env.A", "is not of type"),
    "hang_longer_than_timeout": (_mut("smoke", lambda d: d.update(hang_timeout_s=5000, timeout_s=100)),
                                 "hang_timeout_s", "is larger than timeout_s"),
    "xla_text": (_mut("smoke", lambda d: d.update(xla=["yes"])), "xla[0]", "is not of type 'boolean'"),
    "unknown_top_level_key": (_mut("smoke", lambda d: d.update(trails=3)), "(top level)",
                              "unknown key(s) 'trails'"),
    "unknown_container_key": (_mut("mxnet-bert", lambda d: d["container"].update(gpus_all=True)), "container",
                              "unknown key(s) 'gpus_all'"),
    "unknown_layout_key": (_mut("megatron-gpt", lambda d: d["layouts"][0].update(tp=2)), "layouts[0]",
                           "unknown key(s) 'tp'"),
    "missing_required_key": (_mut("smoke", lambda d: d.pop("window")), "(top level)",
                             "'window' is a required property"),
}


@pytest.mark.parametrize("case", sorted(TYPE_CASES))
def test_wrong_type_or_unknown_key_names_file_line_and_key(tmp_path, capsys, case):
    data, key, words = TYPE_CASES[case]
    name = "megatron-x" if data.get("layouts") else case.replace("_", "-")
    p = write(tmp_path, data, name)
    rc, _, err = cli(capsys, "catalog", "check", str(p))
    assert rc == 2
    lines = [x for x in err.splitlines() if f": {key}" in x and words in x]
    assert lines, err
    assert lines[0].startswith(f"{p}:"), err
    line_no = lines[0][len(str(p)) + 1:].split(":", 1)[0]
    assert line_no.isdigit() and 1 <= int(line_no) <= len(p.read_text().splitlines())


# ------------------------------------------------------------------------- Megatron layouts
def _layout(case_idx: int, **changes) -> dict:
    d = builtin("megatron-gpt")
    d["layouts"][case_idx].update(changes)
    return d


LAYOUT_CASES = {
    "world_size_mismatch": (_layout(2, dp=8), "layouts[2] (DP_16x1x1_32_1536x16)",
                            "dp*mp*pp = 8 != nodes*gpus = 16"),
    "pp_does_not_divide_layers": (_layout(14, num_layers=18), "layouts[14] (DP_PP_8x1x4_512_1536x16)",
                                  "pp = 4 does not divide num_layers = 18"),
    "mp_does_not_divide_heads": (_layout(5, num_heads=12), "layouts[5] (MP_1x8x1_16_1536x16)",
                                 "mp = 8 does not divide num_heads = 12"),
    "global_batch_not_divisible": (_layout(0, global_batch=3, micro_batch_times_dp=2),
                                   "layouts[0] (DP_1x1x1_2_1536x16)",
                                   "global_batch = 3 is not divisible by micro_batch*dp = 2"),
    "accumulation_steps_wrong": (_layout(14, accumulation_steps=8), "layouts[14] (DP_PP_8x1x4_512_1536x16)",
                                 "accumulation_steps = 8 != global_batch/(micro_batch*dp) = 32"),
    "zero_gpus": (_layout(0, gpus=0), "layouts[0].gpus (DP_1x1x1_2_1536x16)", "gpus = 0 must be >= 1"),
    "duplicate_case": (_layout(1, case="DP_1x1x1_2_1536x16"), "layouts[1]", "duplicate case 'DP_1x1x1_2_1536x16'"),
    "unknown_group": (_layout(0, group="TP"), "layouts[0].group", "is not one of"),
}


@pytest.mark.parametrize("case", sorted(LAYOUT_CASES))
def test_inconsistent_megatron_layout_names_the_case(tmp_path, capsys, case):
    data, key, words = LAYOUT_CASES[case]
    p = write(tmp_path, data, "megatron-gpt")
    rc, _, err = cli(capsys, "catalog", "check", str(p))
    assert rc == 2
    match = [x for x in err.splitlines() if f": {key}" in x and words in x]
    assert match and match[0].startswith(f"{p}:"), err


def test_layouts_on_a_non_megatron_suite_are_refused(tmp_path, capsys):
    d = builtin("mxnet-bert")
    d["layouts"] = builtin("megatron-gpt")["layouts"][:1]
    p = write(tmp_path, d, "mxnet-bert")
    rc, _, err = cli(capsys, "catalog", "check", str(p))
    assert rc == 2 and "layouts: layouts are only meaningful for Megatron frameworks" in err


def test_every_problem_of_a_file_is_reported_at_once(tmp_path, capsys):
    d = builtin("smoke")
    d.update(trials=0, precisions=["fp8"], topologies=["2x8"], framework="nope")
    p = write(tmp_path, d, "many")
    rc, _, err = cli(capsys, "catalog", "check", str(p))
    assert rc == 2
    for words in ("trials = 0", "unknown precision 'fp8'", "invalid topology '2x8'", "unknown framework 'nope'"):
        assert words in err, err
    assert all(x.startswith(f"{p}:") for x in err.strip().splitlines())


# ------------------------------------------------------------------------- values that reach a shell
INJECTION = ["; rm -rf /", "$(id)", "`id`", "../../etc/passwd", "a\nb", "a\x00b", "' or '1'='1", '"; id; "']

#: (key path in the YAML, setter, key path in the message); each value below must be refused there
INJECTABLE = {
    "container.image": (lambda d, v: d["container"].update(image="nvcr.io/nvidia/mxnet:20.03-py3" + v),
                        "container.image"),
    "container.mounts": (lambda d, v: d["container"].update(mounts=["/data:/data" + v]), "container.mounts[0]"),
    "container.devices": (lambda d, v: d["container"].update(devices=["/dev/infiniband" + v]),
                          "container.devices[0]"),
    "container.ulimits": (lambda d, v: d["container"].update(ulimits=["memlock=-1" + v]), "container.ulimits[0]"),
    "container.cap_add": (lambda d, v: d["container"].update(cap_add=["IPC_LOCK" + v]), "container.cap_add[0]"),
    "container.shm_size": (lambda d, v: d["container"].update(shm_size="16g" + v), "container.shm_size"),
    "upstream.repo": (lambda d, v: d["upstream"].update(repo="https://github.com/dmlc/gluon-nlp" + v),
                      "upstream.repo"),
    "upstream.commit": (lambda d, v: d["upstream"].update(commit="7b7bf60259e28b3bf1f4d70569a7e5c18e2f4b3e" + v),
                        "upstream.commit"),
    "upstream.workdir": (lambda d, v: d["upstream"].update(workdir="scripts/bert" + v), "upstream.workdir"),
    "model": (lambda d, v: d.update(model="bert-base" + v), "model"),
    "dag": (lambda d, v: d.update(dag="mxnet" + v), "dag"),
    "topologies": (lambda d, v: d.update(topologies=["1n8g" + v]), "topologies[0]"),
    "env name": (lambda d, v: d.update(env={"NCCL_DEBUG" + v: "INFO"}), "env."),
}


def _refused(tmp_path: Path, capsys, setter, value: str) -> str:
    d = builtin("mxnet-bert")
    setter(d, value)
    p = write(tmp_path, d, "mxnet-bert")
    rc, out, err = cli(capsys, "catalog", "check", str(p))
    assert rc == 2, out
    return err


#: fields that are absolute host/container paths or URLs written by the catalog's admin: '..' in
#: them is legal (a mount may say ``/data/../scratch:/x``; any host path can be mounted anyway) and
#: reaches docker/git as ONE argv word (tests/faults/test_bad_input_injection.py); every shell
#: metacharacter, quote and control character is still refused there.
DOTDOT_ALLOWED = {"container.mounts", "container.devices", "upstream.repo"}


@pytest.mark.parametrize("field", sorted(INJECTABLE))
def test_injection_strings_in_suite_fields_are_refused_naming_the_key(tmp_path, capsys, field):
    setter, key = INJECTABLE[field]
    for value in INJECTION:
        if value.startswith("../") and field in DOTDOT_ALLOWED:
            continue
        err = _refused(tmp_path, capsys, setter, value)
        assert f": {key}" in err, (value, err)


@pytest.mark.parametrize("value", ["a\nb", "a\x00b", "a\rb", "a\x1b[2Jb"])
def test_control_characters_are_refused_even_in_free_text_launcher_args(tmp_path, capsys, value):
    """Launcher args and env values are free text (see test_bad_input_injection.py), but control
    characters never are: they would break log lines, reports and the remote job wrapper."""
    for setter, key in [(lambda d, v: d["launcher"].update(extra_args=["--ok", v]), "launcher.extra_args[1]"),
                        (lambda d, v: d.update(env={"NCCL_DEBUG": v}), "env.NCCL_DEBUG")]:
        err = _refused(tmp_path, capsys, setter, value)
        assert f": {key}: contains control character" in err, err


def test_suite_id_must_match_the_file_name(tmp_path, capsys):
    d = builtin("smoke")
    p = tmp_path / "smoke2.yaml"
    p.write_text(yaml.safe_dump(dict(d, id="../../etc/passwd")))
    rc, _, err = cli(capsys, "catalog", "check", str(p))
    assert rc == 2 and f"{p}:" in err and ": id: " in err


# ------------------------------------------------------------------------- unknown / hostile suite names
@pytest.mark.parametrize("name", ["no-such-suite", "mxnet-bert; id", "$(id)", "`id`", "mxnet-bert\nsmoke", "\x00"])
def test_unknown_suite_is_named_and_known_suites_listed(capsys, name):
    rc, _, err = cli(capsys, "plan", name)
    assert rc == 2
    assert err.startswith("dlperf: error: ")
    assert ("unknown suite " + repr(name)) in err or "cannot read suite file" in err, err
    if "unknown suite" in err:
        assert "known suites: " in err and "mxnet-bert" in err


@pytest.mark.parametrize("path", ["../../etc/passwd", "/etc/hostname", "/nonexistent/x.yaml", "/tmp"])
def test_suite_path_outside_the_catalog_is_checked_like_any_suite_file(capsys, path):
    """A path reads that file and validates it: nothing from it is used unless it is a valid suite."""
    rc, _, err = cli(capsys, "plan", path)
    assert rc == 2 and err.startswith("dlperf: error: ")
    assert path.split("/")[-1] in err or path in err


def test_catalog_dir_that_does_not_exist_is_named(capsys, tmp_path, monkeypatch):
    rc, _, err = cli(capsys, "plan", "smoke", "--catalog-dir", str(tmp_path / "missing; id"))
    assert rc == 2 and "missing; id" in err and "is not a directory" in err
    monkeypatch.setenv("DLPERF_CATALOG_PATH", str(tmp_path / "$(id)"))
    rc, _, err = cli(capsys, "catalog")
    assert rc == 2 and "$(id)" in err and "DLPERF_CATALOG_PATH" in err


def test_a_broken_site_suite_does_not_hide_the_others(tmp_path, monkeypatch):
    """What the DAG factory does: a broken file in DLPERF_CATALOG_PATH is reported (file + key),
    every other suite still loads, so one bad YAML cannot take all DAGs down."""
    write(tmp_path, _mut("smoke", lambda d: d.update(trials="x")), "site-broken")
    write(tmp_path, builtin("smoke"), "site-good")
    monkeypatch.setenv("DLPERF_CATALOG_PATH", str(tmp_path))
    errors: list[CatalogError] = []
    ids = [s.id for s in list_suites(errors=errors)]
    assert "site-good" in ids and "mxnet-bert" in ids and "site-broken" not in ids
    (err,) = errors
    assert str(err).startswith(str(tmp_path / "site-broken.yaml") + ":") and ": trials: " in str(err)
    with pytest.raises(CatalogError, match="site-broken.yaml"):
        load_suite("site-broken")


# ------------------------------------------------------------------------- one broken suite, one DAG
def _dagbag(monkeypatch, catalog_dir: Path):
    from airflow.dag_processing.dagbag import DagBag

    monkeypatch.setenv("DLPERF_CATALOG_PATH", str(catalog_dir))
    return DagBag(dag_folder=str(Path(__file__).resolve().parents[2] / "dags"))


ALL_DAGS = {"dlperf_mxnet", "dlperf_pytorch", "dlperf_tensorflow", "dlperf_megatron", "dlperf_smoke"}


def test_a_broken_site_suite_hides_only_itself(tmp_path, monkeypatch, airflow_home):
    """Real DagBag over dags/: `trials: x` in a site suite of the smoke group used to make the
    factory raise for every DAG, then for dlperf_smoke (a built-in DAG lost to a site
    file); now every DAG loads (the good site suite's too) and dags/dlperf_suite_errors.py alone
    is the import error, naming file, line and key."""
    write(tmp_path, _mut("smoke", lambda d: d.update(trials="x")), "site-broken")
    write(tmp_path, _mut("smoke", lambda d: d.update(dag="site")), "site-good")
    bag = _dagbag(monkeypatch, tmp_path)
    assert set(bag.dag_ids) == ALL_DAGS | {"dlperf_site"}, bag.import_errors
    assert [t.task_id for t in bag.dags["dlperf_smoke"].tasks]  # the built-in group is whole
    (where, err), = bag.import_errors.items()
    assert where.endswith("dags/dlperf_suite_errors.py")
    assert f"{tmp_path / 'site-broken.yaml'}:" in err and ": trials: " in err and "left out until fixed" in err
    assert "Traceback" not in err.split("CatalogError", 1)[-1]


def test_a_broken_override_of_a_builtin_suite_keeps_the_builtin_one(tmp_path, monkeypatch, airflow_home):
    """A site file that overrides mxnet-bert and cannot even be parsed: dlperf_mxnet still loads,
    running the built-in mxnet-bert, and the import error says so (it used to hide dlperf_mxnet)."""
    (tmp_path / "mxnet-bert.yaml").write_text("id: mxnet-bert\nframework: [unclosed\n")
    bag = _dagbag(monkeypatch, tmp_path)
    assert set(bag.dag_ids) == ALL_DAGS
    (where, err), = bag.import_errors.items()
    assert where.endswith("dags/dlperf_suite_errors.py") and "malformed YAML" in err
    assert "the built-in suite mxnet-bert runs instead" in err


def test_a_broken_suite_of_unknown_group_is_reported_and_hides_nothing(tmp_path, monkeypatch, airflow_home):
    (tmp_path / "mystery.yaml").write_bytes(b"\xff\xfe not yaml")
    bag = _dagbag(monkeypatch, tmp_path)
    assert set(bag.dag_ids) == ALL_DAGS
    (where, err), = bag.import_errors.items()
    assert where.endswith("dags/dlperf_suite_errors.py") and "mystery.yaml" in err and "not UTF-8" in err


# ------------------------------------------------------------------------- hostile YAML
_LAUGHS = 'lol: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + "".join(
    f'l{i}: &{chr(98 + i)} [' + ",".join([f"*{chr(97 + i)}"] * 9) + "]\n" for i in range(8))
HOSTILE_YAML = {
    # name: (text, words in the error)
    "recursive_alias": ("id: hostile\nenv: &e {A: *e}\n", "recursive alias *e"),
    "recursive_alias_list": ("id: hostile\ntopologies: &t [1n1g, *t]\n", "recursive alias *t"),
    "depth_2000": ("id: hostile\nenv: " + "[" * 2000 + "]" * 2000 + "\n", "nesting deeper than 32 levels"),
    "depth_30000": ("id: hostile\nenv: " + "[" * 30000 + "]" * 30000 + "\n", "nesting deeper than 32 levels"),
    "depth_block": ("id: hostile\nenv:\n" + "".join("  " * (i + 1) + f"k{i}:\n" for i in range(60)),
                    "nesting deeper than 32 levels"),
    "int_5000_digits": (SMOKE_TEXT.replace("trials: 3", "trials: " + "9" * 5000), "number with 5000 digits"),
    "billion_laughs": ("id: hostile\n" + _LAUGHS * 7, "once aliases are expanded"),
    "huge_scalar": ("id: hostile\nmodel: '" + "x" * 20000 + "'\n", "a value of 20000 characters"),
    "huge_file": ("id: hostile\n" + "# padding\n" * 30000, "a suite file may have at most"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_YAML))
def test_hostile_yaml_is_a_clear_error_in_bounded_time_and_memory(tmp_path, case):
    """In a fresh process (the C loader used to segfault at depth 30000; billion laughs took 1.5 GB):
    exit 2, one `dlperf: error`-style line naming the file, no traceback, < 5 s, peak RSS < 200 MiB."""
    import subprocess
    import sys
    import time

    text, words = HOSTILE_YAML[case]
    assert "trials: 3" in SMOKE_TEXT
    p = tmp_path / "hostile.yaml"
    p.write_text(text)
    code = ("import sys\nfrom dlperf_tasks.cli import main\nrc = main(['catalog', 'check', sys.argv[1]])\n"
            "hwm = next(int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmHWM:'))\n"
            "print('HWM', hwm, file=sys.stderr)\nsys.exit(rc)\n")
    t0 = time.monotonic()
    res = subprocess.run([sys.executable, "-c", code, str(p)], capture_output=True, text=True, timeout=120,
                         cwd=Path(__file__).resolve().parents[2])
    took = time.monotonic() - t0
    assert res.returncode == 2, (res.returncode, res.stderr[-1500:])
    assert "Traceback" not in res.stderr and words in res.stderr and str(p) in res.stderr, res.stderr[-1500:]
    hwm_mib = int(res.stderr.rsplit("HWM", 1)[1].split()[0]) / 1024
    assert took < 5 + 10 and hwm_mib < 200, (took, hwm_mib)
