"""The compiled MXNet BERT scanner (``dlperf_tasks/frameworks/_cmxbert.c``) gives exactly what
the pure-Python path gives (``mxnet_bert._cmxbert`` set to None): the same ``_BULK`` split, the same
ParsedLog, the same extract results; it falls back (None) on whatever it does not read exactly."""

from __future__ import annotations

import dataclasses
import math
import os
import random
import re
import shutil
import struct
import tracemalloc
from pathlib import Path

import pytest

from dlperf_tasks.frameworks import get
from dlperf_tasks.frameworks import _native
from dlperf_tasks.frameworks import mxnet_bert as M

FIX = Path(__file__).resolve().parents[1] / "data" / "fixture_logs" / "mxnet_bert"
LOGS = sorted(FIX.rglob("*.log"))
LINE = ("INFO:root:[step {s}]\tmlm_loss={mlm}\tnsp_loss= {nsp}\tthroughput=16.0K tks/s\tlr=0.0000505 "
        "time=0.24, latency={lat} ms/batch\n")
ODD = ["1e3", "nan", "inf", "-1", "0", "0.0", "1_0", "+5", ".5", "5.", "7" * 400, "0." + "0" * 400 + "1",
       "240.9ms", "2.4e2", "12345678901234567", "0.1234567890123456789012345", "1.", "-0.5", "٣"]


def _scan_c():
    from dlperf_tasks.frameworks import _cmxbert

    return _cmxbert.scan


def _canon(parsed) -> str:
    """Every column, fact and extra of a ParsedLog as one text (repr: exact floats, NaN equal to NaN)."""
    s = parsed.samples
    cols = [list(getattr(s, n)) for n in ("iteration", "value", "unit", "rank", "timestamp", "memory_mib", "loss")]
    return repr((cols, dataclasses.asdict(parsed.facts), sorted(parsed.extra.items())))


def _parse(text: str | bytes, cuts: list[int] | None = None, keep: bool = True) -> str:
    st = get("mxnet_bert").stream()
    st.keep_samples = keep
    cuts = sorted(set(cuts or []))
    prev = 0
    for c in cuts + [len(text)]:
        st.feed(text[prev:c])
        prev = c
    return _canon(st.close())


def _both(monkeypatch, text, cuts=None, keep=True) -> str:
    fast = _parse(text, cuts, keep)
    with monkeypatch.context() as m:
        m.setattr(_native, "mxbert_scan", None)
        slow = _parse(text, cuts, keep)
    assert fast == slow
    return fast


def _split_check(block: str) -> bool:
    """The C scan against ``_BULK.split``: the same columns, or None only for a reason it documents.
    True when the C path read the block."""
    got = _scan_c()(block)
    parts = M._BULK.split(block)
    lat_toks = parts[4::5]
    if got is None:
        odd = get("mxnet_bert").stream().drop_odd_step_lines(block, "[step ", "latency=")[1]
        assert (not block.isascii() or odd or any(len(p) > 18 for p in parts[1::5])
                or any(not re.fullmatch(r"[0-9]*\.?[0-9]*", t) or not re.search("[0-9]", t) or len(t) > 40
                       or not float(t) > 0 for t in lat_toks)
                or not sum(map(float, lat_toks)) < math.inf), block[:300]
        return False
    rest, clean, steps, lats, mlm, nsp, runs = got
    assert rest == "".join(parts[0::5])
    assert clean == rest.replace("INFO:root:", "")
    assert steps == [int(p) for p in parts[1::5]]
    assert [struct.pack("<d", x) for x in lats] == [struct.pack("<d", float(t)) for t in lat_toks]
    assert mlm == "\n".join(parts[2::5]) and nsp == "\n".join(parts[3::5])
    assert runs == [s for i, s in enumerate(steps) if i == 0 or steps[i - 1] != s]
    return True


