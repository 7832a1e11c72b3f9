"""Markdown (and DLPerf plain-text) rendering of a result dict (see result_json.py).

Table styles reproduce the seeds:

* ``"dlperf"`` (seeds 000 and 004)::

    | node_num | gpu_num | samples/s | speedup |
    | -------- | ------- | --------- | ------- |
    | 1        | 1       | 127.05    | 1.00    |
    | 1        | 8       | 928.03    | 7.3     |

  samples/s with 2 decimals, speedup as Python prints the rounded float, the baseline as 1.00;
* ``"compact"`` (seed 003): ``node_num | gpu_num | samples/s | speedup |`` rows with the values
  as Python prints them and the baseline as ``1``;
* latency workloads (Megatron, seed 002): ``group | case | latency | memory``.

A speedup that cannot be computed is shown as ``n/a`` with a footnote (never 1.0).

The seed tables above keep the seeds' number format (byte for byte); every other table (per-trial
speeds, dispersion, invalid trials) uses :mod:`.numbers`: 2 decimals, the CV as a percentage.
"""

from __future__ import annotations

import pprint
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from dlperf_tasks.report.numbers import num2, pct
from dlperf_tasks.report.flags import flags_lines
from dlperf_tasks.report.llm_summary import llm_table
from dlperf_tasks.report.probe_summary import probe_table

_TP_HEADER = ["node_num", "gpu_num", "samples/s", "speedup"]
_FULL_HEADER = ["node_num", "gpu_num", "median", "average", "min", "max", "stdev", "cv %",
                "valid", "invalid", "speedup", "efficiency"]

_STATE_TEXT = {
    "missing_baseline": "n/a (no valid 1n1g baseline)",
    "no_valid_trials": "n/a (no valid trial)",
    "not_applicable": "n/a",
}


def _py(v: Any) -> str:
    """A number as Python prints it (DLPerf's dicts and seed 003's tables)."""
    return "-" if v is None else str(v)


def _f2(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def padded_table(header: list[str], rows: Iterable[list[str]]) -> str:
    """Seeds 000/004 layout: columns padded to the header width."""
    widths = [len(h) for h in header]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("-" * w for w in widths) + " |"]
    for row in rows:
        lines.append("| " + " | ".join(str(c).ljust(w) for c, w in zip(row, widths)) + " |")
    return "\n".join(lines)


def compact_table(header: list[str], rows: Iterable[list[str]]) -> str:
    """Seed 003 layout: ``a | b | c |`` rows under a ``---|---|`` rule."""
    lines = [" | ".join(header) + " |", "|".join("---" for _ in header) + "|"]
    for row in rows:
        lines.append(" | ".join(str(c) for c in row) + " |")
    return "\n".join(lines)


def _speedup_text(cell: Mapping[str, Any], style: str) -> str:
    state = cell.get("speedup_state")
    sp = cell.get("speedup")
    if sp is None:
        return "n/a"
    if state == "baseline":
        return "1.00" if style == "dlperf" else "1"
    return _py(sp)


def throughput_table(cells: list[Mapping[str, Any]], style: str = "dlperf") -> str:
    """One seed-style table for cells of one model/precision/batch size."""
    rows = []
    for c in cells:
        median = c.get("median_speed")
        if style == "dlperf":
            speed = _f2(median) if median is not None else "n/a"
        else:
            speed = _py(median) if median is not None else "n/a"
        rows.append([str(c["nodes"]), str(c["gpus"]), speed, _speedup_text(c, style)])
    if style == "compact":
        return compact_table(_TP_HEADER, rows)
    if style != "dlperf":
        raise ValueError(f"unknown table style {style!r}: expected 'dlperf' or 'compact'")
    return padded_table(_TP_HEADER, rows)


def latency_table(cells: list[Mapping[str, Any]]) -> str:
    """Seed 002 layout, grouped by parallel group (DP / MP / 2D / PP). Seed 002's memory column is
    nvidia-smi's per-GPU MiB: with GPU telemetry (``gpu_memory_mib``) that is the memory column and
    the log's allocator figure (``memory_mib``, Megatron's ``max reserved``) stands beside it; without
    telemetry the one memory column is the allocator's (:func:`memory_note` says which)."""
    smi = any(c.get("gpu_memory_mib") is not None for c in cells)
    head = (["group | case | latency | memory (nvidia-smi) | allocator (log)", "-- | -- | -- | -- | --"] if smi
            else ["group | case | latency | memory", "-- | -- | -- | --"])
    lines = list(head)
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for c in cells:
        groups.setdefault(c.get("layout_group") or "-", []).append(c)
    for group, members in groups.items():
        lines.append(f"{group} |  |  | " + (" | " if smi else ""))
        for c in members:
            lat = c.get("median_speed")
            lat_s = f"{_py(lat)} (ms)" if lat is not None else "n/a"
            mems = [c.get("gpu_memory_mib"), c.get("memory_mib")] if smi else [c.get("memory_mib")]
            mem_s = " | ".join(f"{m:.0f} (MiB)" if m is not None else "n/a" for m in mems)
            lines.append(f" -- | {c.get('layout_case') or c['topology']} | {lat_s} | {mem_s}")
    return "\n".join(lines)


