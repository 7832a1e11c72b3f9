"""Bad input: what a real cluster prints must not reach the store.

The 39 probes of the issue are a table: each probe input goes through the redactor built from
node facts (``remote.envcapture.node_identity`` output) + the inventory; every listed fragment
must be gone, the independent leak scanner (``store/leakscan.py``) must flag the raw input and
pass the redacted output. Then the real publish path: a run directory full of probes is
published to a real local store (nothing survives in any object, result.json included), a
redactor that is switched off is caught by the scanner (publish blocked, file and line named),
and a 128 MiB line is published with bounded memory.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from dlperf_tasks.core.errors import StoreError
from dlperf_tasks.remote import envcapture
from dlperf_tasks.store import Store
from dlperf_tasks.store.leakscan import LeakScanner
from dlperf_tasks.store.redact import Redactor
from dlperf_tasks.store.spool import SPOOL_DIR
IDENTITY = {
    "os_hostname": "dgx-a100-017", "fqdn": "dgx-a100-017.hpc.example.com",
    "short_names": ["dgx-a100-017", "dgx-a100-017.hpc"],
    "addresses": ["10.20.30.17", "192.168.77.17", "fe80::a0b:c0d:e0f:1011", "fd00:77::17"],
    "macs": ["0c:42:a1:11:22:33"], "ib_guids": ["0x0c42a10300a1b2c3", "0c42:a103:00a1:b2c3"],
    "users": ["svc-bench"],
}
INVENTORY = {"name": "prod", "defaults": {"user": "opsalice", "gpus": 8},
             "nodes": [{"name": "node1", "host": "gpu-node-a.corp.example.com"},
                       {"name": "node2", "host": "10.20.30.18"}]}
PROBES = {
    "nccl_line_os_hostname": ("dgx-a100-017:1234:1290 [0] NCCL INFO Bootstrap : Using ib0:10.20.30.17<0>",
                              ["dgx-a100-017", "10.20.30.17"]),
    "nccl_line_unknown_host": ("dgx-b200-003:5678:5690 [3] NCCL INFO comm 0x5555 rank 3 nRanks 16",
                               ["dgx-b200-003"]),
    "openmpi_on_node_unknown": ("ORTE was unable to reliably start one or more daemons on node dgx-a100-099",
                                ["dgx-a100-099"]),
    "openmpi_host_unknown": ("  Host: gpu-rack4-12\n  Framework: btl", ["gpu-rack4-12"]),
    "short_name_of_inventory_fqdn": ("ssh: connect to gpu-node-a port 22: refused", ["gpu-node-a"]),
    "fqdn_of_node_uppercase": ("resolved DGX-A100-017.HPC.EXAMPLE.COM", ["DGX-A100-017", "dgx-a100-017"]),
    "names_joined_with_underscore": ("log_gpu-node-a_rank0.txt node1_rank3", ["gpu-node-a", "node1"]),
    "ec2_style_name": ("Connecting to ip-10-20-30-40.ec2.internal", ["ip-10-20-30-40", "10-20-30-40"]),
    "ipv4_after_a_dot": ("peer addr.10.20.30.41 ok", ["10.20.30.41"]),
    "ipv4_with_port": ("MASTER_ADDR=10.20.30.42:29500", ["10.20.30.42"]),
    "ipv4_in_brackets": ("[10.20.30.43]", ["10.20.30.43"]),
    "nccl_ipv6_ib0": ("NCCL INFO NET/IB : Using [0]ib0:fe80::a0b:c0d:e0f:1011%ib0<0>",
                      ["fe80::a0b:c0d:e0f:1011", "a0b:c0d:e0f:1011"]),
    "ipv6_bracket_port": ("connect [fd00:77::17]:22 failed", ["fd00:77::17"]),
    "ipv6_full_form": ("addr 2001:0db8:0000:0000:0000:0000:0000:0017", ["2001:0db8:0000:0000:0000:0000:0000:0017"]),
    "mac_colon": ("link/ether 0c:42:a1:11:22:33 brd ff:ff:ff:ff:ff:ff", ["0c:42:a1:11:22:33"]),
    "mac_unknown_dash": ("HWaddr 0C-42-A1-44-55-66", ["0C-42-A1-44-55-66"]),
    "mac_uppercase_known": ("ether 0C:42:A1:11:22:33", ["0C:42:A1:11:22:33"]),
    "ib_guid_hex": ("NCCL INFO NET/IB: dev mlx5_0 guid 0x0c42a10300a1b2c3", ["0c42a10300a1b2c3"]),
    "ib_guid_colon": ("Port GUID: 0c42:a103:00a1:b2c3", ["0c42:a103:00a1:b2c3"]),
    "ipoib_hw_address": ("link/infiniband 80:00:00:48:fe:80:00:00:00:00:00:00:0c:42:a1:03:00:a1:b2:c3",
                         ["0c:42:a1:03:00:a1:b2:c3"]),
    "user_outside_inventory_home": ("open /home/carol/.cache/torch failed", ["carol"]),
    "inventory_user_other_case": ("user OpsAlice started", ["OpsAlice", "opsalice"]),
    "inventory_user_in_path": ("/home/opsalice/run", ["opsalice"]),
    "node_fact_user": ("whoami: svc-bench", ["svc-bench"]),
    "user_at_unknown_host": ("ssh carol@dgx-a100-019 true", ["carol", "dgx-a100-019"]),
    "lease_timeout_reason": ("node node1 is leased by airflow@ctl-prod-01:4242 (timeout)",
                             ["ctl-prod-01", "airflow@"]),
    "s3_url_credentials": ("store s3://AKIAEXAMPLEKEY000:wJalrXUtnFEMIK7MDENGbPxRfiCYEXAMPLEKEY@bucket/x",
                           ["AKIAEXAMPLEKEY000", "wJalrXUtnFEMIK7MDENGbPxRfiCYEXAMPLEKEY"]),
    "https_user_pass": ("git clone https://deploy:hunter2pass@git.example.com/x.git", ["deploy:", "hunter2pass"]),
    "aws_secret_env": ("AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMIK7MDENG/bPxRfiCYEXAMPLEKEY",
                       ["wJalrXUtnFEMIK7MDENG", "bPxRfiCYEXAMPLEKEY"]),
    "aws_key_id": ("using key AKIAIOSFODNN7EXAMPLE", ["AKIAIOSFODNN7EXAMPLE"]),
    "json_password": ('{"registry_password": "s3cr3tReg1stry"}', ["s3cr3tReg1stry"]),
    "docker_login_p": ("docker login -u bench -p Reg1stryPassw0rd registry.example.com:5000", ["Reg1stryPassw0rd"]),
    "docker_login_password_eq": ("docker login --password=Reg1stryPassw0rd nvcr.io", ["Reg1stryPassw0rd"]),
    "bearer_token": ("Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.payload.sig", ["eyJhbGciOiJIUzI1NiJ9"]),
    "private_key_block": ("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmU\n"
                          "AAAAC3NzaC1lZDI1NTE5AAAAIOa\n-----END OPENSSH PRIVATE KEY-----\nafter",
                          ["b3BlbnNzaC1rZXktdjEAAAAABG5vbmU", "AAAAC3NzaC1lZDI1NTE5AAAAIOa"]),
    "private_key_json_escaped": ('{"key": "-----BEGIN RSA PRIVATE KEY-----\\nMIIEpAIBAAKCAQEA7\\n'
                                 '-----END RSA PRIVATE KEY-----"}', ["MIIEpAIBAAKCAQEA7"]),
    "private_fqdn_unknown": ("resolving worker7.cluster.local", ["worker7"]),
    "node_address_fact_plain": ("bound 192.168.77.17", ["192.168.77.17"]),
    "node_name": ("trial ran on node2", ["node2"]),
}


def _redactor() -> Redactor:
    return Redactor.from_inventory(INVENTORY, identities={"node1": IDENTITY})


def test_the_table_has_the_39_probes_of_the_issue():
    assert len(PROBES) == 39


@pytest.mark.parametrize("name", sorted(PROBES))
def test_probe_does_not_survive_redaction(name):
    text, fragments = PROBES[name]
    out = _redactor().redact_text(text)
    for frag in fragments:
        assert frag.lower() not in out.lower(), (name, out)


@pytest.mark.parametrize("name", sorted(PROBES))
def test_independent_scanner_flags_the_raw_probe_and_passes_the_redacted_one(name):
    text, _ = PROBES[name]
    r = _redactor()
    scanner = LeakScanner(known=r.known_values())
    assert any(scanner.scan_line(line) for line in text.splitlines()), f"scanner missed raw probe {name}"
    out = r.redact_text(text)
    assert not [f for line in out.splitlines() for f in scanner.scan_line(line)], out


def test_planted_secret_is_found_anywhere_in_a_line_and_never_echoed():
    scanner = LeakScanner(planted=["Pl4nted-Registry-Pw"])
    (kind, what), = scanner.scan_line("cfg=xPl4nted-Registry-Pwx")
    assert kind == "planted secret" and "Pl4nted" not in what


@pytest.mark.parametrize("text", ["speed 928.03 samples/s", "version 1.2.3.4.5", "time 12:34:56",
                                  "std::vector<int> a::b", "at 0x7f3c2a1b5e80", "[06:12:41] src/op.h:97: ok",
                                  "max_tokens: 512", "nvcr.io/nvidia/pytorch@sha256:0123abcd", "on node 0"])
def test_scanner_and_redactor_leave_ordinary_log_text_alone(text):
    assert _redactor().redact_text(text) == text
    assert LeakScanner(known=_redactor().known_values()).scan_line(text) == []


def test_what_the_stand_in_prints_like_a_cluster_is_redacted_and_scanned_clean():
    """The stand-in's own printers (NCCL INFO lines with host name, IPv4 and NCCL's IPv6 form;
    OpenMPI's ``Local host:`` and ``[host:pid]`` notices) for a host the facts do NOT know."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "docker/standin/rootfs/usr/lib/python3/dist-packages"))
    try:
        import dlperf_standin_cluster as standin
    finally:
        sys.path.pop(0)
    who = {"host": "dgx-b300-042", "iface": "ib0", "ipv4": "10.3.4.5", "ipv6": "fe80::1e34:da03:b4:7c0e"}
    lines = standin.nccl_lines(0, 0, 16, 2, who, 1234) + standin.openmpi_lines(who, 777, 8)
    r = _redactor()
    scanner = LeakScanner(known=r.known_values())
    assert sum(1 for line in lines if scanner.scan_line(line)) >= 6
    out = r.redact_text("\n".join(lines))
    for frag in ("dgx-b300-042", "10.3.4.5", "fe80::1e34"):
        assert frag not in out
    assert [line for line in out.splitlines() if scanner.scan_line(line)] == []
    assert "Host: localhost" == r.redact_text("Host: localhost") and not scanner.scan_line("Host: localhost")


