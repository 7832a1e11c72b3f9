"""Redaction of published text (store/redact.py)."""

import io

import pytest

from dlperf_tasks.core.errors import StoreError
from dlperf_tasks.store.redact import Redactor, Secrets, check_redacted, find_leaks, secrets_from_inventory
from tests.fixtures.s3 import SAMPLE_INVENTORY


def test_example_from_the_brief_ip_to_numbered_placeholder():
    r = Redactor(hosts=["10.11.0.2"])
    assert r.redact_text("master 10.11.0.2:29500") == "master <ip-1>:29500"


def test_consistent_within_a_run_and_inventory_numbered_first():
    r = Redactor.from_inventory(SAMPLE_INVENTORY)
    a = r.redact_text("from 192.168.5.5 to 10.11.0.3 and 10.11.0.3 again, 10.11.0.2")
    assert a == "from <ip-4> to <ip-2> and <ip-2> again, <ip-1>"
    # same value later in another file -> same placeholder
    assert r.redact_text("192.168.5.5") == "<ip-4>"


def test_hosts_nodes_users_and_word_boundaries():
    r = Redactor(hosts=["gpuhost-c.cluster.example"], names=["node1"], users=["alice", "root"])
    out = r.redact_text("alice@GPUHOST-C.cluster.example node1 node10 mynode1 /root/x /home/alice/y alicex")
    assert out == "<user-1>@<host-1> <node-1> node10 mynode1 /root/x /home/<user-1>/y alicex"


@pytest.mark.parametrize("text,ip", [
    ("peer fe80::1%eth0 up", "fe80::1"),
    ("[2001:db8::5]:22", "2001:db8::5"),
    ("2001:0db8:0000:0000:0000:0000:0000:0005", "2001:db8::5"),
    ("mapped ::ffff:10.0.0.1 x", "::ffff:a00:1"),
    ("loopback ::1", "::1"),
])
def test_ipv6_forms(text, ip):
    r = Redactor()
    out = r.redact_text(text)
    assert "<ip-1>" in out
    assert ip in r.mapping()["ip"]
    assert not find_leaks(out, Secrets())


@pytest.mark.parametrize("text", ["std::vector<int> a::b", "time 12:34:56",
                                  "speed 928.03 samples/s", "version 1.2.3", "v1.2.3.4.5",
                                  "at 0x7f3c2a1b5e80", "max_tokens: 512"])
def test_things_that_are_not_addresses_stay(text):
    assert Redactor().redact_text(text) == text


@pytest.mark.parametrize("text,kind", [("mac aa:bb:cc:dd:ee:ff", "mac"), ("link/ether 0C-42-A1-11-22-33", "mac"),
                                       ("guid 0x0c42a10300a1b2c3", "guid")])
def test_mac_addresses_and_guids_are_redacted(text, kind):
    """This test used to assert that a MAC address is NOT redacted."""
    out = Redactor().redact_text(text)
    assert f"<{kind}-1>" in out and text.split()[-1] not in out


def test_redact_stream_line_by_line():
    r = Redactor(hosts=["10.0.0.9"], users=["bob"])
    src = io.StringIO("".join(f"line {i} bob 10.0.0.9\n" for i in range(10000)))
    dst = io.StringIO()
    r.redact_stream(src, dst)
    out = dst.getvalue()
    assert out.count("<user-1> <ip-1>") == 10000 and "bob" not in out and "10.0.0.9" not in out


def test_kinds_can_be_limited():
    r = Redactor(hosts=["h1x"], users=["bob"], kinds="ips")
    assert r.redact_text("bob on h1x 10.1.1.1") == "bob on h1x <ip-1>"
    assert Redactor(kinds="none").redact_text("10.1.1.1") == "10.1.1.1"
    with pytest.raises(StoreError, match="unknown kind"):
        Redactor(kinds="ips,colours")


def test_check_redacted_refuses_leaks_and_accepts_clean_text():
    s = secrets_from_inventory(SAMPLE_INVENTORY)
    assert "10.11.0.2" in s.hosts and "gpu-node-a" in s.names and "opsalice" in s.users
    with pytest.raises(StoreError, match="opsalice"):
        check_redacted("user opsalice", s, where="report.md")
    with pytest.raises(StoreError, match="IPv4 address '172.16.0.1'"):
        check_redacted("x 172.16.0.1", s)
    with pytest.raises(StoreError, match="IPv6"):
        check_redacted("x fd00:11::3", s)
    check_redacted(Redactor.from_inventory(SAMPLE_INVENTORY).redact_text(
        "gpu-node-a 10.11.0.2 benchuser gpuhost-c.cluster.example fd00:11::3"), s)
    assert find_leaks("node gpu-node-a", ["gpu-node-a"]) == ["host 'gpu-node-a'"]


def test_redact_path_components():
    r = Redactor(names=["gpu-node-a"])
    assert r.redact_path("logs/gpu-node-a/10.1.2.3.log") == "logs/_node-1_/_ip-1_.log"
