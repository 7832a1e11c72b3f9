"""The results web app (FastAPI), served by `dlperf serve` and mounted in the Airflow UI by plugins/dlperf_results.py."""