def test_node_identity_reports_this_machines_real_names_and_addresses():
    """The identity script run by a real shell on this machine (what node_identity runs over SSH)."""
    ident = envcapture.local_identity()
    assert ident["os_hostname"] == socket.gethostname()
    assert socket.gethostname() in ident["short_names"]
    assert set(ident) == {"os_hostname", "fqdn", "short_names", "addresses", "macs", "ib_guids", "users"}
    nics = [p for p in Path("/sys/class/net").iterdir() if (p / "address").is_file()]
    macs = {(p / "address").read_text().strip() for p in nics} - {"00:00:00:00:00:00"}
    assert macs <= set(ident["macs"])
    assert "127.0.0.1" not in ident["addresses"]


def test_node_identity_over_real_ssh_matches_the_node(tmp_path):
    """``node_identity`` through a real sshd node (this machine): what prepare stores per node."""
    from dlperf_tasks.remote.inventory import Cluster
    from dlperf_tasks.remote.ssh import SSHPool
    from tests.fixtures.sshd_nodes import make_nodes, stop_nodes

    (tmp_path / "sshd").mkdir()
    nodes, path = make_nodes(tmp_path / "sshd", 1, base_octet=133)
    try:
        with SSHPool(Cluster.from_yaml(path)) as pool:
            got = envcapture.identities(pool, ["node1"])
    finally:
        stop_nodes(nodes)
    ident = got["node1"]
    assert ident["os_hostname"] == socket.gethostname()
    assert set(ident["macs"]) == set(envcapture.local_identity()["macs"])
    r = Redactor(identities=got)
    assert socket.gethostname() not in r.redact_text(f"NCCL on {socket.gethostname()} ok").split()