def memory_note(cells: list[Mapping[str, Any]]) -> str:
    """One line saying what the latency table's memory figures are."""
    if any(c.get("gpu_memory_mib") is not None for c in cells):
        return ("memory (nvidia-smi): the largest per-GPU `memory.used` the GPU telemetry sampled over the cell's "
                "valid trials, seed 002's column; allocator (log): the framework's own peak (Megatron's "
                "`max reserved`, torch caching allocator), which leaves out the CUDA context.")
    return ("memory: the framework's own allocator peak from the log (Megatron's `max reserved`); no GPU "
            "telemetry in this run, so not nvidia-smi's figure (seed 002's column adds the CUDA context).")


def _config_groups(cells: list[Mapping[str, Any]]) -> dict[tuple, list[Mapping[str, Any]]]:
    groups: dict[tuple, list[Mapping[str, Any]]] = {}
    for c in cells:
        if c.get("metric_kind") != "throughput":
            continue
        key = (c.get("model"), c.get("precision"), bool(c.get("xla")), c.get("batch_size_per_device"))
        groups.setdefault(key, []).append(c)
    return groups


def _prec_label(precision: str) -> str:
    return "FP32" if precision == "fp32" else "AMP (fp16)" if precision == "amp" else str(precision).upper()


def _heading(key: tuple) -> str:
    model, precision, xla, bz = key
    return f"{model} {_prec_label(precision)} batch_size = {bz} & {'with' if xla else 'without'} xla"


def _trial_cell(t: Mapping[str, Any]) -> str:
    v = t.get("value")
    if t.get("valid"):
        return num2(v)
    return f"{num2(v)} ({t.get('status')})" if v is not None else str(t.get("status"))


def trials_table(cells: list[Mapping[str, Any]]) -> str:
    """Per-trial speeds of one configuration: one row per topology, one column per trial."""
    indexes = sorted({t["index"] for c in cells for t in c.get("trials", [])})
    with_case = any(c.get("layout_case") for c in cells)
    header = (["case"] if with_case else []) + ["node_num", "gpu_num"] + [f"trial {i}" for i in indexes]
    rows = []
    for c in cells:
        by_index = {t["index"]: t for t in c.get("trials", [])}
        rows.append(([str(c.get("layout_case") or "-")] if with_case else []) + [str(c["nodes"]), str(c["gpus"])] +
                    [_trial_cell(by_index[i]) if i in by_index else "" for i in indexes])
    return padded_table(header, rows)


def full_table(cells: list[Mapping[str, Any]]) -> str:
    """Dispersion over the valid trials (min/max/stdev/CV) and scaling efficiency
    (Megatron cases get a leading ``case`` column)."""
    rows = []
    with_case = any(c.get("layout_case") for c in cells)
    for c in cells:
        sp = c.get("speedup")
        rows.append(([str(c.get("layout_case") or "-")] if with_case else []) + [str(c["nodes"]), str(c["gpus"]), num2(c.get("median_speed")), num2(c.get("average_speed")),
                     num2(c.get("min")), num2(c.get("max")), num2(c.get("stdev")), pct(c.get("cv")),
                     str(c.get("n_valid", 0)), str(c.get("n_invalid", 0)),
                     num2(sp) if sp is not None else _STATE_TEXT.get(c.get("speedup_state"), "n/a"),
                     num2(c.get("scaling_efficiency"))])
    return padded_table((["case"] if with_case else []) + _FULL_HEADER, rows)


def invalid_section(cells: list[Mapping[str, Any]]) -> str:
    rows = []
    total = 0
    for c in cells:
        for t in c.get("trials", []):
            total += 1
            if not t.get("valid"):
                reason = str(t.get("reason") or "").replace("|", "\\|").replace("\n", " ")
                rows.append([c["cell_id"], str(t["index"]), str(t.get("status")), num2(t.get("value")),
                             reason or "-", str(t.get("log") or "-")])
    if not rows:
        return f"None: all {total} trials passed the validity gate."
    head = (f"{len(rows)} of {total} trials are invalid. They are listed with their raw value and are "
            f"not part of any median, average or speedup.\n\n")
    return head + padded_table(["cell", "trial", "status", "raw value", "reason", "log"], rows)


