"""Reports built from a run's statistics.

* :mod:`dlperf_tasks.report.result_json`: the result JSON (``build_result``, ``write_result``,
  ``load_result``), the contract every later stage reads;
* :mod:`dlperf_tasks.report.markdown`: the seeds' Markdown tables, dispersion ("full")
  tables, per-trial speeds and the invalid-trial list, plus DLPerf's plain-text output;
* ``plots.py`` (history area): PNG charts.

Everything here renders from the result dict, so an archived result can be re-rendered.
"""
