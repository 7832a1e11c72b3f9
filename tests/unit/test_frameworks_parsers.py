"""Framework log parsers + DLPerf speed rules on the fixture logs (tests/data/fixture_logs).

The expected speeds are the numbers DLPerf's own extractors print for these files
(see each fixture directory's README.md). Truncated, garbage, NaN and binary inputs
must give a clear ``check`` reason, never an exception.
"""

from __future__ import annotations

import itertools
import tracemalloc
from pathlib import Path

import pytest

from dlperf_tasks.frameworks import get
from dlperf_tasks.frameworks._lines import read_log, split_chunks, split_lines, strip_tag
from dlperf_tasks.core.model import Cell, MetricKind, ParallelLayout, Window
from dlperf_tasks.core.topology import Topology

FIX = Path(__file__).resolve().parents[1] / "data" / "fixture_logs"
FRAMEWORKS = ["mxnet_bert", "mxnet_resnet50", "pytorch_bert", "tensorflow_bert", "megatron_gpt"]

DP1 = ParallelLayout("DP", "DP_1x1x1_2_1536x16", 1, 1, 1, 2, 2, 1536, 16, 16)
DP16 = ParallelLayout("DP", "DP_16x1x1_32_1536x16", 16, 1, 1, 2, 32, 1536, 16, 16)
MEG1 = "megatron_gpt/megatron_lm_perf_1n1g_dp1_mp1_pp1_mbs2_gbs2_l16_hsz1536_ahs16_pretrain_0.log"
MEG2_LAST = "megatron_gpt/megatron_lm_perf_2n8g_dp16_mp1_pp1_mbs2_gbs32_l16_hsz1536_ahs16_pretrain_1.log"
MEG2_NODE0 = "megatron_gpt/megatron_lm_perf_2n8g_dp16_mp1_pp1_mbs2_gbs32_l16_hsz1536_ahs16_pretrain_0.log"
PT = "pytorch_bert/fp16_ngc_bert_b96/pytorch"


def _precision_of(path: str) -> str:
    """The precision DLPerf's log name states (``_fp16_``: AMP), which the log's own arguments say too."""
    return "amp" if "_fp16_" in path else "fp32"


def cell(fw: str, bsz: int, topo: str, window: Window = Window(), precision: str = "fp32", layout=None) -> Cell:
    return Cell(suite=fw.replace("_", "-"), framework=fw, model="m", precision=precision,
                batch_size_per_device=bsz, topology=Topology.parse(topo), layout=layout, window=window)


# (framework, fixture, batch/device, topology, window, DLPerf speed)
FIXTURE_SPEEDS = [
    ("mxnet_bert", "mxnet_bert/bz32/1n1g/bert_b32_fp32_1.log", 32, "1n1g", Window(100, 100), 149.86),
    ("mxnet_bert", "mxnet_bert/bz32/1n8g/bert_b32_fp32_1.log", 32, "1n8g", Window(100, 100), 1056.34),
    ("mxnet_bert", "mxnet_bert/tag_output_variant/1n2g/bert_b32_fp32_1.log", 32, "1n2g", Window(100, 100), 269.76),
    ("mxnet_resnet50", "mxnet_resnet50/bz128/1n1g/rn50_b128_fp32_1.log", 128, "1n1g", Window(20, 100), 384.05),
    ("mxnet_resnet50", "mxnet_resnet50/bz128/1n8g/rn50_b128_fp32_1.log", 128, "1n8g", Window(20, 100), 2555.20),
    # DLPerf README invocation --warmup_batches 20 --train_batches 120 == Window(20, 100)
    ("pytorch_bert", f"{PT}/1n1g/bert-base-adam-training_b96_fp16_1.log", 96, "1n1g", Window(20, 100), 463.11),
    ("pytorch_bert", f"{PT}/2n8g/bert-base-adam-training_b96_fp16_1.log", 96, "2n8g", Window(20, 100), 5431.78),
    # the extractor's defaults 20/110 == Window(20, 90)
    ("pytorch_bert", f"{PT}/1n1g/bert-base-adam-training_b96_fp16_1.log", 96, "1n1g", Window(20, 90), 463.13),
    ("pytorch_bert", f"{PT}/2n8g/bert-base-adam-training_b96_fp16_1.log", 96, "2n8g", Window(20, 90), 5431.76),
    ("tensorflow_bert", "tensorflow_bert/bz32/1n1g/bert_b32_fp32_1.log", 32, "1n1g", Window(20, 100), 103.60),
    ("tensorflow_bert", "tensorflow_bert/bz32/1n8g/bert_b32_fp32_1.log", 32, "1n8g", Window(20, 100), 675.92),
]