def test_parse_identity_of_a_dgx_style_node():
    out = ("@@hostname\ndgx-a100-017\n@@fqdn\ndgx-a100-017.hpc.example.com\n@@aliases\n\n"
           "@@addrs\n127.0.0.1/8\n10.20.30.17/24\nfe80::a0b:c0d:e0f:1011/64\n@@if_inet6\n"
           "fd000077000000000000000000000017 03 40 00 80 ib0\n@@macs\n0c:42:a1:11:22:33\n00:00:00:00:00:00\n"
           "@@guids\n0c42:a103:00a1:b2c3\n@@users\nsvc-bench\n\nroot\n")
    ident = envcapture.parse_identity(out)
    assert ident["short_names"] == ["dgx-a100-017", "dgx-a100-017.hpc.example.com"]
    assert ident["addresses"] == ["10.20.30.17", "fd00:77::17", "fe80::a0b:c0d:e0f:1011"]
    assert ident["macs"] == ["0c:42:a1:11:22:33"] and "0x0c42a10300a1b2c3" in ident["ib_guids"]
    assert ident["users"] == ["svc-bench"]


# ---------------------------------------------------------------------- the real publish path
def _probe_run_dir(root: Path) -> Path:
    run_dir = root / "run"
    (run_dir / "logs" / "node1").mkdir(parents=True)
    (run_dir / "logs" / "node1" / "trial_1.log").write_text("".join(t + "\n" for t, _ in PROBES.values()))
    lease = PROBES["lease_timeout_reason"][0]
    result = {"schema_version": 1,
              "run": {"run_id": "smoke-20260102T030405-abc123", "suite": "smoke", "framework": "smoke_bert",
                      "started_at": "2026-01-02T03:04:05+00:00", "finished_at": "2026-01-02T03:05:05+00:00"},
              "cells": [{"cell_id": "smoke/bz8/fp32/1n1g", "trials": [
                  {"index": 1, "status": "NODE_UNREACHABLE", "reason": lease, "value": None}]}], "dlperf": {}}
    (run_dir / "result.json").write_text(json.dumps(result, indent=1))
    (run_dir / "report.md").write_text("# smoke\n\n" + PROBES["ec2_style_name"][0] + "\n")
    (run_dir / "node-facts.json").write_text(json.dumps({"node1": {"image_digest": None, "identity": IDENTITY}}))
    return run_dir