def _lines(n: int, world: int, rng: random.Random, fmt: str = LINE, start: int = 1) -> str:
    return "".join(fmt.format(s=s, mlm=f"{rng.uniform(6, 9):7.5f}", nsp=f"{rng.uniform(0.6, 0.8):5.2f}",
                              lat=f"{rng.uniform(230, 260):.1f}")
                   for s in range(start, start + n) for _ in range(world))


def _bench_4n8g(src: str) -> str:
    """bench/bench_extract.py's 4n8g log: each per-rank line of the 1n8g fixture printed 4x."""
    out = []
    for line in src.splitlines(keepends=True):
        per_rank = any(k in line for k in ("throughput=", "Namespace(", "files are found", "Train cost"))
        if "Namespace(" in line:
            line = line.replace("total_batch_size=256", "total_batch_size=1024").replace(
                "total_batch_size_eval=256", "total_batch_size_eval=1024")
        out.append(line * 4 if per_rank else line)
    return "".join(out)


# ------------------------------------------------------------------ built and used
def test_the_extension_is_built_and_used():
    from dlperf_tasks.frameworks import _cmxbert  # no silent fallback: `make install` builds it

    assert _native.mxbert_scan is _cmxbert.scan and "_cmxbert" not in _native.problems
    block = (FIX / "bz32/1n8g/bert_b32_fp32_1.log").read_text()
    got = _cmxbert.scan(block)
    assert got is not None and len(got[2]) == block.count("throughput=")
    assert _cmxbert.scan("caf\u00e9 [step 1]\n") is None  # not ASCII: the Python path
    with pytest.raises(TypeError):
        _cmxbert.scan(b"[step 1]")


# ------------------------------------------------------------------ the split
@pytest.mark.parametrize("path", LOGS, ids=lambda p: str(p.relative_to(FIX)))
def test_scan_equals_the_regex_split_on_the_fixtures(path):
    text = path.read_text()
    assert _split_check(text)
    assert _split_check(_bench_4n8g(text))


@pytest.mark.parametrize("line", [
    "[step 7]\tmlm_loss=7.1\tnsp_loss=0.7\tthroughput=1 latency=250.1ms/batch\n",  # \S+ gives back
    "[step 7]\tmlm_loss=7.1\tnsp_loss=0.7\tthroughput=1 latency=250.1ms/batchms/batch\n",
    "[step 7]\tmlm_loss=7.1\tnsp_loss=0.7\tthroughput=1 latency=1 ms/batch latency=2 ms/batch\n",  # the last
    "[step 7]\tmlm_loss=7.1\tnsp_loss=0.7\tthroughput=1 latency=1 ms/batch latency=x\n",  # last fails: first
    "[step 7]\tmlm_loss=7.1\tnsp_loss=0.7\tthroughput=1 latency=\n250 ms/batch\n",  # \s crosses lines
    "[step 7]\tmlm_loss=7.1\tnsp_loss=0.7\tthroughput=1 latency=250\n\nms/batch\n",
    "[step 7]\x1cmlm_loss=\x1d7.1\x1ensp_loss=\x1f0.7\x0bthroughput=1 latency=\x0c250\rms/batch\n",
    "[step 7]mlm_loss=7.nsp_loss=0.7 throughput=1 latency=250 ms/batch\n",
    "[step 7]\tmlm_loss=7.\tnsp_loss=0.7\tthroughput=1 latency=250 ms/batch\n",
    "[step 7]\tmlm_loss=-7.5\tnsp_loss=-0\tthroughput=1 latency=250 ms/batch\n",
    "[step 7]\tmlm_loss=7.5\tnsp_loss=0.7\tthroughput=latency=250 ms/batch\n",
    "[step 7]\tmlm_loss=7.5\tnsp_loss=0.7\tthroughput= latency= ms/batch\n",
    "[step 7]\tmlm_loss=7.5\tnsp_loss=0.7\tthroughput=1 latency=250 ms/step\n",
    "[step 7]\tmlm_loss=7.5\tnsp_loss=0.7\tthroughput=1 time=0.25\n",
    "[step [step 7]\tmlm_loss=7.5\tnsp_loss=0.7\tthroughput=1 latency=250 ms/batch\n",
    "[step 7] [step 8]\tmlm_loss=7.5\tnsp_loss=0.7\tthroughput=1 latency=250 ms/batch\n",
    "[step 007]\tmlm_loss=7.5\tnsp_loss=0.7\tthroughput=1 latency=250 ms/batch\n",
    "[step 123456789012345678]\tmlm_loss=7.5\tnsp_loss=0.7\tthroughput=1 latency=250 ms/batch\n",
    "[step 1234567890123456789]\tmlm_loss=7.5\tnsp_loss=0.7\tthroughput=1 latency=250 ms/batch\n",
    "INFO:roINFO:root:ot:[step 7]\tmlm_loss=7.5\tnsp_loss=0.7\tthroughput=1 latency=250 ms/batch\n",
    "[step 7]\tmlm_loss=7.5\tnsp_loss=0.7\tthroughput=1 latency=250 ms/batch",  # no newline at the end
    "[step 7]\tmlm_loss=7.5\tnsp_loss=0.7\tthroughput=1 latency=250 ms/bat",  # cut
    "", "[", "[step ", "[step 1]", "latency=1 ms/batch",
] + [f"[step 7]\tmlm_loss=7.5\tnsp_loss=0.7\tthroughput=1 latency={t} ms/batch\n" for t in ODD])
def test_scan_follows_the_regex_on_odd_lines(line):
    _split_check(line)
    _split_check(LINE.format(s=1, mlm="7.1", nsp="0.7", lat="240.9") + line + "tail\n")