@pytest.mark.parametrize("fw,path,bsz,topo,window,expected", FIXTURE_SPEEDS,
                         ids=[f"{c[0]}-{c[3]}-{c[4].warmup}/{c[4].measure}" for c in FIXTURE_SPEEDS])
def test_fixture_speed_matches_dlperf(fw, path, bsz, topo, window, expected):
    f = get(fw)
    parsed = f.parse(read_log(str(FIX / path)))
    c = cell(fw, bsz, topo, window, precision=_precision_of(path))
    assert f.check(parsed, c, window) == []
    assert parsed.facts.crash_markers == []
    assert parsed.facts.errors == []
    m = f.trial_metric(parsed, c, window)
    assert m.kind == MetricKind.THROUGHPUT
    assert m.value == expected


@pytest.mark.parametrize("fw,path,bsz,topo,window,expected", FIXTURE_SPEEDS[:3] + FIXTURE_SPEEDS[5:7])
def test_parse_accepts_open_text_file_too(fw, path, bsz, topo, window, expected):
    """A text file object (universal newlines) gives the same result as the streaming reader."""
    f = get(fw)
    with open(FIX / path, encoding="utf-8", errors="replace") as fh:
        parsed = f.parse(fh)
    assert f.trial_metric(parsed, cell(fw, bsz, topo, window), window).value == expected


def test_megatron_fixture_latency_memory_throughput():
    f = get("megatron_gpt")
    w = Window(10, 120)  # 130 iterations, drop the first log line (README: "mean without the first line")
    p1 = f.parse(read_log(str(FIX / MEG1)))
    c1 = cell("megatron_gpt", 2, "1n1g", w, "amp", DP1)
    assert f.check(p1, c1, w) == []
    m1 = f.trial_metric(p1, c1, w)
    assert (m1.kind, m1.value, m1.throughput) == (MetricKind.LATENCY, 464.12, 4.31)
    assert m1.memory_mib == 13694.0  # "max reserved" of the memory line
    assert p1.extra["memory_mb"]["max_allocated"] == pytest.approx(12234.794921875)

    c2 = cell("megatron_gpt", 2, "2n8g", w, "amp", DP16)
    assert f.metrics_nodes(c2) == [1]
    last = f.parse(read_log(str(FIX / MEG2_LAST)))
    m2 = f.trial_metric(last, c2, w)
    assert (m2.value, m2.throughput, m2.memory_mib) == (664.22, 48.18, None)
    # node 0 has no iteration line: clear reason
    node0 = f.parse(read_log(str(FIX / MEG2_NODE0)))
    assert "only in the last node's log" in f.check(node0, c2, w)[0]
    # both logs as one stream: latency from the last node, memory from node 0
    both = f.parse(itertools.chain(read_log(str(FIX / MEG2_NODE0)), read_log(str(FIX / MEG2_LAST))))
    m3 = f.trial_metric(both, c2, w)
    assert (m3.value, m3.memory_mib) == (664.22, 13694.0)


def _truncate(path: Path, keep: float) -> list[str]:
    lines = path.read_text(errors="replace").splitlines(keepends=True)
    return lines[: int(len(lines) * keep)]


