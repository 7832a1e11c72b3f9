"""Results history: read archived runs back from the store and make sense of them.

Modules (each one job, no Airflow imports):

- :mod:`.runs`     normalised views of a run (from a result JSON or a store index entry)
- :mod:`.cellspec` parse cell ids and user cell specs such as ``4n8g/bz32/fp32``
- :mod:`.robust`   median, MAD, Mann-Whitney U (no scipy needed)
- :mod:`.regress`  regression detection (throughput and scaling), pure
- :mod:`.compare`  per-cell comparison of two runs (interval, detectable change, verdict)
- :mod:`.trend`    history of one cell
- :mod:`.frame`    pandas DataFrame / Parquet export
- :mod:`.notify`   webhook / Python-callable notification of findings
- :mod:`.check`    glue for the publish step: read history, detect, record, notify
- :mod:`.source`   open the configured store (``--store URL`` / ``DLPERF_STORE_URL``), resolve ``latest``/prefixes
- :mod:`.interval` noise model from history, interval of a median difference, detectable change
- :mod:`.rows`     table rows shared by the CLI and the results page
"""
