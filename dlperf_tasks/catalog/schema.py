"""JSON Schema of a suite YAML (the *shape*; meaning is checked in catalog/validate.py).

A suite file looks like this (see catalog/suites/*.yaml for complete ones)::

    id: mxnet-bert                 # = file name without .yaml
    framework: mxnet_bert          # a name from dlperf_tasks.frameworks.names()
    dag: mxnet                     # which per-framework DAG runs it
    schedule: "0 1 * * *"          # the DAG's cron (or @daily..., or null = manual only); one per DAG
    model: bert-base
    description: ...
    container:                     # omit or null = run on the host (no container)
      image: nvcr.io/nvidia/mxnet:20.03-py3
      shm_size: 16g
      ulimits: [memlock=-1]
      devices: [/dev/infiniband]
      mounts: ["${data_dir}:/data"]
    upstream: {repo: https://github.com/dmlc/gluon-nlp, commit: <40 hex>, workdir: scripts/bert, patches: [...]}
    launcher: {workdir: ..., script: ..., extra_args: [...]}
    env: {NCCL_DEBUG: INFO}
    window: {warmup: 20, measure: 100}
    trials: 7
    batch_sizes: [32, 24]          # or per precision: {fp32: [128], amp: [256]}
    precisions: [fp32]
    xla: [false]
    topologies: [1n1g, 1n8g, 2n8g, 4n8g]
    exclude: [{precision: amp, xla: false, batch_size: 128}]
    gradient_accumulation_steps: [32, 1]   # pytorch-bert only: one cell per value
    layouts: [...]                 # Megatron only: the parallel cases
    timeout_s: 3600
    hang_timeout_s: 600
"""

from __future__ import annotations

_STR = {"type": "string"}
_STR_LIST = {"type": "array", "items": _STR}
_BATCH_LIST = {"type": "array", "items": {"type": "integer"}, "minItems": 1}  # >= 1 checked in validate.py

SUITE_SCHEMA: dict = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "dlperf suite",
    "type": "object",
    "additionalProperties": False,
    "required": ["id", "framework", "dag", "model", "window", "trials", "precisions"],
    "properties": {
        "id": {"type": "string", "pattern": "^[a-z0-9][a-z0-9._-]*$"},
        "framework": _STR,
        "dag": {"type": "string", "pattern": "^[a-z0-9_]+$"},
        "schedule": {"type": ["string", "null"]},  # cron/preset checked in catalog/cron.py
        "model": {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9._-]*$"},
        "description": _STR,
        "container": {
            "type": ["object", "null"],
            "additionalProperties": False,
            "required": ["image"],
            "properties": {
                "image": _STR,
                "shm_size": {"type": "string", "pattern": "^[0-9]+[bkmgBKMG]?$"},
                "ulimits": _STR_LIST,
                "ipc_host": {"type": "boolean"},
                "net_host": {"type": "boolean"},
                "devices": _STR_LIST,
                "privileged": {"type": "boolean"},
                "cap_add": _STR_LIST,
                "mounts": _STR_LIST,
                "sshd_port": {"type": ["integer", "null"], "minimum": 1, "maximum": 65535},
                "digest": _STR,       # sha256:<64 hex>; set once by the operator where upstream publishes only tags
                "min_driver": _STR,   # minimum NVIDIA driver the image needs, e.g. "570.124"
                "versions": {"type": "object", "additionalProperties": _STR},  # cuda / nccl / pytorch / ...
            },
        },
        "upstream": {
            "type": ["object", "null"],
            "additionalProperties": False,
            "required": ["repo"],
            "properties": {
                "repo": _STR,
                "commit": _STR,
                "ref": _STR,
                "workdir": _STR,
                "note": _STR,
                "patches": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "required": ["path", "description"],
                        "properties": {"path": _STR, "description": _STR, "diff": _STR, "file": _STR},
                    },
                },
            },
        },
        "launcher": {"type": "object"},
        "env": {"type": "object", "additionalProperties": {"type": ["string", "integer", "number", "boolean"]}},
        "env_multi_node": {"type": "object", "additionalProperties": {"type": ["string", "integer", "number", "boolean"]}},
        "window": {
            "type": "object",
            "additionalProperties": False,
            "required": ["warmup", "measure"],
            "properties": {"warmup": {"type": "integer"}, "measure": {"type": "integer"},
                           "rule": {"enum": ["timestamps", "summary"]}},
        },
        "trials": {"type": "integer"},
        "batch_sizes": {
            "oneOf": [
                _BATCH_LIST,
                {"type": "object", "additionalProperties": _BATCH_LIST, "minProperties": 1},
            ]
        },
        "precisions": {"type": "array", "items": _STR, "minItems": 1},
        "xla": {"type": "array", "items": {"type": "boolean"}, "minItems": 1},
        "topologies": {"type": "array", "items": _STR, "minItems": 1},
        "exclude": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "minProperties": 1,
                "properties": {
                    "batch_size": {"type": "integer"},
                    "precision": _STR,
                    "xla": {"type": "boolean"},
                    "topology": _STR,
                    "gradient_accumulation_steps": {"type": "integer"},
                },
            },
        },
        # micro-batches per optimizer step, one cell per value (pytorch-bert: seed 001's "no GradAcc" = 1)
        # or "global_batch:<N>": N / (batch x GPUs) per cell (seed 001: global_batch:67584)
        "gradient_accumulation_steps": {"type": "array", "minItems": 1, "items": {
            "oneOf": [{"type": "integer"}, {"type": "string", "pattern": "^global_batch:[1-9][0-9]{0,8}$"}]}},
        "layouts": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": [
                    "group", "case", "nodes", "gpus", "dp", "mp", "pp",
                    "micro_batch", "global_batch", "hidden_size", "num_heads", "num_layers",
                ],
                "properties": {
                    # seed 002's DP | MP | 2D | PP, or an LLM suite's own (fsdp, compile, tp2, cp2, ...)
                    "group": {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9_+-]*$"},
                    "case": {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9_.x-]*$"},
                    "nodes": {"type": "integer"},
                    "gpus": {"type": "integer"},
                    "dp": {"type": "integer"},
                    "mp": {"type": "integer"},
                    "pp": {"type": "integer"},
                    "micro_batch": {"type": "integer"},
                    "global_batch": {"type": "integer"},
                    "micro_batch_times_dp": {"type": "integer"},
                    "accumulation_steps": {"type": "integer"},
                    "hidden_size": {"type": "integer"},
                    "num_heads": {"type": "integer"},
                    "num_layers": {"type": "integer"},
                    "seq_length": {"type": "integer"},
                    "cp": {"type": "integer"},  # context-parallel size
                    "vp": {"type": "integer"},  # virtual pipeline stages per rank
                },
            },
        },
        "timeout_s": {"type": "integer"},
        # physical bound: samples/s per GPU above it, or for latency suites a latency
        # (ms/iter) below it, makes a trial invalid
        "plausible_max_per_gpu": {"type": "number", "exclusiveMinimum": 0},
        "hang_timeout_s": {"type": "integer"},
        # docs/decisions.md: adaptive trial count and node health/quarantine, opt-in
        "adaptive": {"type": ["boolean", "object"]},
        "node_health": {"type": ["boolean", "object"]},
        # docs/interconnect-probe.md: nccl-tests all_reduce_perf before each multi-node cell
        "interconnect_probe": {"type": ["boolean", "object"]},
        "requirements": _STR_LIST,
        "logs": {
            "type": "object",
            "additionalProperties": False,
            "properties": {"framework": _STR, "model": _STR, "prefix": _STR},
        },
        "notes": _STR,
    },
}