@pytest.mark.parametrize("fw,path,bsz,topo,window,expected", [FIXTURE_SPEEDS[i] for i in (0, 1, 3, 5, 9)])
def test_truncated_fixture_fails_check_with_reason(fw, path, bsz, topo, window, expected):
    f = get(fw)
    parsed = f.parse(_truncate(FIX / path, 0.5))
    reasons = f.check(parsed, cell(fw, bsz, topo, window, precision=_precision_of(path)), window)
    assert reasons, "a half log must be invalid"
    assert f"of {window.total} iterations" in reasons[0] and "only" in reasons[0]


def test_megatron_truncated_fails_check():
    f = get("megatron_gpt")
    w = Window(10, 120)
    parsed = f.parse(_truncate(FIX / MEG1, 0.85))
    reasons = f.check(parsed, cell("megatron_gpt", 2, "1n1g", w, "amp", DP1), w)
    assert reasons and reasons[0].startswith("only ") and "of 130 iterations" in reasons[0]


def test_mxnet_bert_missing_rank_lines_named():
    """1n8g log with rank lines removed: per-step count (untagged) and rank names (tagged)."""
    f = get("mxnet_bert")
    w = Window(100, 100)
    lines = (FIX / "mxnet_bert/bz32/1n8g/bert_b32_fp32_1.log").read_text().splitlines()
    # drop one rank's line of step 150
    idx = next(i for i, l in enumerate(lines) if "[step 150]\t" in l)
    parsed = f.parse(lines[:idx] + lines[idx + 1:])
    reasons = f.check(parsed, cell("mxnet_bert", 32, "1n8g", w), w)
    assert reasons == ["step 150 has 7 of 8 rank lines"]

    tagged = [l for l in (FIX / "mxnet_bert/tag_output_variant/1n2g/bert_b32_fp32_1.log").read_text().splitlines()
              if not (l.startswith("[1,1]") and "throughput=" in l)]
    parsed = f.parse(tagged)
    reasons = f.check(parsed, cell("mxnet_bert", 32, "1n2g", w), w)
    assert "rank 1 printed no iteration line" in reasons
    assert parsed.facts.ranks_seen == [0]


def test_mxnet_bert_wrong_world_size_detected():
    """An 8-rank log checked against a 1n4g cell: each step has 8 lines, not 4."""
    f = get("mxnet_bert")
    w = Window(100, 100)
    parsed = f.parse(read_log(str(FIX / "mxnet_bert/bz32/1n8g/bert_b32_fp32_1.log")))
    reasons = f.check(parsed, cell("mxnet_bert", 32, "1n4g", w), w)
    assert any(r.startswith("step 1 has 8 of 4 rank lines") for r in reasons), reasons
    # and the run's own Namespace line names both batch figures
    assert "log's total_batch_size is 256 (gluon-nlp Namespace line), the cell's is 128 (32 x 4 GPUs)" in reasons


def test_nan_and_garbage_values_recorded_not_raised():
    lines = (FIX / "mxnet_resnet50/bz128/1n1g/rn50_b128_fp32_1.log").read_text().splitlines()
    bad = [l.replace("Speed: ", "Speed: nan") if "Batch[50]\tSpeed" in l else l for l in lines]
    f = get("mxnet_resnet50")
    parsed = f.parse(bad)
    assert any("batch 50" in e and "not a positive finite number" in e for e in parsed.facts.errors)
    reasons = f.check(parsed, cell("mxnet_resnet50", 128, "1n1g"), Window())
    assert reasons and "missing batches 50" in reasons[0]

    mx = (FIX / "mxnet_bert/bz32/1n1g/bert_b32_fp32_1.log").read_text().splitlines()
    mx = [l.replace("latency=", "latency=inf") if "[step 7]\t" in l else l for l in mx]
    parsed = get("mxnet_bert").parse(mx)
    assert any("step 7 latency" in e for e in parsed.facts.errors)

    meg = (FIX / MEG1).read_text().splitlines()
    meg = [l.replace("(ms): 464.8", "(ms): -5") for l in meg]
    parsed = get("megatron_gpt").parse(meg)
    assert any("iteration 40" in e for e in parsed.facts.errors)


