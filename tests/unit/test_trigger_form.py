"""The trigger form of each dlperf DAG (dlperf_tasks.airflow.form): internal fields
hidden, per-DAG fields only where they apply, adaptive trials a choice, the rarely used fields
in a collapsed section, and every value the form offers accepted by the conf check."""

import configparser
import json

import jsonschema
import pytest
import yaml

from dlperf_tasks.airflow import form, params
from dlperf_tasks.core.settings import project_root


def test_internal_field_is_not_in_any_form_but_still_accepted_in_a_conf():
    for ids in (["smoke"], ["tensorflow-bert"], ["mxnet-bert", "mxnet-resnet50"]):
        fields = form.dag_params(ids)
        assert "confirm" not in fields, ids
    # the A/B follow-up run still carries it (validated by the plan task and the conf guard)
    assert "confirm" in params.schemas(["smoke"])
    assert params.validate_conf({"confirm": None}, ["smoke"])["confirm"] is None


@pytest.mark.parametrize("ids, xla, image", [(["smoke"], False, False), (["tensorflow-bert"], True, True),
                                             (["mxnet-bert", "mxnet-resnet50"], False, True),
                                             (["pytorch-bert"], False, True)])
def test_per_dag_fields_only_where_they_apply(ids, xla, image):
    fields = form.dag_params(ids)
    assert ("xla" in fields) is xla and ("image_tag" in fields) is image, sorted(fields)


def test_adaptive_trials_is_a_choice_whose_every_value_the_conf_check_accepts():
    p = form.dag_params(["smoke"])["adaptive"]
    enum = p.schema["enum"]
    assert enum[:3] == [None, False, True] and all(isinstance(v, float) for v in enum[3:])
    # every option has a label, keyed as Airflow's form keys them (String(value))
    keys = {"null" if v is None else str(v).lower() if isinstance(v, bool) else str(v) for v in enum}
    assert keys == set(p.schema["values_display"])
    for v in enum:
        assert params.validate_conf({"adaptive": v}, ["smoke"])["adaptive"] == v
        assert p.resolve(v) == v  # Airflow's own check of a REST conf
    with pytest.raises(Exception):
        p.resolve("yes please")


def test_everyday_fields_first_the_rest_in_a_collapsed_section():
    fields = form.form_fields(["tensorflow-bert"])
    names = list(fields)
    assert names[:7] == ["suites", "topologies", "batch_sizes", "precisions", "xla", "trials", "dry_run"]
    more = [n for n, (_, s) in fields.items() if s.get("section") == form.MORE_SECTION]
    assert more == names[7:] and {"warmup_iters", "adaptive", "policy", "image_tag"} <= set(more)


def test_dag_descriptions_say_what_the_dag_benchmarks():
    from dlperf_tasks.airflow.dag_factory import dag_description
    from dlperf_tasks.catalog.loader import load_suite

    smoke = dag_description("smoke", [load_suite("smoke")])
    assert smoke.startswith("smoke:") and "PyTorch BERT" in smoke and len(smoke) <= 200
    mx = dag_description("mxnet", [load_suite("mxnet-bert"), load_suite("mxnet-resnet50")])
    assert "mxnet-bert" in mx and "mxnet-resnet50" in mx and len(mx) <= 200


def test_the_ui_theme_keeps_the_trigger_dialogs_error_alert_in_view():
    """airflow.cfg.template's ``[api] theme`` is one Airflow accepts (its own model of the
    setting) and makes the trigger dialog's error alert (where Airflow shows a refused conf)
    sticky, important enough to beat the alert's own style (Chakra's cascade layers); the docker
    service's environment sets the same theme."""
    from airflow.api_fastapi.common.types import Theme  # heavy: Airflow's api-server models

    cfg = configparser.ConfigParser(interpolation=None)
    cfg.read_string((project_root() / "airflow.cfg.template").read_text())
    theme = Theme.model_validate(json.loads(cfg.get("api", "theme")))
    rule = theme.globalCss[".chakra-dialog__body [data-testid=error-alert]"]
    assert rule["position"] == "sticky !important" and rule["top"] == "0 !important", rule
    # the docker service (configured by environment, not the template) sets the same theme
    compose = yaml.safe_load((project_root() / "docker" / "service" / "compose.yaml").read_text())
    assert json.loads(compose["services"]["api-server"]["environment"]["AIRFLOW__API__THEME"]) == json.loads(
        cfg.get("api", "theme"))


def test_topologies_take_any_valid_value_and_the_form_says_the_runs_size():
    """The topology field is a free list checked by its pattern (no examples: Airflow's form
    would offer only those), and the trials field says how big a run with every default is."""
    from dlperf_tasks.catalog.loader import load_suite
    from dlperf_tasks.catalog.plan import Overrides, plan

    fields = form.form_fields(["mxnet-bert"])
    _, topo = fields["topologies"]
    assert "examples" not in topo
    for good in (["3n4g"], ["16n8g", "1n2g"]):
        jsonschema.validate(good, topo)  # not among the suite's topologies, valid all the same
    for bad in (["8g"], ["0n8g"], ["1n8g; rm -rf /"]):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, topo)
    p = plan(load_suite("mxnet-bert"), Overrides())
    gpu_h = sum(t.trial.cell.topology.world_size for t in p.trials) * p.timeout_s / 3600
    text = fields["trials"][1]["description"]
    nodes = max(t.trial.cell.topology.nodes for t in p.trials)
    assert (f"Run size with every default: {len(p.trials)} trial(s), up to {nodes} node(s) per trial, "
            f"at most {gpu_h:.2f} GPU-hours") in text