def _published_texts(store_root: Path) -> dict[str, str]:
    out = {}
    for p in store_root.rglob("*"):
        if p.is_file() and p.name.endswith(".tar.gz"):
            with tarfile.open(p) as tar:
                for m in tar.getmembers():
                    out[f"{p.name}:{m.name}"] = m.name + "\n" + tar.extractfile(m).read().decode()
        elif p.is_file():
            out[str(p.relative_to(store_root))] = str(p.relative_to(store_root)) + "\n" + p.read_text(errors="replace")
    return out


def test_published_run_keeps_no_probe_fragment_result_json_included(tmp_path):
    run_dir = _probe_run_dir(tmp_path)
    store = Store.from_url(f"file://{tmp_path / 'store'}", inventory=INVENTORY)
    store.publish(run_dir)
    texts = _published_texts(tmp_path / "store")
    assert any(k.endswith("result.json") for k in texts) and any(":logs/" in k for k in texts)
    for name, (_, fragments) in PROBES.items():
        for frag in fragments:
            hits = [k for k, v in texts.items() if frag.lower() in v.lower()]
            assert not hits, f"probe {name}: {frag!r} published in {hits}"
    result = next(json.loads(v.split("\n", 1)[1]) for k, v in texts.items() if k.endswith("result.json"))
    reason = result["cells"][0]["trials"][0]["reason"]
    assert "ctl-prod-01" not in reason and "<host-" in reason and "<user-" in reason


