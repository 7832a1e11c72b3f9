"""PNG plots of a run (throughput / speedup vs GPUs) and of a cell's history."""

import io
from pathlib import Path

import pytest
from matplotlib.image import imread

from tests.fixtures import synth
from dlperf_tasks.report.plots import plot_specs, render_plot, render_plots, trend_png

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _img(data: bytes):
    assert data[:8] == PNG_MAGIC
    return imread(io.BytesIO(data), format="png")


def test_render_plots_writes_throughput_and_speedup(tmp_path):
    result = synth.nightly_results(1)[0]
    paths = render_plots(result, tmp_path / "plots")
    assert [p.name for p in paths] == ["bert-base_fp32_throughput.png", "bert-base_fp32_speedup.png"]
    for p in paths:
        img = _img(p.read_bytes())
        assert img.shape[0] > 300 and img.shape[1] > 500
        assert img[..., :3].std() > 0.05  # not a blank canvas


def test_speedup_plot_has_ideal_line_and_labels():
    result = synth.nightly_results(1)[0]
    from dlperf_tasks.report.plots import plot_groups, speedup_figure

    (model, prec), by_bz = next(iter(plot_groups(result).items()))
    fig = speedup_figure(model, prec, by_bz)
    ax = fig.axes[0]
    labels = [l.get_label() for l in ax.get_lines()]
    assert labels == ["bz24", "bz32", "ideal (linear)"]
    ideal = ax.get_lines()[-1]
    assert list(ideal.get_xdata()) == [1, 32] and list(ideal.get_ydata()) == [1, 32]
    bz32 = ax.get_lines()[1]
    assert list(bz32.get_xdata()) == [1, 8, 16, 32]
    assert bz32.get_ydata()[0] == 1.0


def test_latency_and_missing_speedup_cells():
    result = synth.nightly_results(1)[0]
    lat = dict(result["cells"][0], cell_id="m/bz8/fp16/DP_1x1x1_2_1536x16/1n1g", metric_kind="latency",
               model="gpt", layout_case="DP_1x1x1_2_1536x16", median_speed=210.5, speedup=None)
    result = dict(result, cells=result["cells"] + [lat])
    names = plot_specs(result)
    assert "gpt_latency.png" in names
    _img(render_plot(result, "gpt_latency.png"))
    with pytest.raises(KeyError, match="no plot named 'x.png'"):
        render_plot(result, "x.png")


def test_trend_png(tmp_path):
    pts = [{"date": f"2026-01-{i + 1:02d}", "median": 100 + i % 3, "trial_values": [99 + i % 3, 101 + i % 3]}
           for i in range(30)]
    out = tmp_path / "t.png"
    data = trend_png(pts, title="cell", unit="samples/s", path=out, baseline=101)
    assert out.read_bytes() == data
    _img(data)
    _img(trend_png([], title="empty", unit="samples/s"))


def test_run_plots_start_at_zero_with_integer_gpu_ticks_and_error_bars():
    """A 1 % drop must not look like a cliff."""
    from matplotlib.container import ErrorbarContainer

    from dlperf_tasks.report.plots import plot_groups, speedup_figure, throughput_figure

    result = synth.nightly_results(1)[0]
    (model, prec), by_bz = next(iter(plot_groups(result).items()))
    for fig in (throughput_figure(model, prec, by_bz), speedup_figure(model, prec, by_bz)):
        ax = fig.axes[0]
        assert ax.get_ylim()[0] == 0
        assert list(ax.get_xticks()) == [1, 8, 16, 32]
        assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "8", "16", "32"]
    ax = throughput_figure(model, prec, by_bz).axes[0]
    bars = [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
    assert len(bars) == 2  # one per batch size
    cell = by_bz[32][-1]
    segs = bars[1].lines[2][0].get_segments()
    (x0, lo), (x1, hi) = segs[-1]
    assert x0 == x1 == 32 and lo == pytest.approx(cell["min"]) and hi == pytest.approx(cell["max"])


def test_trend_axis_is_time_with_run_ids_and_starts_at_zero():
    import datetime as dt

    from matplotlib.dates import num2date

    from dlperf_tasks.report.plots import trend_figure

    pts = [{"run_id": f"run-{i:03d}", "date": f"2026-01-{i + 1:02d}", "started_at": f"2026-01-{i + 1:02d}T01:30:00+00:00",
            "median": 1000.0 - (10 if i == 29 else 0), "trial_values": [995.0, 1000.0, 1005.0]} for i in range(30)]
    pts[3]["started_at"] = "2026-01-04T13:30:00+00:00"  # irregular spacing is kept (a time axis)
    ax = trend_figure(pts, title="c", unit="samples/s", baseline=1000).axes[0]
    assert ax.get_ylim()[0] == 0 and ax.get_ylim()[1] > 1000
    labels = [t.get_text() for t in ax.get_xticklabels()]
    assert labels[0] == "2026-01-01\nrun-000" and all("run-" in t for t in labels)
    ticks = [num2date(x) for x in ax.get_xticks()]
    assert ticks[0] == dt.datetime(2026, 1, 1, 1, 30, tzinfo=dt.timezone.utc)
    assert any(c.__class__.__name__ == "ErrorbarContainer" for c in ax.containers)


def test_trend_plot_is_readable_at_the_pages_size():
    """Tick labels at least 9 pt, date + short run id (not the full id), trial markers a reader
    sees, and no history median drawn from fewer runs than a verdict needs. The PNG goes to the
    tests' artifacts."""
    import datetime as dt

    from dlperf_tasks.report.plots import short_run_label, trend_figure

    def pts(n):
        return [{"started_at": (dt.datetime(2026, 1, 1, 1) + dt.timedelta(days=i)).isoformat(),
                 "run_id": f"mxnet-bert-2026010{i % 9 + 1}T010000-{i:04x}beef{i}", "median": 100.0 + i % 3,
                 "trial_values": [99.0 + i % 3, 101.0 + i % 3]} for i in range(n)]

    fig = trend_figure(pts(30), title="cell", unit="samples/s", baseline=101.0, min_history=5)
    ax = fig.axes[0]
    labels = [t for t in ax.get_xticklabels() if t.get_text()]
    assert 1 < len(labels) <= 8 and all(t.get_fontsize() >= 9 for t in labels)
    assert labels[0].get_text() == "2026-01-01\n0000beef"  # date and a short id
    trials = next(c for c in ax.collections if c.get_label() == "trials")
    assert trials.get_sizes()[0] >= 16 and trials.get_alpha() >= 0.7
    assert any(line.get_label() == "history median" for line in ax.lines)
    few = trend_figure(pts(3), title="cell", unit="samples/s", baseline=101.0, min_history=5).axes[0]
    assert not any(line.get_label() == "history median" for line in few.lines)
    assert any("a verdict needs 5" in t.get_text() for t in few.texts)
    assert short_run_label({"date": "2026-01-02", "run_id": "2026-01-02-nightly-7"}) == "2026-01-02\nnightly-7"
    art = Path(__file__).resolve().parent.parent / "_artifacts"
    art.mkdir(exist_ok=True)
    _img(trend_png(pts(30), title="cell (30 runs)", unit="samples/s", baseline=101.0, min_history=5,
                   path=art / "trend_readable.png"))
