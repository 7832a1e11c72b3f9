"""Redaction also removes a node's FQDN domain (``<node>.corp.example.com`` when only
``<node>`` is known), IPv6 addresses with no decimal digit and netstat's ``a.b.c.d.port``; the
independent leak scanner finds each of them too. Run ids with trailing whitespace or a newline are
rejected, never matched; a run id that redaction would change (``x:y@z=1+2`` reads as user@host)
is refused in one line before anything is published."""

from __future__ import annotations

import pytest

from dlperf_tasks.core.errors import DlperfError, StoreError
from dlperf_tasks.store import RetryPolicy, Store
from dlperf_tasks.store.leakscan import LeakScanner
from dlperf_tasks.store.redact import Redactor
from tests.fixtures.s3 import SAMPLE_INVENTORY, make_run_dir

FAST = RetryPolicy(attempts=1, base_delay=0.01, max_delay=0.02)


@pytest.mark.parametrize("text,want", [
    ("ssh gpu-node-a.corp.example.com ok", "ssh <node-1> ok"),
    ("GPU-NODE-A.Corp.Example.COM:22", "<node-1>:22"),
    ("gpu-node-a.cluster up", "<node-1> up"),
    ("gpu-node-a.log gpu-node-a.rank0.log gpu-node-a.tar.gz", "<node-1>.log <node-1>.rank0.log <node-1>.tar.gz"),
])
def test_the_fqdn_of_a_known_node_goes_with_its_name(text, want):
    r = Redactor(names=["gpu-node-a"])
    assert r.redact_text(text) == want
    assert r.mapping()["node"] == {"gpu-node-a": "<node-1>"}  # one placeholder per node, FQDN or not


def test_the_leak_scanner_finds_a_domain_left_after_a_placeholder():
    for line in ("ssh <node-1>.corp.example.com ok", "logs/_node-1_.hpc.example.org/x.log"):
        assert LeakScanner().scan_line(line)[0][0] == "domain after a redacted name"
    for line in ("<node-1>.log", "<node-1>.rank0.log", "<host-2>.stdout"):
        assert LeakScanner().scan_line(line) == []


@pytest.mark.parametrize("addr", ["fdab::cafe:beef", "abcd:ef::face", "fe80::abcd:ef", "face:b00c::ab:cd"])
def test_ipv6_addresses_without_a_decimal_digit_are_redacted_and_scanned(addr):
    out = Redactor().redact_text(f"peer {addr} up")
    assert out == "peer <ip-1> up"
    assert LeakScanner().scan_line(f"peer {addr} up")[0][0] == "IPv6 address"


@pytest.mark.parametrize("text", ["std::vector<int> a::b", "x dead::beef", "v1.2.3.4.5", "version 1.2.3.4.5",
                                  "time 12:34:56"])
def test_code_paths_and_versions_still_stay(text):
    assert Redactor().redact_text(text) == text and LeakScanner().scan_line(text) == []


def test_netstat_address_dot_port_is_redacted_and_scanned():
    line = "tcp4  0  0  10.11.0.9.54321  17.57.144.10.5223  ESTABLISHED"
    r = Redactor(hosts=["10.11.0.9"])
    assert r.redact_text(line) == "tcp4  0  0  <ip-1>.54321  <ip-2>.5223  ESTABLISHED"
    assert LeakScanner().scan_line(line)[0][0] == "IPv4 address"


def test_run_ids_with_trailing_whitespace_or_a_newline_are_rejected(tmp_path, capsys):
    from dlperf_tasks.cli import main
    from dlperf_tasks.engine.rundir import is_run_id
    from dlperf_tasks.history.source import resolve_run

    rid = "mxnet-bert-20260102T030405-abc123"
    assert is_run_id(rid) and not is_run_id(rid + "\n") and not is_run_id(rid + " ")
    store = Store.from_url(f"file://{tmp_path / 'store'}", inventory=SAMPLE_INVENTORY, retry=FAST)
    store.publish(make_run_dir(tmp_path / "work", run_id=rid, log_lines=2))
    assert resolve_run(store, rid) == rid and resolve_run(store, rid[:12]) == rid
    for bad in (rid + "\n", rid + " ", rid + "\t", " " + rid, rid[:12] + "\n"):
        with pytest.raises(DlperfError, match="no whitespace or control character"):
            resolve_run(store, bad)
    assert main(["results", "show", rid + "\n", "--store", str(tmp_path / "store")]) == 2
    assert "no whitespace" in capsys.readouterr().err


def test_a_run_id_that_reads_as_user_at_host_is_refused_in_one_line(tmp_path):
    store = Store.from_url(f"file://{tmp_path / 'store'}", inventory=SAMPLE_INVENTORY, retry=FAST)
    for bad in ("x:y@z=1+2", "run-10.1.2.3", "gpu-node-a"):
        with pytest.raises(StoreError, match="cannot be published") as exc:
            store.publish(make_run_dir(tmp_path / "work", run_id=bad, log_lines=2))
        assert "\n" not in str(exc.value)
    assert not (tmp_path / "store" / "runs").exists()
    ok = "a:b=1+2"  # the other characters run ids allow publish and read back as they are
    store.publish(make_run_dir(tmp_path / "work", run_id=ok, log_lines=2))
    assert store.read_result(ok)["run"]["run_id"] == ok


def test_a_published_log_keeps_no_node_domain(tmp_path):
    rd = make_run_dir(tmp_path / "work", log_lines=2)
    log = rd / "logs" / "gpu-node-a" / "bert_b32_fp32_1.log"
    log.write_text(log.read_text() + "connected to gpu-node-a.corp.example.com\n"
                   "tcp4 0 0 10.11.0.2.54321 ESTABLISHED\npeer fdab::cafe:beef\n")
    store = Store.from_url(f"file://{tmp_path / 'store'}", inventory=SAMPLE_INVENTORY, retry=FAST)
    store.publish(rd)
    text = (tmp_path / "store").rglob("bert_b32_fp32_1.log").__next__().read_text()
    assert "corp.example.com" not in text and "54321" in text and "10.11.0.2" not in text and "cafe:beef" not in text


def test_the_run_id_rule_is_one_rule_quoted_by_every_refusal(tmp_path):
    """The character check (layout), the publish check (names and addresses) and the reader's
    check give the same rule, word for word, so no message allows what another refuses."""
    from dlperf_tasks.history.source import resolve_run
    from dlperf_tasks.store.layout import RUN_ID_RULE, validate_run_id

    store = Store.from_url(f"file://{tmp_path / 'store'}", inventory=SAMPLE_INVENTORY, retry=FAST)
    messages = []
    with pytest.raises(StoreError) as exc:
        validate_run_id("a/b")
    messages.append(str(exc.value))
    with pytest.raises(StoreError) as exc:
        store.publish(make_run_dir(tmp_path / "work", run_id="x:y@z=1+2", log_lines=2))
    messages.append(str(exc.value))
    with pytest.raises(DlperfError) as exc:
        resolve_run(store, "a b")
    messages.append(str(exc.value))
    assert all(RUN_ID_RULE in m and "\n" not in m for m in messages), messages
    assert ": + @ =" in RUN_ID_RULE and "user@host" in RUN_ID_RULE
