"""docs/llm-suites.md's dense peak table is the one MFU uses (measure/data/gpu_peaks.json), row for row."""

from __future__ import annotations

from pathlib import Path

from dlperf_tasks.measure.llm_metrics import gpu_table

DOC = Path(__file__).resolve().parents[2] / "docs" / "llm-suites.md"
COLUMNS = ("fp32", "tf32", "fp16", "bf16", "fp8", "fp4")


def _doc_rows() -> dict[str, dict[str, float | None]]:
    lines = DOC.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("<!-- peaks:"))
    rows = {}
    for line in lines[start + 3:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[cells[0]] = {c: (None if v == "-" else float(v)) for c, v in zip(COLUMNS, cells[1:])}
    return rows


def test_the_documented_peaks_are_the_table_mfu_uses():
    table = {gpu: {c: (float(row["dense_tflops"][c]) if c in row["dense_tflops"] else None) for c in COLUMNS}
             for gpu, row in gpu_table().items()}
    assert _doc_rows() == table
    assert {"A100", "H100-SXM", "H100-PCIe", "H100-NVL", "H200", "B200", "B300", "GB200", "GB300"} <= set(table)
