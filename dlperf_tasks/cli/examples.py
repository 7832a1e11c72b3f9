"""Examples for every ``dlperf`` sub-command's ``--help``: a parser without an
``examples:`` section of its own gets the lines below as its epilog, so each command's help
shows how it is called. ``tests/unit/test_cli_help_examples.py`` checks that every sub-command
(``results *``, ``cluster *``, ``confirm`` ...) has one and that each example parses."""

from __future__ import annotations

import argparse

#: command path -> example lines ("command   what it does"); paths are the sub-command names
EXAMPLES: dict[str, list[str]] = {
    "": ["dlperf catalog                        the suites",
         "dlperf plan smoke                     the cells and trials of a sweep",
         "dlperf sweep --suite smoke --cluster local --out out/smoke",
         "dlperf results ls                     the runs in the store"],
    "catalog show": ["dlperf catalog show mxnet-bert",
                     "dlperf catalog show megatron-gpt --format json"],
    "catalog check": ["dlperf catalog check my-suite.yaml other-suite.yaml"],
    "catalog build": ["dlperf catalog build                  (make install runs it)"],
    "results ls": ["dlperf results ls --suite mxnet-bert --since 2026-01-01",
                   "dlperf results ls --status partial --format json"],
    "results show": ["dlperf results show latest                 the newest run",
                     "dlperf results show smoke-2026 --suite smoke   a unique prefix of a run id"],
    "results get": ["dlperf results get RUN_ID --to ./run        every object, checksums verified"],
    "results compare": ["dlperf results compare RUN_A RUN_B",
                        "dlperf results compare RUN_A latest --tolerance 5 --format json"],
    "results trend": ["dlperf results trend --suite mxnet-bert --cell 4n8g/bz32/fp32 --last 30 --png trend.png"],
    "results check": ["dlperf results check RUN_ID                 findings against the cell histories",
                      "dlperf results check RUN_ID --record --notify https://hooks.example.com/dlperf"],
    "results export": ["dlperf results export --suite mxnet-bert --parquet runs.parquet",
                       "dlperf results export latest --format openmetrics --out dlperf.om",
                       "dlperf results export --suite smoke --format conbench --out conbench.json",
                       "dlperf results export RUN_ID --format bencher > bmf.json"],
    "cluster": ["dlperf cluster check --cluster my-cluster.yaml",
                "dlperf cluster quarantine",
                "dlperf cluster clear node3"],
    "cluster check": ["dlperf cluster check --cluster examples/cluster.yaml   every node: SSH, docker, GPUs, lease"],
    "cluster quarantine": ["dlperf cluster quarantine                  the nodes kept out of sweeps, and why",
                           "dlperf cluster quarantine --store s3://bucket/dlperf"],
    "cluster clear": ["dlperf cluster clear node3                  node3 gets trials again"],
    "confirm": ["dlperf confirm RUN_ID --cluster my-cluster.yaml",
                "dlperf confirm RUN_ID --finding throughput:mxnet-bert/bz32/fp32/1n1g --plan-only"],
    "serve": ["dlperf serve                               UI on http://127.0.0.1:8080 (Ctrl-C stops it)",
              "dlperf serve --port 8081 --dags unpause"],
}


class _EpilogFormatter(argparse.HelpFormatter):
    """Descriptions wrapped as usual; an epilog with indented lines (examples) kept as written."""

    def _fill_text(self, text, width, indent):
        if "\n  " in text:
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


def sub_parsers(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """``(path, parser)`` for ``parser`` and every sub-command parser below it."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from sub_parsers(sub, path + (name,))


def add_examples(parser: argparse.ArgumentParser) -> None:
    """Give every parser without an ``examples:`` section the one :data:`EXAMPLES` has for it."""
    for path, p in sub_parsers(parser):
        lines = EXAMPLES.get(" ".join(path))
        if not lines or "examples:" in (p.epilog or ""):
            continue
        block = "examples:\n" + "\n".join(f"  {x}" for x in lines)
        p.epilog = f"{p.epilog}\n\n{block}" if p.epilog else block
        if p.formatter_class is argparse.HelpFormatter:
            p.formatter_class = _EpilogFormatter