def render_markdown(result: Mapping[str, Any], *, full: bool = True, trials: bool = True,
                    style: str = "dlperf") -> str:
    """The run's report.md: seed tables, per-trial speeds (``trials``), dispersion tables
    (``full``) and the invalid trials with their reasons."""
    run = result.get("run", {})
    cells = list(result.get("cells", []))
    out: list[str] = [f"# dlperf result: {run.get('suite') or '-'}", ""]
    for label, key in (("run", "run_id"), ("framework", "framework"), ("started", "started_at"),
                       ("finished", "finished_at"), ("image", "image"), ("upstream commit", "upstream_commit"),
                       ("log directory", "log_dir")):
        if run.get(key):
            out.append(f"- {label}: {run[key]}")
    window = run.get("window")
    if window:
        out.append(f"- iterations: first {window.get('warmup')} dropped, next {window.get('measure')} measured")
    n_trials = sum(len(c.get("trials", [])) for c in cells)
    n_valid = sum(c.get("n_valid", 0) for c in cells)
    out.append(f"- trials: {n_trials} ({n_valid} valid, {n_trials - n_valid} invalid) in {len(cells)} cells")
    out.append("")

    groups = _config_groups(cells)
    missing = False
    for key, members in groups.items():
        out += [f"### {_heading(key)}", "", throughput_table(members, style), ""]
        missing = missing or any(c.get("speedup") is None for c in members)
    if missing:
        out += ["n/a: no speedup because the cell or its 1n1g baseline (same model, precision, XLA and "
                "batch size) has no valid trial.", ""]
    latency = [c for c in cells if c.get("metric_kind") == "latency"]
    if latency:
        out += ["### latency and memory per case", "", latency_table(latency), "", memory_note(latency), ""]

    out += llm_table(cells)
    out += probe_table(cells)
    out += flags_lines(cells)
    if trials:
        out += ["## Per-trial speeds", ""]
        for key, members in groups.items():
            out += [f"### {_heading(key)}", "", trials_table(members), ""]
        if latency:
            out += ["### latency per trial (ms/iter)", "", trials_table(latency), ""]
    if full:
        out += ["## Dispersion (full)", ""]
        for key, members in groups.items():
            out += [f"### {_heading(key)}", "", full_table(members), ""]
        if latency:
            out += ["### latency", "", full_table(latency), ""]

    out += ["## Invalid trials", "", invalid_section(cells), ""]
    return "\n".join(out)


def render_dlperf_text(result: Mapping[str, Any]) -> str:
    """DLPerf's own extractor output, for diffing with old runs: one line per log with the
    growing ``{trial: speed}`` dict of its cell, then the result dict per batch size as
    ``pprint`` prints it. Invalid trials are left out of the dicts and listed as ``#`` lines."""
    return "".join(line + "\n" for line in dlperf_text_lines(result))


def dlperf_text_lines(result: Mapping[str, Any]) -> Iterator[str]:
    """:func:`render_dlperf_text` line by line (no newline), for a caller that writes them as they
    come: the growing dicts make the text quadratic in the trials of a cell (5 MB for 1,256 PyTorch
    logs), so ``dlperf extract`` never holds all of it."""
    invalid: list[str] = []
    any_line = False
    for c in result.get("cells", []):
        if c.get("metric_kind") != "throughput":
            continue
        acc: dict[int, float] = {}
        shown = "{"  # repr(acc) without its closing brace, grown by one item per new trial (the
        # dicts are quadratic in a cell's trials: repr-ing each whole was most of this function)
        for t in c.get("trials", []):
            log = t.get("log") or t.get("trial_id")
            if t.get("valid") and t.get("value") is not None:
                index, value = t["index"], t["value"]
                if index in acc:  # the same index again: the dict keeps its place, so repr it whole
                    acc[index] = value
                    shown = repr(acc)[:-1]
                else:
                    acc[index] = value
                    shown += f"{', ' if len(acc) > 1 else ''}{index!r}: {value!r}"
                any_line = True
                yield f"{log} {shown}}}"
            else:
                invalid.append(f"# invalid: {log}: {t.get('status')}: {t.get('reason')}")
    for key, per_model in result.get("dlperf", {}).items():
        if key == "latency":
            continue
        any_line = True
        yield pprint.pformat(per_model)
    for c in result.get("cells", []):
        if c.get("metric_kind") == "latency":
            lat = c.get("median_speed")
            mem, smi = c.get("memory_mib"), c.get("gpu_memory_mib")
            alloc = f"{'n/a' if mem is None else f'{mem:.0f}'} MiB"
            memory = (f"memory {smi:.0f} MiB (nvidia-smi), allocator {alloc}" if smi is not None
                      else f"memory {alloc}")
            any_line = True
            yield f"{c.get('layout_case') or c['topology']}: latency {_py(lat)} ms, {memory}"
    yield from invalid
    if not any_line and not invalid:
        yield ""  # the text was one newline
