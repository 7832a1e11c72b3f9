"""PNG plots of a run (throughput / speedup vs GPUs) and of a cell's history."""

import io

import pytest
from matplotlib.image import imread

from dlperf_tasks.history import synth
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
