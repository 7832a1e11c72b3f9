"""Cluster execution: inventory, SSH pool, detached jobs, container runtime, leases,
environment capture and the trial runner. Nothing here imports Airflow.

Typical use::

    from dlperf_tasks.remote.inventory import Cluster
    from dlperf_tasks.remote.ssh import SSHPool

    cluster = Cluster.from_yaml("cluster.yaml")
    with SSHPool(cluster) as pool:
        print(pool.run("node1", "hostname").stdout)
"""