GARBAGE = [
    [],
    [""],
    ["\x00\x01\x02\xff" * 1000],
    [b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)) * 50],
    ["INFO:root:[step x]\tthroughput=abcK tks/s latency=nan ms/batch", "[step 1] throughput= latency= ms/batch"],
    ["DLL 2020-13-45 99:99:99.1 - Training Epoch: 0 Training Iteration: 30  average_loss : x "],
    ["I9999 25:61:61.000001 1 x.py:1] Train Step: 5/120  / loss = nan", "Train Step: 7/"],
    [" iteration 10/ 130 | elapsed time per iteration (ms): nan |", "memory (MB) | [Rank 0] (after 1 iterations) memory (MB) | allocated: x"],
    ["Epoch[0] Batch[3]\tSpeed: -1e309 samples/sec", "Epoch[0] Batch[]\tSpeed: samples/sec"],
    ["x" * 1_000_000],
]


@pytest.mark.parametrize("fw", FRAMEWORKS)
@pytest.mark.parametrize("case", range(len(GARBAGE)))
def test_garbage_never_raises(fw, case):
    f = get(fw)
    parsed = f.parse(GARBAGE[case])
    c = cell(fw, 32, "1n1g", Window(), "amp", DP1 if fw == "megatron_gpt" else None)
    reasons = f.check(parsed, c, Window())
    assert reasons and all(isinstance(r, str) and r for r in reasons)


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_binary_file_streams(tmp_path, fw):
    p = tmp_path / "binary.log"
    p.write_bytes(bytes(range(256)) * 20000 + b"\xff\xfe" * 100000)  # 5 MB, no useful newlines
    f = get(fw)
    parsed = f.parse(read_log(str(p)))
    assert parsed.samples == []


def test_crash_markers_detected():
    lines = [
        "Traceback (most recent call last):",
        "RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB",
        "NCCL error in: /opt/pytorch/ProcessGroupNCCL.cpp:784, unhandled system error",
        "/bin/bash: line 1: 4242 Killed                  python3 train.py",
        "mpirun noticed that process rank 3 with PID 0 on node node2 exited on signal 9 (Killed).",
        "node1:41200:41200 [0] NCCL INFO Using network IB",  # noise, not a crash
    ]
    parsed = get("pytorch_bert").parse(lines)
    names = [m.split(":")[0] for m in parsed.facts.crash_markers]
    assert names == ["Traceback", "CUDA out of memory", "NCCL error", "Killed", "exited on signal"]


def test_huge_log_streams_in_constant_memory():
    """~12 MB of noise (100k lines) around a valid RN50 log: parsed from a generator without holding it."""
    f = get("mxnet_resnet50")
    base = (FIX / "mxnet_resnet50/bz128/1n1g/rn50_b128_fp32_1.log").read_text().splitlines(keepends=True)
    noise = "node1:41200:41200 [0] NCCL INFO Channel 00/02 :    0   1   2   3   4   5   6   7 " * 3 + "\n"

    def gen():
        for line in base:
            yield line
            if "Batch[" in line:
                for _ in range(400):
                    yield noise

    tracemalloc.start()
    parsed = f.parse(gen())
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert parsed.facts.lines > 95_000
    assert peak < 20 * 1024 * 1024, f"peak {peak / 1e6:.1f} MB"
    assert f.trial_metric(parsed, cell("mxnet_resnet50", 128, "1n1g"), Window()).value == 384.05


def test_line_splitting_helpers():
    assert list(split_lines(["a\n", "\rIteration: 1\rIteration: 2DLL x\n", b"z\xff\r\n"])) == \
        ["a", "", "Iteration: 1", "Iteration: 2DLL x", "z\ufffd"]
    assert list(split_chunks(["ab", "c\r", "\nd\re", "f"])) == ["abc", "d", "ef"]
    assert strip_tag("[1,12]<stderr>:INFO:root:x") == (12, "INFO:root:x")
    assert strip_tag("INFO:root:[1,2]<stderr>:") == (None, "INFO:root:[1,2]<stderr>:")


