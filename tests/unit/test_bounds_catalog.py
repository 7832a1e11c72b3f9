"""Every CLI override and numeric option is bounded (10**24, nan, inf refused in one
short line); a 100 kB argument or --catalog-dir is one clear line, not a traceback; a broken site
suite hides only itself, never a built-in suite or DAG group; `dlperf catalog check` warns when a
site suite runs privileged, passes devices or adds capabilities."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from dlperf_tasks.catalog.loader import BUILTIN_DIR, list_suites, suites_by_group
from dlperf_tasks.cli import main
from dlperf_tasks.core.errors import CatalogError, PlanError
from dlperf_tasks.catalog.plan import Overrides

HUGE = str(10 ** 24)


@pytest.mark.parametrize("field", ["batch_sizes", "trials", "warmup_iters", "measure_iters", "topologies"])
def test_every_plan_override_is_bounded(field):
    value = f"{HUGE}n8g" if field == "topologies" else HUGE
    with pytest.raises(PlanError) as exc:
        Overrides.from_dict({field: value})
    assert "\n" not in str(exc.value) and len(str(exc.value)) < 200
    with pytest.raises(PlanError) as exc:  # 5000 digits: no traceback, no 5000-character echo
        Overrides.from_dict({field: "9" * 5000 + ("n8g" if field == "topologies" else "")})
    assert len(str(exc.value)) < 200
    with pytest.raises(PlanError, match="more than 4096 items"):
        Overrides.from_dict({"batch_sizes": ",".join(["1"] * 5000)})


def _one_line_error(capsys, argv) -> str:
    try:
        rc = main(argv)
    except SystemExit as exc:  # argparse's own refusal
        rc = exc.code
    out, err = capsys.readouterr()
    assert rc == 2, (argv, out, err)
    last = err.strip().splitlines()[-1]  # argparse prints its usage first
    assert "Traceback" not in err and "error" in last and len(last) < 300, err[-600:]
    return err


@pytest.mark.parametrize("argv", [
    ["plan", "mxnet-bert", "--batch-sizes", HUGE], ["plan", "mxnet-bert", "--measure-iters", HUGE],
    ["plan", "mxnet-bert", "--warmup-iters", HUGE], ["plan", "mxnet-bert", "--trials", HUGE],
    ["plan", "mxnet-bert", "--topologies", f"{HUGE}n8g"], ["plan", "mxnet-bert", "--trials", "9" * 5000],
    ["sweep", "--suite", "smoke", "--retries", HUGE], ["sweep", "--suite", "smoke", "--cooldown", "1e309"],
    ["sweep", "--suite", "smoke", "--wait-for-nodes", "nan"], ["sweep", "--suite", "smoke", "--mpi-ssh-port", "70000"],
    ["sweep", "--suite", "smoke", "--adaptive", "5"], ["results", "ls", "--limit", HUGE],
    ["results", "compare", "a", "b", "--alpha", "nan"], ["results", "check", "a", "--history", HUGE],
    ["confirm", "r", "--rounds", HUGE], ["publish", "/x", "--retries", HUGE],
])
def test_every_cli_number_is_bounded(argv, capsys):
    _one_line_error(capsys, argv)


def test_a_100kb_argument_or_catalog_dir_is_one_clear_line(capsys, monkeypatch):
    err = _one_line_error(capsys, ["plan", "mxnet-bert", "--catalog-dir", "d" * 100_000])
    assert err.count("\n") == 1 and "100000 characters" in err
    err = _one_line_error(capsys, ["plan", "mxnet-bert", "--catalog-dir", "d" * 5000])  # ENAMETOOLONG
    assert err.count("\n") == 1 and "catalog directory" in err and "5000 characters" in err
    monkeypatch.setenv("DLPERF_CATALOG_PATH", "e" * 5000)
    err = _one_line_error(capsys, ["catalog"])
    assert err.count("\n") == 1 and "DLPERF_CATALOG_PATH" in err


def _site(tmp_path: Path, name: str, base: str, **changes) -> Path:
    d = yaml.safe_load((BUILTIN_DIR / f"{base}.yaml").read_text())
    d["id"] = name
    for k, v in changes.items():
        if k.startswith("container_"):
            d["container"][k.removeprefix("container_")] = v
        else:
            d[k] = v
    p = tmp_path / f"{name}.yaml"
    p.write_text(yaml.safe_dump(d, sort_keys=False))
    return p


def test_a_broken_site_suite_never_hides_a_builtin_suite_or_group(tmp_path, monkeypatch):
    (tmp_path / "pytorch-bert.yaml").write_text("id: pytorch-bert\ndag: pytorch\nframework: [unclosed\n")
    _site(tmp_path, "site-pt", "pytorch-bert", trials="x")  # a broken new suite of the built-in group
    _site(tmp_path, "site-ok", "pytorch-bert")
    monkeypatch.setenv("DLPERF_CATALOG_PATH", str(tmp_path))
    groups, broken = suites_by_group()
    pt = {s.id: s for s in groups["pytorch"]}
    assert set(pt) == {"pytorch-bert", "site-ok"} and pt["pytorch-bert"].source == str(BUILTIN_DIR / "pytorch-bert.yaml")
    assert len(broken["pytorch"]) == 2 and "the built-in suite pytorch-bert runs instead" in str(broken["pytorch"])
    errors: list[CatalogError] = []
    assert "pytorch-bert" in [s.id for s in list_suites(errors=errors)] and len(errors) == 2
    assert {g for g in groups} >= {"mxnet", "pytorch", "tensorflow", "megatron", "smoke"}


def test_catalog_lists_good_suites_and_warns_about_broken_ones(tmp_path, monkeypatch, capsys):
    (tmp_path / "pytorch-bert.yaml").write_text("id: pytorch-bert\nframework: [unclosed\n")
    monkeypatch.setenv("DLPERF_CATALOG_PATH", str(tmp_path))
    assert main(["catalog"]) == 0
    out, err = capsys.readouterr()
    assert "pytorch-bert" in out and "warning:" in err and "runs instead" in err


def test_catalog_check_warns_on_privileged_devices_capabilities_and_overrides(tmp_path, capsys):
    p = _site(tmp_path, "site-priv", "pytorch-bert", container_privileged=True,
              container_devices=["/dev/infiniband", "/dev/kvm"], container_cap_add=["IPC_LOCK", "SYS_ADMIN"])
    assert main(["catalog", "check", str(p)]) == 0
    err = capsys.readouterr().err
    assert "runs its container privileged" in err and "/dev/kvm" in err and "SYS_ADMIN" in err
    assert err.count("warning:") == 3
    shadow = _site(tmp_path, "mxnet-bert", "mxnet-bert")
    assert main(["catalog", "check", str(shadow)]) == 0
    assert "replaces the built-in suite" in capsys.readouterr().err
    assert main(["catalog", "check", str(BUILTIN_DIR / "pytorch-bert.yaml")]) == 0
    assert "warning" not in capsys.readouterr().err  # the built-in suites' own devices are the seeds'