def test_scanner_blocks_the_publish_when_redaction_misses_naming_file_and_line(tmp_path):
    """Redaction switched off (kinds none: credentials only): the independent scanner still
    refuses, names the object and line, and nothing reaches the store."""
    run_dir = _probe_run_dir(tmp_path)
    store = Store.from_url(f"file://{tmp_path / 'store'}", inventory=INVENTORY, redaction="none")
    with pytest.raises(StoreError, match=r"refusing to publish .*logs/.*trial_1\.log \(line 1\): "):
        store.publish(run_dir)
    assert not [p for p in (tmp_path / "store").rglob("*") if p.is_file()]


def test_planted_secret_in_the_environment_blocks_the_publish(tmp_path, monkeypatch):
    run_dir = _probe_run_dir(tmp_path)
    (run_dir / "report.md").write_text("registry pw was Zq9-planted-value-7 here\n")
    monkeypatch.setenv("DLPERF_REGISTRY_PASSWORD", "Zq9-planted-value-7")
    store = Store.from_url(f"file://{tmp_path / 'store'}", inventory=INVENTORY)
    with pytest.raises(StoreError, match=r"refusing to publish report.md \(line 1\): planted secret") as exc:
        store.publish(run_dir)
    assert "Zq9-planted-value-7" not in str(exc.value)


PUBLISH_BIG_LINE = r"""
import json, sys
from pathlib import Path
from dlperf_tasks.store import Store
run_dir = Path(sys.argv[1])
Store.from_url("file://" + sys.argv[2]).publish(run_dir)
hwm = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:"))
print(json.dumps({"hwm_kib": hwm}))
"""


@pytest.mark.slow
def test_a_128_mib_line_is_published_with_bounded_memory(tmp_path):
    """Readlines() needed 293 MiB for one 128 MiB line."""
    run_dir = _probe_run_dir(tmp_path)
    word = "x" * 1000 + " "
    with open(run_dir / "logs" / "node1" / "big.log", "w") as f:
        f.write("step 1 10.20.30.99 ")
        for _ in range((128 << 20) // len(word)):
            f.write(word)
        f.write("end\n")
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    res = subprocess.run([sys.executable, "-c", PUBLISH_BIG_LINE, str(run_dir), str(tmp_path / "store")],
                         capture_output=True, text=True, env=env, timeout=900)
    assert res.returncode == 0, res.stderr[-2000:]
    hwm_mib = json.loads(res.stdout.strip().splitlines()[-1])["hwm_kib"] / 1024
    print(f"peak RSS {hwm_mib:.0f} MiB")
    assert hwm_mib < 128, f"peak RSS {hwm_mib:.0f} MiB for a 128 MiB line"
    spooled = run_dir / SPOOL_DIR / "objects" / "logs" / "node1" / "big.log"
    with open(spooled) as f:
        assert f.read(64) .startswith("step 1 <ip-")
