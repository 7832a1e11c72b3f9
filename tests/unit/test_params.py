"""The run form: JSON-schema Params and their validation in code (dlperf_tasks.airflow.params)."""

import pytest

from dlperf_tasks.airflow import form as form_mod
from dlperf_tasks.airflow import params
from dlperf_tasks.airflow.params import ParamsError, validate_conf

SUITES = ["mxnet-bert", "mxnet-resnet50"]


def test_defaults_when_conf_empty():
    got = validate_conf({}, SUITES)
    assert got == params.defaults()
    assert got["policy"] == "continue" and got["dry_run"] is False


def test_good_conf_is_returned_whole():
    conf = {"suites": ["mxnet-bert"], "batch_sizes": [32, 24], "precisions": ["fp32", "amp"],
            "topologies": ["1n1g", "16n8g"], "trials": 7, "warmup_iters": 20, "measure_iters": 100,
            "image_tag": "20.03-py3", "dry_run": True, "policy": "fail_fast", "xla": "both",
            "adaptive": 0.02, "quarantine": True, "confirm": None}
    got = validate_conf(conf, SUITES)
    assert got == conf



def test_llm_precisions_are_run_parameters():
    """The LLM suites' bf16/fp8 pass the form's schema (a DAG of bf16/fp8 suites was refused: 'not one of
    fp32, amp'); an unknown precision is still named."""
    assert validate_conf({"precisions": ["bf16", "fp8"]}, SUITES)["precisions"] == ["bf16", "fp8"]
    with pytest.raises(ParamsError, match=r"^precisions\[0\]: 'fp4' is not one of"):
        validate_conf({"precisions": ["fp4"]}, SUITES)

def test_form_multiselect_strings_become_batch_sizes_and_every_list_field_has_choices():
    """Airflow's form draws an array with ``examples`` as a multi-select, which sends strings:
    ``["64", "32"]`` is read as ``[64, 32]``; batch sizes and topologies offer the suites' values."""
    got = validate_conf({"batch_sizes": ["64", "32"]}, SUITES)
    assert got["batch_sizes"] == [64, 32]
    choices = params.form_choices(SUITES)
    assert 32 in choices["batch_sizes"] and choices["batch_sizes"] == sorted(choices["batch_sizes"])
    assert choices["topologies"][0] == "1n1g" and "4n8g" in choices["topologies"]
    form = form_mod.dag_params(SUITES)
    assert all(form[n].schema.get("examples") for n in ("suites", "precisions", "batch_sizes"))
    assert "examples" not in form["topologies"].schema  # a free list: any valid topology (test_trigger_form)


@pytest.mark.parametrize("conf, field, words", [
    ({"topologies": ["1n8g; rm -rf /"]}, "topologies[0]", "not allowed"),
    ({"topologies": ["0n8g"]}, "topologies[0]", "does not match"),
    ({"topologies": ["8g"]}, "topologies[0]", "does not match"),
    ({"topologies": ["1n1g", "2x8"]}, "topologies[1]", "does not match"),
    ({"suites": ["pytorch-bert"]}, "suites[0]", "is not one of"),
    ({"suites": ["mxnet-bert$(id)"]}, "suites[0]", "not allowed"),
    ({"precisions": ["fp64"]}, "precisions[0]", "is not one of"),
    ({"batch_sizes": [0]}, "batch_sizes[0]", "less than the minimum"),
    ({"batch_sizes": ["032"]}, "batch_sizes[0]", "does not match"),
    ({"batch_sizes": ["32", 32]}, "batch_sizes", "non-unique"),
    ({"batch_sizes": [2.5]}, "batch_sizes[0]", "is not of type"),
    ({"trials": 21}, "trials", "greater than the maximum"),
    ({"trials": 0}, "trials", "less than the minimum"),
    ({"trials": True}, "trials", "is not of type"),
    ({"warmup_iters": -1}, "warmup_iters", "less than the minimum"),
    ({"measure_iters": 0}, "measure_iters", "less than the minimum"),
    ({"image_tag": "latest`reboot`"}, "image_tag", "not allowed"),
    ({"image_tag": "a" * 129}, "image_tag", "does not match"),
    ({"image_tag": "-bad"}, "image_tag", "does not match"),
    ({"image_tag": "x\ny"}, "image_tag", "not allowed"),
    ({"image_tag": "../../etc"}, "image_tag", "not allowed"),
    ({"dry_run": "yes"}, "dry_run", "is not of type"),
    ({"policy": "retry_forever"}, "policy", "is not one of"),
    ({"xla": "sometimes"}, "xla", "is not one of"),
    ({"nodes": ["node1"]}, "nodes", "unknown field"),
])
def test_bad_values_name_the_field(conf, field, words):
    with pytest.raises(ParamsError) as exc:
        validate_conf(conf, SUITES)
    msg = str(exc.value)
    assert msg.startswith(f"{field}:"), msg
    assert words in msg, msg


