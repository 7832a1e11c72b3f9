"""GPU and host telemetry per trial: sampler commands, parsers, summaries, policy.

Pure parts (no I/O, no Airflow): :mod:`.commands` (quoted shell builders), :mod:`.gpu`
(nvidia-smi CSV / ``-q`` / kernel-log XID parsers), :mod:`.host` (``/proc`` loop, OFED, ibstat),
:mod:`.summary` (per-trial summary + policy). :mod:`.sampler` starts and stops the sampler
on every node of a trial through the SSH pool.
"""

from dlperf_tasks.telemetry.summary import NodeRaw, Policy, measured_window, summarise_trial

__all__ = ["NodeRaw", "Policy", "measured_window", "summarise_trial"]
