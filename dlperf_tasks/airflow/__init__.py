"""The Airflow layer: the only package (with dags/ and plugins/) that imports Airflow.

* ``settings.py``    the ``[dlperf]`` section of airflow.cfg
* ``params.py``      the run form (JSON schema Params) and its validation in code
* ``dag_factory.py`` one DAG per framework, built from the catalog
* ``operators.py``   the trial operator (on_kill stops the remote job)
* ``tasks.py``       what each task does, calling the core layers (imported lazily)
"""