def test_injection_strings_rejected_everywhere():
    for bad in ["$(touch /tmp/x)", "a;b", "a|b", "a&&b", "a b", "'a'", '"a"', "a>b", "`id`", "a\\b"]:
        for field in ("topologies", "suites", "precisions"):
            with pytest.raises(ParamsError, match=f"^{field}\\[0\\]"):
                validate_conf({field: [bad]}, SUITES)
        with pytest.raises(ParamsError, match="^image_tag"):
            validate_conf({"image_tag": bad}, SUITES)


def test_schema_patterns_match_the_planner_rules():
    import re

    from dlperf_tasks.core.topology import Topology

    pat = re.compile(params.TOPOLOGY_PATTERN)
    for good in ["1n1g", "2n8g", "16n8g", "10n8g"]:
        assert pat.match(good) and Topology.parse(good).name == good
    for bad in ["0n1g", "1n0g", "1n", "n8g", "01n8g", "1n8g "]:
        assert not pat.match(bad)


def test_dag_params_are_airflow_params_with_the_same_schema():
    from airflow.sdk import Param

    got = form_mod.dag_params(SUITES, policy="fail_fast")
    # the form leaves out the internal field and the fields no suite of the DAG uses (test_trigger_form.py)
    assert set(got) == set(params.schemas(SUITES)) - {"confirm", "xla"}
    assert all(isinstance(p, Param) for p in got.values())
    assert got["suites"].schema["items"]["enum"] == SUITES
    assert got["topologies"].schema["items"]["pattern"] == params.TOPOLOGY_PATTERN
    assert got["trials"].schema["maximum"] == 20
    assert got["policy"].value == "fail_fast"
    # Airflow's own validation (what the UI form and the REST API apply) rejects what ours rejects
    with pytest.raises(Exception):
        got["topologies"].resolve(["1n8g;reboot"])
    with pytest.raises(Exception):
        got["trials"].resolve(50)
    assert got["topologies"].resolve(["1n1g", "2n8g"]) == ["1n1g", "2n8g"]


def test_settings_section_read_and_checked():
    from dlperf_tasks.airflow import settings

    vals = {"cluster": "local", "store_url": "file:///tmp/s", "schedule_smoke": "none", "policy": "fail_fast",
            "redaction": "ips,users", "trial_retries": "3", "nightly": "true"}
    cfg = settings.load(lambda k, d: vals.get(k, d))
    assert cfg.is_local and cfg.store_url == "file:///tmp/s" and cfg.policy == "fail_fast"
    assert cfg.schedule("smoke") is None and cfg.schedule("mxnet") == "0 1 * * *"
    assert cfg.redaction == ("ips", "users") and cfg.trial_retries == 3
    crons = [cfg.schedule(d) for d in ("mxnet", "pytorch", "tensorflow", "megatron")]
    assert len(set(crons)) == 4, "nightly crons must be staggered"
    for key, bad, words in [("store_url", "ftp://x", "store_url"), ("policy", "yolo", "policy"),
                            ("schedule_pytorch", "0 3 * *", "schedule_pytorch"),
                            ("redaction", "ips,secrets", "redaction"), ("trial_retries", "x", "trial_retries")]:
        with pytest.raises(settings.SettingsError, match=words):
            settings.load(lambda k, d, key=key, bad=bad: bad if k == key else vals.get(k, d))