def test_latency_values_are_the_doubles_float_gives():
    rng = random.Random(3)
    toks = []
    for _ in range(3000):
        a = "".join(rng.choice("0123456789") for _ in range(rng.randint(0, 17)))
        b = "".join(rng.choice("0123456789") for _ in range(rng.randint(0, 24)))
        toks.append(rng.choice([a + "." + b, a, "." + b, a + "."]))
    toks += ["0.1", "0.3", "9007199254740993", "999999999999999.9", "1" * 15 + "." + "9" * 22, "5e-324"]
    read = 0
    for t in toks:
        read += _split_check(f"[step 1]\tmlm_loss=1\tnsp_loss=1\tthroughput=x latency={t} ms/batch\n")
    assert read > 2000  # the usual tokens are read in C, not sent back


# ------------------------------------------------------------------ the whole parse
@pytest.mark.parametrize("path", LOGS, ids=lambda p: str(p.relative_to(FIX)))
def test_parsed_log_same_on_the_fixtures(monkeypatch, path):
    raw = path.read_bytes()
    text = raw.decode()
    _both(monkeypatch, raw)
    _both(monkeypatch, raw, list(range(0, len(raw), 4096)))  # blocks cut mid-line
    _both(monkeypatch, raw, list(range(0, len(raw), 100_000)), keep=False)
    big = _bench_4n8g(text)
    _both(monkeypatch, big, [len(big) // 3, len(big) // 2 + 17])
    _both(monkeypatch, text.replace("INFO:root:", ""))
    _both(monkeypatch, text.replace("\n", "\r\n").encode())
    _both(monkeypatch, text.replace("\n", "\r"))


def _variants(rng: random.Random) -> dict[str, str]:
    ns = ("INFO:root:Namespace(accumulate=1, dtype='float32', log_interval={i}, num_steps=200, "
          "total_batch_size=64, total_batch_size_eval=64)\n")
    base = ns.format(i=1) + _lines(200, 2, rng)
    tag = "".join(f"[1,{k % 2}]<stderr>:{line}\n" for k, line in enumerate(base.splitlines()))
    no_lat = ns.format(i=10) + "".join(
        f"INFO:root:[step {s}]\tmlm_loss=7.1\tmlm_acc=4.5\tnsp_loss=0.7\tnsp_acc=51.0\tthroughput=16.0K tks/s"
        f"\tlr=0.0000505 time=2.{s % 7}0\n" for s in range(10, 201, 10) for _ in range(2))
    acc_step = base.replace("\tnsp_loss", "\tmlm_acc=45.1\tnsp_loss").replace("ms/batch", "ms/step")
    lines = base.splitlines(keepends=True)
    mixed = "".join(ln.replace(" ms/batch", " ms/batch é") if k % 97 == 5 else ln for k, ln in enumerate(lines))
    nul = "".join(ln.replace("mlm_loss", "mlm\x00_loss") if k % 50 == 3 else ln for k, ln in enumerate(lines))
    odd = "".join(ln.replace("latency=", f"latency={ODD[k % len(ODD)]} x latency=") if k % 40 == 7 else ln
                  for k, ln in enumerate(lines))
    bad_lat = "".join(ln.replace(ln[ln.index("latency=") + 8:ln.index(" ms/")], ODD[k % len(ODD)])
                      if k % 60 == 9 else ln for k, ln in enumerate(lines))
    bad_loss = "".join(ln.replace("mlm_loss=", "mlm_loss=nan") if k % 70 == 9 else ln for k, ln in enumerate(lines))
    huge_step = base.replace("[step 150]", "[step 1234567890123456789012]").replace("[step 151]", "[step " + "9" * 4000 + "]")
    repeated = base + _lines(10, 2, rng, start=190)
    cut = "".join(ln[: len(ln) // 2] + "\n" if k % 33 == 0 else ln for k, ln in enumerate(lines))
    return {"base": base, "tagged": tag, "no_latency": no_lat, "acc_ms_per_step": acc_step, "non_ascii": mixed,
            "nul": nul, "two_latencies": odd, "odd_latency": bad_lat, "nan_loss": bad_loss, "huge_step": huge_step,
            "repeated_steps": repeated, "truncated_lines": cut, "no_info_prefix": base.replace("INFO:root:", ""),
            "crlf": base.replace("\n", "\r\n"), "crash": base + "Traceback (most recent call last):\nKilled\n",
            "midnight": "".join(f"2020-01-01 23:59:{59 - k % 2:02d} {ln}" if k % 2 else ln for k, ln in enumerate(lines))}


@pytest.mark.parametrize("name", list(_variants(random.Random(0))))
def test_parsed_log_same_on_generated_variants(monkeypatch, name):
    text = _variants(random.Random(5))[name]
    _split_check(text)
    _both(monkeypatch, text)
    _both(monkeypatch, text.encode(), list(range(0, len(text), 3000)))


def test_fuzz_mutated_lines_same_split_and_parse(monkeypatch):
    """``make fuzz`` runs more cases, from its own seed, against a sanitizer build (scripts/fuzz-scanners.sh)."""
    build = os.environ.get("DLPERF_FUZZ_BUILD")
    assert build is None or M._native.mxbert_scan.__module__ == "dlperf_tasks.frameworks._cmxbert"
    rng = random.Random(28 + int(os.environ.get("DLPERF_FUZZ_SEED", "0")))
    real = [ln for ln in (FIX / "bz32/1n8g/bert_b32_fp32_1.log").read_text().splitlines(keepends=True)
            if "[step" in ln][:400]
    alphabet = list("0123456789.-+e \t\n\r\x1c\x0b[]=msbatchlyn/_") + ["\x00", "é", "ms/batch", "latency=",
                                                                     "[step ", "INFO:root:", "nan", "]<std"]
    for case in range(int(os.environ.get("DLPERF_FUZZ_CASES", "300"))):
        lines = [rng.choice(real) for _ in range(rng.randint(1, 12))]
        for _ in range(rng.randint(1, 4)):
            k = rng.randrange(len(lines))
            ln = lines[k]
            i = rng.randrange(len(ln) + 1)
            op = rng.random()
            if op < 0.4:
                ln = ln[:i] + rng.choice(alphabet) + ln[i:]
            elif op < 0.7:
                ln = ln[:i] + ln[i + rng.randint(1, 5):]
            else:
                ln = ln[:i] + rng.choice(alphabet) + ln[i + 1:]
            lines[k] = ln
        text = "".join(lines)
        _split_check(text)
        _both(monkeypatch, text, [rng.randrange(len(text) + 1)] if case % 3 == 0 else None)


# ------------------------------------------------------------------ extract and the trial metric
def test_extract_results_same_on_the_fixture_trees(monkeypatch, tmp_path):
    from dlperf_tasks.catalog.loader import load_suite
    from dlperf_tasks.core.model import Window
    from dlperf_tasks.measure.extract import extract_tree

    root = tmp_path / "t"
    shutil.copytree(FIX / "bz32", root / "bz32")
    big = root / "bz32" / "4n8g"
    big.mkdir()
    (big / "bert_b32_fp32_1.log").write_text(_bench_4n8g((FIX / "bz32/1n8g/bert_b32_fp32_1.log").read_text()))

    def run():
        res = extract_tree(load_suite("mxnet-bert"), root, 32, Window(100, 100))
        return [(t.trial.cell.topology.label if hasattr(t.trial.cell.topology, "label") else str(t.trial.cell.topology),
                 t.status, t.reason, repr(t.metric), _canon_samples(t.samples)) for t in res.trials]

    fast = run()
    monkeypatch.setattr(_native, "mxbert_scan", None)
    assert run() == fast
    assert len(fast) == 3 and all(t[1].value == "OK" for t in fast), fast


def _canon_samples(s) -> str:
    return repr([list(getattr(s, n)) for n in ("iteration", "value", "unit", "rank", "loss")])


def test_median_speeds_same_doubles_as_statistics_median():
    import statistics

    from dlperf_tasks.core.model import Samples

    rng = random.Random(11)
    for case in range(120):
        world = rng.randint(1, 9)
        rows = [(step, rng.choice([rng.uniform(1e-3, 1e4), round(rng.uniform(200, 300), 1)]))
                for step in range(1, 41) for _ in range(world + (step % 3 == 0 and case % 2))]
        if case % 5 == 0:
            rng.shuffle(rows)  # not in step order: the generic path
        if case % 7 == 0:
            rows[rng.randrange(len(rows))] = (25, rng.choice([math.inf, math.nan, -1.0, 0.0, 250, 1e308]))
        if case % 11 == 0:
            rows[rng.randrange(len(rows))] = (rng.choice([2**70, -5, 0]), 250.0)
        s = Samples()
        s.add_columns([r[0] for r in rows], [r[1] for r in rows], "ms/iter")
        k = 1000.0 * rng.choice([1, 32, 48]) * world
        lo, hi = (10, 30) if case % 4 else (rng.randint(-2, 45), rng.randint(-2, 45))

        def want():
            return {i: statistics.median(v) for i, v in M._speeds_by_step(s, lo, hi, k).items()}

        assert _outcome(lambda: M._median_speeds(s, lo, hi, k)) == _outcome(want)


def _outcome(fn) -> str:
    try:
        return repr(fn())
    except Exception as exc:  # e.g. a 0.0 latency: ZeroDivisionError both ways
        return type(exc).__name__


def test_no_leak_over_many_scans():
    scan = _scan_c()
    ok = LINE.format(s=3, mlm="7.1", nsp="0.7", lat="240.9") * 50 + "INFO:root:Namespace(x=1)\n"
    back = ok + "[step 1]\tmlm_loss=1\tnsp_loss=1\tthroughput=x latency=1e3 ms/batch\n"
    for _ in range(200):
        scan(ok), scan(back)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(5000):
            scan(ok), scan(back), scan("caf\u00e9")
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 64 * 1024, grown
