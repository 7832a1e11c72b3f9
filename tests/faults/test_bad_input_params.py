"""Bad input: run parameters out of range, of the wrong type, unknown topology/suite/field,
and injection strings ("params out of range or of the wrong type, unknown topology or
suite").

Three real entry points take run parameters, and each is driven here:

* the CLI: ``dlperf plan`` / ``dlperf sweep`` flags (``dlperf_tasks.cli.main``, in process);
* the Airflow run form: Airflow's own ``ParamsDict`` built from ``dag_params()`` (what the UI and
  the REST API validate a conf with) and the DAG's first task, ``airflow.tasks.plan_run``, which
  validates again with :func:`validate_conf` and must refuse before it creates any run directory;
* the library: ``Overrides.from_dict`` + ``plan`` (what both of the above end in).

Asserted each time: a clear error that starts with / names the field, and nothing half-made left.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dlperf_tasks.airflow.params import ParamsError, validate_conf
from dlperf_tasks.airflow.settings import DlperfSettings
from dlperf_tasks.airflow.tasks import NonRetriable, plan_run
from dlperf_tasks.catalog.loader import load_suite
from dlperf_tasks.cli import main
from dlperf_tasks.core.errors import PlanError
from dlperf_tasks.catalog.plan import Overrides, plan

INJECTION = ["; rm -rf /", "$(id)", "`id`", "../../etc/passwd", "a\nb", "a\x00b", "'a'", '"a"', "a b", "a|b"]


def cli(capsys, *argv: str) -> tuple[int, str]:
    try:
        rc = main(list(argv))
    except SystemExit as exc:  # argparse usage error
        rc = exc.code
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return rc, err


# ------------------------------------------------------------------------- CLI flags
CLI_CASES = [
    # (argv after 'dlperf plan', words in the error)
    (["mxnet-bert", "--topologies", "0n8g"], "invalid topology '0n8g'"),
    (["mxnet-bert", "--topologies", "1n8g,8g"], "invalid topology '8g'"),
    (["mxnet-bert", "--topologies", "2x8"], "invalid topology '2x8'"),
    (["mxnet-bert", "--topologies", "1n-8g"], "invalid topology '1n-8g'"),
    (["mxnet-bert", "--batch-sizes", "0"], "batch_sizes: 0 must be a positive integer"),
    (["mxnet-bert", "--batch-sizes", "-32"], "batch_sizes: -32 must be a positive integer"),
    (["mxnet-bert", "--batch-sizes", "32,big"], "batch_sizes: 'big' is not an integer"),
    (["mxnet-bert", "--batch-sizes", "3.5"], "batch_sizes: '3.5' is not an integer"),
    (["mxnet-bert", "--batch-sizes", ","], "batch_sizes: empty list"),
    (["mxnet-bert", "--precisions", "fp8"], "precisions: unknown precision 'fp8'"),
    (["mxnet-bert", "--trials", "0"], "trials: 0 must be >= 1"),
    (["mxnet-bert", "--trials", "-3"], "trials: -3 must be >= 1"),
    (["mxnet-bert", "--trials", "many"], "argument --trials: invalid int value: 'many'"),
    (["mxnet-bert", "--warmup-iters", "-1"], "warmup_iters: -1 must be >= 0"),
    (["mxnet-bert", "--measure-iters", "0"], "measure_iters: 0 must be >= 1"),
    (["mxnet-bert", "--xla", "sometimes"], "argument --xla: invalid choice: 'sometimes'"),
    (["mxnet-bert", "--xla", "on"], "does not support XLA"),
    (["mxnet-bert", "--cases", "DP_1x1x1_2_1536x16"], "cases only apply to Megatron suites"),
    (["megatron-gpt", "--cases", "NOPE_1x1"], "unknown case(s) NOPE_1x1"),
    (["megatron-gpt", "--topologies", "3n8g"], "no parallel layout (case) for topology 3n8g"),
    (["megatron-gpt", "--batch-sizes", "8"], "batch sizes come from the parallel layouts"),
    (["smoke", "--image-tag", "21.03-py3"], "runs on the host (no container); --image-tag does not apply"),
    (["no-such-suite"], "unknown suite 'no-such-suite'"),
]


@pytest.mark.parametrize("argv, words", CLI_CASES, ids=[" ".join(a) for a, _ in CLI_CASES])
def test_cli_rejects_bad_parameter_naming_it(capsys, argv, words):
    rc, err = cli(capsys, "plan", *argv)
    assert rc == 2
    assert words in err, err


@pytest.mark.parametrize("value", INJECTION)
def test_cli_image_tag_and_topologies_refuse_injection(capsys, value):
    rc, err = cli(capsys, "plan", "mxnet-bert", "--image-tag", "20.03" + value)
    assert rc == 2 and "image tag" in err and "is invalid" in err, err
    rc, err = cli(capsys, "plan", "mxnet-bert", "--topologies", "1n8g" + value)
    assert rc == 2 and "invalid topology" in err, err


def test_cli_sweep_refuses_bad_params_before_touching_any_node(capsys, tmp_path):
    """``dlperf sweep`` validates suite, params and inventory before any connection: an
    inventory naming unreachable addresses is never contacted when a parameter is bad."""
    inv = tmp_path / "cluster.yaml"
    inv.write_text("nodes:\n  - {name: n1, host: 192.0.2.1}\n")  # TEST-NET-1: never answers
    out = tmp_path / "out"
    rc, err = cli(capsys, "sweep", "--suite", "mxnet-bert", "--cluster", str(inv), "--out", str(out),
                  "--topologies", "1n8g;reboot")
    assert rc == 2 and "invalid topology '1n8g;reboot'" in err
    rc, err = cli(capsys, "sweep", "--suite", "mxnet-bert", "--cluster", str(inv), "--out", str(out),
                  "--trials", "0")
    assert rc == 2 and "trials" in err
    assert not out.exists()


# ------------------------------------------------------------------------- library: Overrides / plan
OVERRIDE_CASES = [
    ({"batch_sizes": [32, "x"]}, "batch_sizes"),
    ({"batch_sizes": [True]}, None),  # bool is not a batch size: either refused or read as 1 (see below)
    ({"trials": True}, "trials"),
    ({"trials": "3; id"}, "trials"),
    ({"trials": 2.5}, "trials"),
    ({"warmup_iters": "-"}, "warmup_iters"),
    ({"topologies": ["1n1g", None]}, "topology"),
    ({"topologies": 18}, "topology"),
    ({"precisions": ["fp32", 5]}, "precisions"),
    ({"xla": "maybe"}, "xla"),
    ({"image_tag": "$(id)"}, "image tag"),
    ({"image_tag": "-rm"}, "image tag"),
    ({"image_tag": "a" * 129}, "image tag"),
    ({"nodes": ["node1"]}, "unknown override(s): nodes"),
    ({"batch_size": 32}, "unknown override(s): batch_size"),
    ({"models": ["gpt-3"]}, "unknown model(s) gpt-3"),
]


@pytest.mark.parametrize("overrides, words", OVERRIDE_CASES, ids=[str(o) for o, _ in OVERRIDE_CASES])
def test_overrides_from_loose_input_name_the_field(overrides, words):
    suite = load_suite("mxnet-bert")
    if words is None:  # bools: refused, or planned as the integer they are, never crash
        try:
            p = plan(suite, Overrides.from_dict(overrides))
        except PlanError as exc:
            assert "batch_sizes" in str(exc)
        else:
            assert {c.batch_size_per_device for c in p.cells} == {1}
        return
    with pytest.raises(PlanError) as ei:
        plan(suite, Overrides.from_dict(overrides))
    assert words in str(ei.value), str(ei.value)


# ------------------------------------------------------------------------- Airflow: form + first task
SUITES = ["mxnet-bert", "mxnet-resnet50"]

CONF_CASES = [
    ({"trials": 0}, "trials"), ({"trials": 21}, "trials"), ({"trials": "7"}, "trials"), ({"trials": 2.5}, "trials"),
    ({"batch_sizes": [0]}, "batch_sizes[0]"), ({"batch_sizes": [5000]}, "batch_sizes[0]"),
    ({"batch_sizes": 32}, "batch_sizes"), ({"batch_sizes": [32, 32]}, "batch_sizes"),
    ({"warmup_iters": -1}, "warmup_iters"), ({"measure_iters": 10**9}, "measure_iters"),
    ({"topologies": ["1n1g", "16x8"]}, "topologies[1]"), ({"topologies": "1n8g"}, "topologies"),
    ({"suites": ["pytorch-bert"]}, "suites[0]"), ({"suites": ["nope"]}, "suites[0]"),
    ({"precisions": ["fp16"]}, "precisions[0]"), ({"xla": True}, "xla"), ({"policy": "yolo"}, "policy"),
    ({"dry_run": "false"}, "dry_run"), ({"nodes": ["n1"]}, "nodes"), ({"image_tag": 20.03}, "image_tag"),
]


@pytest.mark.parametrize("conf, field", CONF_CASES, ids=[str(c) for c, _ in CONF_CASES])
def test_airflow_conf_validation_names_the_field(conf, field):
    with pytest.raises(ParamsError) as ei:
        validate_conf(conf, SUITES)
    assert str(ei.value).startswith(f"{field}:"), str(ei.value)


@pytest.mark.parametrize("field", ["suites", "topologies", "precisions", "image_tag"])
def test_airflow_conf_refuses_injection_in_every_string_field(field):
    for value in INJECTION:
        conf = {field: value if field == "image_tag" else [value]}
        with pytest.raises(ParamsError) as ei:
            validate_conf(conf, SUITES)
        assert str(ei.value).startswith(field), (value, str(ei.value))


@pytest.fixture
def settings(tmp_path) -> DlperfSettings:
    return DlperfSettings(cluster="local", work_dir=str(tmp_path / "work"))


@pytest.mark.parametrize("conf, field", [
    ({"topologies": ["1n1g; touch /tmp/pwned"]}, "topologies[0]"),
    ({"trials": 500}, "trials"),
    ({"suites": ["../../etc/passwd"]}, "suites[0]"),
    ({"image_tag": "$(reboot)"}, "image_tag"),
    ({"batch_sizes": ["08"]}, "batch_sizes[0]"),
    ({"unknown_knob": 1}, "unknown_knob"),
])
def test_airflow_plan_task_refuses_bad_conf_and_creates_nothing(settings, conf, field):
    """The DAG's first task: NonRetriable (no retries burnt) naming the field, and no run
    directory, plan.json or DAG-run record is written for a refused conf."""
    with pytest.raises(NonRetriable) as ei:
        plan_run("smoke", ["smoke"], conf, settings, dag_run_id="manual__2026-01-01T00:00:00+00:00")
    assert str(ei.value).startswith(f"invalid run parameter {field}:"), str(ei.value)
    work = Path(settings.work_dir)
    assert not work.exists() or not any(work.rglob("*")), sorted(work.rglob("*"))


def test_airflow_plan_task_refuses_topology_bigger_than_the_cluster(settings):
    with pytest.raises(NonRetriable, match=r"topologies: 4n8g needs 4 nodes; the local cluster .* has 1"):
        plan_run("smoke", ["smoke"], {"topologies": ["4n8g"]}, settings)
    with pytest.raises(NonRetriable, match="suite smoke: .*does not support XLA"):
        plan_run("smoke", ["smoke"], {"xla": "on"}, settings)
    work = Path(settings.work_dir)
    assert not work.exists() or not any(work.rglob("*"))


def test_airflow_plan_task_with_hostile_dag_run_id_stays_inside_work_dir(settings):
    """dag_run_id comes from the REST API caller: it is hashed into the record name and never
    used as a path, so ``../`` in it cannot escape the work dir."""
    out = plan_run("smoke", ["smoke"], {"trials": 1, "dry_run": True}, settings,
                   dag_run_id="../../../tmp/evil; rm -rf / $(id)\n")
    work = Path(settings.work_dir).resolve()
    files = [p.resolve() for p in work.rglob("*")]
    assert files and all(str(p).startswith(str(work) + "/") for p in files)
    (run,) = out.runs
    assert "/" not in run.run_id and "evil" not in run.run_id and "$" not in run.run_id


@pytest.mark.airflow
def test_real_airflow_params_dict_refuses_bad_conf_naming_the_param():
    """Airflow's own validation of the DAG's params (what the UI form and the REST trigger use)."""
    from airflow.sdk.definitions.param import ParamsDict, ParamValidationError

    from dlperf_tasks.airflow.form import dag_params

    # image_tag and xla are fields only of DAGs whose suites have them
    for conf, name, suites in [({"topologies": ["1n1g; id"]}, "topologies", ["smoke"]), ({"trials": 0}, "trials", ["smoke"]),
                               ({"batch_sizes": ["x"]}, "batch_sizes", ["smoke"]),
                               ({"image_tag": "`id`"}, "image_tag", ["pytorch-bert"]),
                               ({"suites": ["mxnet-bert"]}, "suites", ["smoke"]),
                               ({"xla": "sometimes"}, "xla", ["tensorflow-bert"])]:
        pd = ParamsDict(dag_params(suites))
        with pytest.raises(ParamValidationError, match=f"Invalid input for param {name}"):
            pd.update(conf)
    pd = ParamsDict(dag_params(["smoke"]))
    pd.update({"topologies": ["1n1g"], "trials": 2})
    assert pd.validate()["trials"] == 2


def _asgi_post(app, path: str, body: bytes, chunks: int = 2):
    """Drive an ASGI app with one POST (body split over ``chunks`` messages); -> (status, body)."""
    import asyncio

    step = max(1, len(body) // chunks)
    parts = [body[i:i + step] for i in range(0, len(body), step)] or [b""]
    incoming = [{"type": "http.request", "body": p, "more_body": i < len(parts) - 1} for i, p in enumerate(parts)]
    sent: list = []

    async def receive():
        return incoming.pop(0)

    async def send(msg):
        sent.append(msg)

    asyncio.run(app({"type": "http", "method": "POST", "path": path, "headers": []}, receive, send))
    return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:])


@pytest.mark.parametrize("conf, words", [
    ({"trails": 1}, ["invalid run parameter trails: unknown field"]),
    ({"topologies": ["2n1g"]}, ["topologies: 2n1g needs 2 nodes", "has 1"]),
    ({"topologies": ["1n64g"]}, ["1n64g needs 64 GPUs per node"]),
    ({"suites": ["smoke"], "batch_sizes": [8], "trials": 1, "policy": "bogus"}, ["policy"]),
])
def test_trigger_guard_refuses_before_airflow_sees_the_conf(conf, words, monkeypatch):
    """The api-server middleware (plugins/dlperf_conf_guard.py) answers 400 with the plan task's
    own error for a dlperf DAG's trigger; the app behind it never runs; the body, read in
    pieces, reaches the app intact when the conf is good; other routes pass untouched."""
    import json

    from dlperf_tasks.airflow.conf_guard import ConfGuard

    monkeypatch.setenv("AIRFLOW__DLPERF__CLUSTER", "local")
    seen: list = []

    async def app(scope, receive, send):
        body, more = b"", True
        while more:
            msg = await receive()
            body, more = body + msg.get("body", b""), msg.get("more_body", False)
        seen.append((scope["path"], body))
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    guard = ConfGuard(app)
    status, body = _asgi_post(guard, "/api/v2/dags/dlperf_smoke/dagRuns", json.dumps({"conf": conf}).encode())
    assert status == 400 and seen == []
    assert all(w in json.loads(body)["detail"] for w in words), body
    good = json.dumps({"logical_date": None, "conf": {"trials": 1, "topologies": ["1n1g"]}}).encode()
    assert _asgi_post(guard, "/api/v2/dags/dlperf_smoke/dagRuns", good)[0] == 200 and seen[-1][1] == good
    assert _asgi_post(guard, "/api/v2/dags/other_dag/dagRuns", json.dumps({"conf": conf}).encode())[0] == 200


def test_form_marks_no_field_required_and_shows_the_suites_defaults():
    """The Airflow 3 UI marks a field required when its schema type has no "null"
    (FlexibleForm: ``!!type && (!Array.isArray(type) || !type.includes("null"))``): every dlperf
    field is optional. Enum fields label their empty value; descriptions carry the suites'
    defaults and the number of trials a run plans with them; empty values mean the defaults."""
    from dlperf_tasks.airflow.form import dag_params
    from dlperf_tasks.airflow.params import defaults, schemas

    for name, schema in schemas(["smoke"]).items():
        t = schema.get("type")
        assert not t or (isinstance(t, list) and "null" in t), f"{name} would be marked required: {t}"
        if None in (schema.get("enum") or []):
            assert "null" in schema.get("values_display", {}), f"{name} would show a literal null"
    p = dag_params(["mxnet-bert", "mxnet-resnet50"])
    descr = {k: v.description for k, v in p.items()}
    assert "Suite defaults: mxnet-bert: 1n1g, 1n8g, 2n8g, 4n8g" in descr["topologies"]
    assert "mxnet-bert: 32, 24; mxnet-resnet50: 128, 256" in descr["batch_sizes"]
    assert "a run plans 116 trial task(s) (mxnet-bert: 8 cells, 56 trials; mxnet-resnet50: 12 cells, 60 trials)" \
        in descr["trials"]
    assert "mxnet-bert: 20; mxnet-resnet50: 20" in descr["warmup_iters"] and "DLPerf" not in descr["warmup_iters"]
    empty = {k: None for k in schemas(["smoke"]) if k != "confirm"}
    assert validate_conf(empty, ["smoke"]) == defaults()
