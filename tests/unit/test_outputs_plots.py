"""The outputs step draws a run's plots through report.plots' one entry point (render_plots):
every plot plot_specs names, written under <run dir>/plots, nothing guessed by name."""

from __future__ import annotations

from dlperf_tasks.engine.outputs import write_plots
from dlperf_tasks.report.plots import plot_specs
from tests.fixtures import synth


def test_write_plots_writes_every_plot_the_result_has(tmp_path):
    result = synth.nightly_results(1, trials=2)[0]
    got = write_plots(tmp_path, result)
    names = plot_specs(result)
    assert names and sorted(got) == sorted(str(tmp_path / "plots" / n) for n in names)
    assert all((tmp_path / "plots" / n).read_bytes().startswith(b"\x89PNG") for n in names)
