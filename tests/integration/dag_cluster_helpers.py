"""Helpers shared by the DAG tests that run on the simulated cluster (test_dag_cluster_*.py).

* :func:`site_catalog` writes a site catalog override (``$DLPERF_CATALOG_PATH``) of a
  built-in suite that runs the stand-in trainer fast and at known speeds: the suite's id,
  framework, image and launch flags stay those of the catalog; only the stand-in's
  environment (speeds, time scale), the window, the timeouts and the script directory of the
  stand-in image change. This is how a site adapts a suite without touching code.
* :func:`cluster_settings` the ``[dlperf]`` settings of a DAG pointed at the cluster YAML
  and a store URL (what ``AIRFLOW__DLPERF__CLUSTER`` / ``..._STORE_URL`` give in a deployment).
* :func:`assert_cluster_idle` no labelled container, no trial process, no lease, no scratch
  directory of the run left on any node.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import yaml

from dlperf_tasks.airflow.settings import DlperfSettings

ROOT = Path(__file__).resolve().parents[2]
# where the stand-in image keeps each framework's training script (docker/standin/README.md)
STANDIN_WORKDIRS = {"pytorch-bert": "/workspace/examples/bert"}


def site_catalog(dir_: Path, suite_id: str, speeds: dict[str, float], *, time_scale: float = 0.02,
                 window=(5, 20), timeout_s: int = 120, hang_timeout_s: int = 60, env: dict | None = None) -> Path:
    """Write ``<dir_>/<suite_id>.yaml`` (an override of the built-in suite) and return ``dir_``."""
    data = yaml.safe_load((ROOT / f"dlperf_tasks/catalog/suites/{suite_id}.yaml").read_text())
    data["env"] = {"DLPERF_STANDIN_TIME_SCALE": str(time_scale),
                   **{f"DLPERF_STANDIN_SPEED_{t.upper()}": str(v) for t, v in speeds.items()},
                   **(env or {})}
    if suite_id in STANDIN_WORKDIRS:
        data["launcher"]["workdir"] = STANDIN_WORKDIRS[suite_id]
    if "gradient_accumulation_steps" in data:  # one cell per topology (accumulation: test_standin_strict_cluster)
        data["gradient_accumulation_steps"] = [1]
        data.pop("exclude", None)
    data["window"] = {"warmup": window[0], "measure": window[1]}
    data["topologies"] = list(speeds)
    data["timeout_s"], data["hang_timeout_s"] = timeout_s, hang_timeout_s
    dir_.mkdir(parents=True, exist_ok=True)
    (dir_ / f"{suite_id}.yaml").write_text(yaml.safe_dump(data))
    return dir_


def cluster_settings(yaml_path: Path, store_url: str, work_dir: Path, **over) -> DlperfSettings:
    kw = dict(cluster=str(yaml_path), store_url=store_url, work_dir=str(work_dir),
              schedules={d: None for d in ("mxnet", "pytorch", "tensorflow", "megatron", "smoke")},
              trial_retries=0, lease_wait_s=120)
    kw.update(over)
    return DlperfSettings(**kw)


def build_pytorch_dag(cfg: DlperfSettings):
    from dlperf_tasks.airflow.dag_factory import build_dag
    from dlperf_tasks.catalog.loader import load_suite

    return build_dag("pytorch", [load_suite("pytorch-bert")], cfg)


def task_states(dr) -> dict[tuple[str, int], str]:
    return {(ti.task_id, ti.map_index): str(getattr(ti.state, "value", ti.state)) for ti in dr.get_task_instances()}


def state(dr) -> str:
    return str(getattr(dr.state, "value", dr.state))


def assert_cluster_idle(sim, run_id: str, trial_keys: list[str]) -> None:
    """Nothing of ``run_id`` is left on the nodes: containers, processes of its trials (other
    sessions' trials may run on the shared cluster), its leases, its scratch directories."""
    from dlperf_tasks.remote.nodeclean import leftovers as run_leftovers
    from dlperf_tasks.remote.inventory import Cluster
    from dlperf_tasks.remote.runtime import DockerRuntime, safe_name
    from dlperf_tasks.remote.ssh import SSHPool

    assert trial_keys
    assert sim.containers(f"dlperf.run={run_id}") == []
    c = Cluster.from_yaml(sim.yaml_path)
    with SSHPool(c) as pool:
        for n in c.names:
            assert run_leftovers(pool, DockerRuntime.__new__(DockerRuntime), n, run_id, trial_keys) == [], n
            wd = c.node(n).workdir.rstrip("/")
            lease = pool.run(n, f"cat {wd}/.lease/run_id 2>/dev/null || true", timeout=30).stdout.strip()
            assert lease != run_id, f"{n}: lease of {run_id} not released"
            assert not Path(f"{wd}/runs/{safe_name(run_id)}").exists(), f"{n}: scratch dir of {run_id} left"


def fixed_logical_date() -> dt.datetime:
    """A logical date for ``dag.test`` that a second call can reuse (= clear and re-run that DAG run)."""
    return dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
