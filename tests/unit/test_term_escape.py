"""Every human-readable CLI output escapes C0/C1 control characters other than
newline and tab (OSC title, clear screen, OSC-8 links, C1 CSI, carriage-return overwrite, ESC),
whatever they came from (a log, a result.json, a store's index, an argument); JSON output stays
valid JSON with the same content."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from dlperf_tasks.cli import main
from dlperf_tasks.cli._term import EscapingStream, escape

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "data" / "fixture_logs" / "mxnet_bert" / "bz32" / "1n8g" / "bert_b32_fp32_1.log"
EVIL = "\x1b]0;PWNED\x07 \x1b[2J \x9b31m \x1b]8;;http://evil.example/\x1b\\click\x1b]8;;\x1b\\ \x7f over\rwrite"
RAW = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def test_escape_keeps_newline_and_tab_and_escapes_every_other_control_character():
    for code in range(0x00, 0x100):
        c = chr(code)
        if c in "\n\t" or 0x20 <= code < 0x7f or code > 0x9f:
            assert escape(c) == c
        else:
            assert escape(c) == f"\\u{code:04x}" and not RAW.search(escape(c))
    assert json.loads(json.dumps("a\x9bb", ensure_ascii=False).replace("\x9b", escape("\x9b"))) == "a\x9bb"
    out = []
    s = EscapingStream(type("S", (), {"write": lambda self, t: out.append(t), "encoding": "utf-8"})())
    s.write("x\x1b[2Jy\n") and s.writelines(["\r"])
    assert out == ["x\\u001b[2Jy\n", "\\u000d"] and s.encoding == "utf-8"


def _strings(doc):
    if isinstance(doc, str):
        yield doc
    elif isinstance(doc, dict):
        for v in doc.values():
            yield from _strings(v)
    elif isinstance(doc, list):
        for v in doc:
            yield from _strings(v)


@pytest.fixture
def hostile_logs(tmp_path):
    d = tmp_path / "logs" / "1n8g"
    d.mkdir(parents=True)
    shutil.copy(FIXTURE, d / "bert_b32_fp32_1.log")
    shutil.copy(FIXTURE, d / "bert_b32_fp32_2.log")
    head = FIXTURE.read_text(errors="replace").splitlines(keepends=True)[:200]
    (d / "bert_b32_fp32_3.log").write_text("".join(head) + f"Traceback (most recent call last): {EVIL}\n")
    return tmp_path / "logs"


@pytest.mark.parametrize("fmt", ["full", "markdown", "dlperf", "csv", "json"])
def test_extract_never_prints_a_control_sequence_from_a_log(hostile_logs, fmt, capsys):
    rc = main(["extract", "--suite", "mxnet-bert", "--log-dir", str(hostile_logs), "--format", fmt])
    out, err = capsys.readouterr()
    assert rc == 0 and not RAW.search(out) and not RAW.search(err)
    assert "PWNED" in out  # the text is shown, only its control characters are escaped
    if fmt == "json":
        assert any("\x1b]0;PWNED\x07" in t for t in _strings(json.loads(out)))  # same content


@pytest.fixture
def hostile_store(tmp_path):
    from dlperf_tasks.store import Store
    from tests.fixtures import synth

    store = Store.from_url(f"file://{tmp_path / 'store'}")
    res = synth.nightly_results(2, env_changes={1: {"NCCL_NOTE": EVIL}})
    res[1]["run"]["image"] = "img" + EVIL
    ids = synth.seed_store(store, res, str(tmp_path / "work"))
    index = tmp_path / "store" / "index" / "mxnet-bert.json"
    doc = json.loads(index.read_text())
    doc["runs"][0]["status"] = "ok" + EVIL  # a hostile store's index
    index.write_text(json.dumps(doc))
    return str(tmp_path / "store"), ids


@pytest.mark.parametrize("fmt", ["table", "csv", "json"])
def test_results_show_compare_ls_never_print_a_control_sequence_from_the_store(hostile_store, fmt, capsys):
    url, ids = hostile_store
    for argv in (["show", ids[1]], ["compare", ids[0], ids[1]], ["ls"]):
        rc = main(["results", *argv, "--store", url, "--format", fmt])
        out, err = capsys.readouterr()
        assert rc == 0, (argv, err)
        assert not RAW.search(out) and not RAW.search(err), (argv, fmt)
        if fmt == "json":
            json.loads(out)
    main(["results", "show", ids[1], "--store", url, "--format", "json"])
    assert json.loads(capsys.readouterr().out)["run"]["image"] == "img" + EVIL  # content intact


def test_errors_and_argument_echoes_are_escaped(hostile_store, capsys):
    url, _ = hostile_store
    assert main(["results", "show", "nope" + EVIL, "--store", url]) == 2
    out, err = capsys.readouterr()
    assert "nope" in err and not RAW.search(out + err)
    with pytest.raises(SystemExit):
        main(["results", "ls", "--store", url, "--format", "x" + EVIL])
    out, err = capsys.readouterr()
    assert "invalid choice" in err and not RAW.search(out + err)


def test_every_ascii_character_beside_a_newline():
    """The ASCII fast check and the control-character rule agree on each of the 128 characters."""
    for code in range(128):
        c = chr(code)
        want = c if c in "\n\t" or 0x20 <= code < 0x7F else f"\\u{code:04x}"
        assert escape(f"ab{c}cd\n") == f"ab{want}cd\n"
        assert escape(f"é{c}") == f"é{want}"
