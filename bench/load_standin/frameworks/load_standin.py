"""Stand-in framework of the Celery load bench (bench/bench_load_celery.py): the smoke
framework's log format and gate (``[smoke-bert] iteration=...`` lines, one final line per
rank), written by ``load_trainer.py`` over a fixed number of seconds, so each trial lasts a
known time and costs almost no CPU."""

import sys
from pathlib import Path

from dlperf_tasks.frameworks.base import LaunchSpec
from dlperf_tasks.frameworks.smoke_bert import SmokeBert


class LoadStandin(SmokeBert):
    name = "load_standin"
    log_framework, log_model, log_prefix = "load", "standin", "standin"

    def launch(self, trial, node_rank, nodes, settings):
        script = str(Path(__file__).resolve().parent.parent / "load_trainer.py")
        return LaunchSpec([str(settings.get("python", sys.executable)), script, str(trial.cell.window.total),
                           str(settings.get("speed", 100.0)), str(settings.get("seconds", 3.0))])
