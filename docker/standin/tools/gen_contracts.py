#!/usr/bin/env python3
"""Regenerate the stand-in's flag contracts from the upstream sources at their pinned commits.

Reads each entry point's ``add_argument`` calls with :mod:`ast` (no upstream code runs and none is
copied: only flag names, actions, types, ``required`` and literal defaults, which are facts) from a
git mirror, and writes ``rootfs/usr/lib/python3/dist-packages/dlperf_standin_contracts/<name>.json``.

    python3 docker/standin/tools/gen_contracts.py --mirror NVIDIA/DeepLearningExamples=/path/to/repo.git ...

Arguments a suite's source patch adds (DLPerf's copies) are listed in ``PATCHED`` with the patch
they come from; ``required`` changes made by a patch are in ``UNREQUIRED``. TensorFlow (absl
flags; tensorflow/models r2.3.0 could not be mirrored) is written by :func:`tensorflow_contract`
from the flags DLPerf's scripts pass.
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "rootfs/usr/lib/python3/dist-packages/dlperf_standin_contracts"

ENTRY_POINTS = {
    "pytorch_bert": ("NVIDIA/DeepLearningExamples", "5cc03caa153faab7a2c3b1b5b5d63663f06ce1b4",
                     ["PyTorch/LanguageModeling/BERT/run_pretraining.py"], True),
    "mxnet_bert": ("dmlc/gluon-nlp", "7b7bf60259e28b3bf1f4d70569a7e5c18e2f4b3e",
                   ["scripts/bert/run_pretraining.py"], True),
    "mxnet_resnet50": ("dmlc/gluon-cv", "f9a8a284b8222794bc842453e2bebe5746516048",
                       ["scripts/classification/imagenet/train_horovod.py"], True),
    "megatron_gpt": ("NVIDIA/Megatron-LM", "8aa4619f2b2a57b5725026a50ebd2b15e8121482",
                     ["megatron/arguments.py"], False),
    "megatron_bridge": ("NVIDIA-NeMo/Megatron-Bridge", "067f987df03b8355b03192d88d70f1709fedf51a",
                        ["scripts/performance/argument_parser.py"], True),
}
#: torchtitan's CLI (tyro over Trainer.Config): the sections of torchtitan/config/configs.py it reads
TORCHTITAN = ("pytorch/torchtitan", "b5bcd76c66d0acb1a08b176d9639425bc55e0b2a", "torchtitan/config/configs.py",
              {"TrainingConfig": "training", "ParallelismConfig": "parallelism", "CompileConfig": "compile",
               "CommConfig": "comm", "DebugConfig": "debug"})
PATCHED = {
    "mxnet_resnet50": [
        {"flags": ["--num-batches"], "dest": "num_batches", "action": "store", "type": "int", "default": None,
         "required": False, "patch": "catalog mxnet-resnet50: stop after N batches (DLPerf's copy of train_horovod.py)"},
        {"flags": ["--mode"], "dest": "mode", "action": "store", "type": "str", "default": "hybrid",
         "required": False, "patch": "catalog mxnet-resnet50: DLPerf's runner.sh passes --mode=hybrid"},
    ],
}
UNREQUIRED = {"mxnet_bert": {"--data_eval": "catalog mxnet-bert patch: make --data_eval optional (line 95)"}}
DLPERF_COMMIT = "c89430bac64f64caabb0445ff7eb80175641454c"
TF_FLAGS = [("input_files", "str"), ("max_seq_length", "int"), ("max_predictions_per_seq", "int"),
            ("train_batch_size", "int"), ("num_steps_per_epoch", "int"), ("num_train_epochs", "int"),
            ("warmup_steps", "int"), ("use_next_sentence_label", "bool"), ("train_summary_interval", "int"),
            ("optimizer_type", "str"), ("num_gpus", "int"), ("datasets_num_private_threads", "int"),
            ("dtype", "str"), ("enable_xla", "bool"), ("model_dir", "str"), ("bert_config_file", "str"),
            ("distribution_strategy", "str"), ("worker_hosts", "str"), ("task_index", "int"), ("all_reduce_alg", "str")]
TF_DEFAULTS = {"num_train_epochs": 3, "num_gpus": 1, "dtype": "fp32", "task_index": -1,
               "distribution_strategy": "mirrored", "train_batch_size": 32, "num_steps_per_epoch": 1000,
               "enable_xla": False, "use_next_sentence_label": True}


def _literal(node):
    try:
        return ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError):
        return None


def arguments(source: str) -> list[dict]:
    out = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "add_argument"):
            continue
        flags = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        kw = {k.arg: k.value for k in node.keywords if k.arg}
        action = _literal(kw["action"]) if "action" in kw else "store"
        typ = kw.get("type")
        tname = typ.id if isinstance(typ, ast.Name) else ("str" if typ is not None else None)
        # argparse: the first long option names the attribute, else the first short one
        long_flags = [f for f in flags if f.startswith("--")]
        dest = _literal(kw["dest"]) if "dest" in kw else (long_flags or flags)[0].lstrip("-").replace("-", "_")
        arg = {"flags": flags, "dest": dest, "action": action,
               "type": tname if tname in ("int", "float", "str") else "str",
               "required": bool(_literal(kw["required"])) if "required" in kw else False,
               "default": _literal(kw["default"]) if "default" in kw else None}
        if "nargs" in kw:
            arg["nargs"] = _literal(kw["nargs"])
        if "choices" in kw and _literal(kw["choices"]) is not None:
            arg["choices"] = list(_literal(kw["choices"]))
        out.append(arg)
    return out


def tensorflow_contract() -> dict:
    return {"entry_point": "tensorflow_bert", "repo": "https://github.com/tensorflow/models", "commit": "",
            "ref": "r2.3.0", "parser": "absl",
            "paths": ["official/nlp/bert/run_pretraining.py", "official/nlp/bert/common_flags.py",
                      "official/utils/flags/"],
            "source": "observed set: every flag DLPerf's TensorFlow/bert/scripts (Oneflow-Inc/DLPerf "
                      f"{DLPERF_COMMIT}) pass to r2.3.0's run_pretraining.py, including --worker_hosts/--task_index "
                      "of seed 003's patch. The full r2.3.0 absl flag set is larger (tensorflow/models could not "
                      "be mirrored here); a flag outside this list is refused even if r2.3.0 has it.",
            "arguments": [{"flags": ["--" + n], "dest": n, "type": t, "action": "store", "required": False,
                           "default": TF_DEFAULTS.get(n)} for n, t in TF_FLAGS]}


def write(name: str, doc: dict) -> None:
    (OUT / f"{name}.json").write_text(json.dumps(doc, indent=1) + "\n")
    print(f"{name}: {len(doc['arguments'])} arguments")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mirror", action="append", default=[], metavar="OWNER/NAME=GIT_DIR")
    a = p.parse_args(argv)
    mirrors = dict(m.split("=", 1) for m in a.mirror)
    OUT.mkdir(parents=True, exist_ok=True)
    for name, (repo, commit, paths, abbrev) in ENTRY_POINTS.items():
        if repo not in mirrors:
            print(f"skip {name}: no --mirror {repo}=...", file=sys.stderr)
            continue
        args = []
        for path in paths:
            src = subprocess.run(["git", "--git-dir", mirrors[repo], "show", f"{commit}:{path}"],
                                 check=True, capture_output=True, text=True).stdout
            args += arguments(src)
        for arg in args:
            for flag in arg["flags"]:
                if flag in UNREQUIRED.get(name, {}):
                    arg["required"] = False
                    arg["patch"] = UNREQUIRED[name][flag]
        args += PATCHED.get(name, [])
        write(name, {"entry_point": name, "repo": f"https://github.com/{repo}", "commit": commit, "paths": paths,
                     "parser": "argparse", "allow_abbrev": abbrev, "arguments": args})
    write("tensorflow_bert", tensorflow_contract())
    if TORCHTITAN[0] in mirrors:
        write("torchtitan_llama", torchtitan_contract(mirrors[TORCHTITAN[0]]))
    return 0


def torchtitan_contract(git_dir: str) -> dict:
    """``--module``/``--config`` (config/manager.py) and ``--<section>.<field>`` of the sections read."""
    repo, commit, path, sections = TORCHTITAN
    src = subprocess.run(["git", "--git-dir", git_dir, "show", f"{commit}:{path}"],
                         check=True, capture_output=True, text=True).stdout
    args = [{"flags": [f"--{n}"], "dest": n, "action": "store", "type": "str", "required": True, "default": None}
            for n in ("module", "config")]
    args += [{"flags": [f"--{n}"], "dest": n, "action": "store", "type": "str", "required": False, "default": None}
             for n in ("hf_assets_path", "dump_folder")]
    for node in ast.parse(src).body:
        if isinstance(node, ast.ClassDef) and node.name in sections:
            for b in node.body:
                if isinstance(b, ast.AnnAssign) and isinstance(b.target, ast.Name):
                    kind = ast.unparse(b.annotation)
                    args.append({"flags": [f"--{sections[node.name]}.{b.target.id}"],
                                 "dest": f"{sections[node.name]}.{b.target.id}",
                                 "action": "store_true" if kind == "bool" else "store",
                                 "type": kind if kind in ("int", "float", "str", "bool") else "str",
                                 "required": False, "default": None})
    return {"entry_point": "torchtitan_llama", "repo": f"https://github.com/{repo}", "commit": commit,
            "paths": ["torchtitan/config/manager.py", path], "parser": "tyro", "allow_abbrev": False, "arguments": args}


if __name__ == "__main__":
    sys.exit(main())