def test_tensorflow_midnight_crossing():
    """DLPerf broke on runs crossing midnight; the absl date makes it work."""
    f = get("tensorflow_bert")
    lines = []
    t0 = 23 * 3600 + 59 * 60 + 30.0
    for k in range(1, 121):
        t = t0 + k * 0.5
        day = 2 + int(t // 86400)
        t %= 86400
        lines.append(f"I09{day:02d} {int(t // 3600):02d}:{int(t % 3600 // 60):02d}:{t % 60:09.6f} 1 "
                     f"model_training_utils.py:444] Train Step: {k}/120  / loss = 1.0")
    parsed = f.parse(lines)
    c = cell("tensorflow_bert", 32, "1n1g")
    assert f.check(parsed, c, Window()) == []
    assert f.trial_metric(parsed, c, Window()).value == 64.0  # 32 samples / 0.5 s


def test_pytorch_step_line_without_a_loss_is_read_not_a_crash():
    """A DLL step line that prints no loss (a log cut by a kill, a dllogger call with other data)
    used to raise TypeError in the column fast path and take the whole extraction down."""
    lines = [f"DLL 2020-09-24 03:15:{10 + i:02d}.{i:06d} - Training Epoch: 0 Training Iteration: {i}  "
             f"average_loss : {11 - i * 0.01:.5f}  step_loss : 9.5" for i in range(1, 6)]
    lines.insert(3, "DLL 2020-09-24 03:15:13.500000 - Training Epoch: 0 Training Iteration: 7")
    p = get("pytorch_bert").parse(lines)
    assert [s.iteration for s in p.samples] == [1, 2, 3, 7, 4, 5]
    assert p.samples[3].loss is None and p.samples[3].value == pytest.approx(1600917313.5)
    assert p.samples[0].value == pytest.approx(1600917311.000001)
    assert p.facts.final_loss == pytest.approx(10.95) and not p.facts.errors


def test_resnet50_speeds_rounded_to_two_decimals_whatever_the_log_prints():
    """gluon-cv prints %.2f (kept as is); a log with more decimals is rounded like DLPerf's round(v, 2)."""
    two = get("mxnet_resnet50").parse([f"INFO:root:Epoch[0] Batch[{i}]\tSpeed: {1000 + i}.25 samples/sec"
                                       for i in range(1, 4)])
    more = get("mxnet_resnet50").parse([f"INFO:root:Epoch[0] Batch[{i}]\tSpeed: {1000 + i}.256 samples/sec"
                                        for i in range(1, 4)])
    assert [s.value for s in two.samples] == [1001.25, 1002.25, 1003.25]
    assert [s.value for s in more.samples] == [1001.26, 1002.26, 1003.26]


def test_tqdm_block_glyphs_are_read_as_hashes_and_change_nothing_else():
    """Bytes fed to a stream: tqdm's bar glyphs (U+2580-U+259F) become '#', so the text is ASCII
    (faster to search); samples and crash markers are those of the text with the glyphs."""
    bar = "Iteration:  40%|\u2589\u2589\u2589\u258c      | 4/10 [00:01<00:02,  2.1it/s]"
    dll = ("DLL 2020-09-24 03:15:{:02d}.500000 - Training Epoch: 0 Training Iteration: {}  "
           "average_loss : 10.5  step_loss : 9.5\n")
    text = "".join(bar + "\r" + dll.format(10 + i, i) for i in range(1, 4)) + bar + "\rTraceback (most recent call last):\n"
    st = get("pytorch_bert").stream()
    seen = []
    orig = st.scan
    st.scan = lambda block: (seen.append(block), orig(block))[1]
    st.feed(text.encode())
    p = st.close()
    assert all(b.isascii() for b in seen) and "|###\u258c" not in "".join(seen) and "|####" in "".join(seen)
    q = get("pytorch_bert").parse([text])  # str input: glyphs kept
    assert list(p.samples) == list(q.samples) and len(p.samples) == 3
    assert p.facts.crash_markers == q.facts.crash_markers == ["Traceback: Traceback (most recent call last):"]
