"""The real contract of each upstream entry point, enforced by the stand-in shims.

Each ``dlperf_standin_contracts/<format>.json`` lists the arguments the upstream script's
argparse accepts at its pinned commit (generated from the source by
``docker/standin/tools/gen_contracts.py``; repo, commit and path are in the file), plus the
arguments the suites' source patches add. The shim builds the same argparse parser, so an
unknown or misspelled flag, a bad value or a missing required flag exits 2 with argparse's own
message on stderr, as the real script would. TensorFlow's BERT uses absl flags: an unknown flag
is absl's ``FATAL Flags parsing error`` (exit 1).

After parsing, :func:`check_pytorch_bert` and friends apply what the real code asserts or reads
before training:

* pytorch_bert (DLE run_pretraining.py): ``--do_train``; ``gradient_accumulation_steps >= 1``
  dividing ``train_batch_size`` (DLE's ValueErrors); ``--config_file`` must exist and be a BERT
  config. DLE builds the model from the config alone: a BERT-large config under
  ``--bert_model=bert-base-uncased`` trains BERT-large silently, and so does the stand-in (slower,
  see :func:`work_factor`); refusing that cell is dlperf's pre-launch guard's job.
* tensorflow_bert: ``--bert_config_file`` must exist and be a BERT config; ``--input_files``
  unset fails like r2.3.0 (``input_file_pattern.split(',')`` on None); ``--dtype`` is absl's enum
  ``fp16|bf16|fp32`` (official/utils/flags/_performance.py DTYPE_MAP).
* mxnet_bert (gluon-nlp 7b7bf60): ``--dtype`` must be a NumPy dtype name (``model.cast``);
  no ``--data``: the script builds the model and exits 0 without training (``if args.data:``);
  ``--data`` is expanded like ``nlp.utils.glob`` (comma-separated shell patterns) and
  pretraining_utils.py asserts at least as many files as workers;
  ``total_batch_size % (accumulate * workers) == 0`` (its assert).
* mxnet_resnet50 (gluon-cv f9a8a28): ``--dtype`` must be a NumPy dtype name (``net.cast``).
* megatron_gpt (arguments.py, transformer.py, microbatches.py, mpu at 8aa4619): world size
  divisible by tensor-parallel and by tensor x pipeline parallel (so DP x MP x PP = world size),
  hidden size divisible by heads, heads and hidden size by the tensor-parallel size, layers by
  the pipeline size, global batch by micro batch x DP, ``max_position_embeddings >= seq_length``,
  the required sizes.

A failed check prints a Python traceback ending in the real exception text and exits 1.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

CONTRACT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "dlperf_standin_contracts")
_TYPES = {"int": int, "float": float, "str": str}
BERT_SIZES = {
    "base": {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072},
    "large": {"hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16, "intermediate_size": 4096},
}


class ContractError(Exception):
    """What the real script raises; ``kind`` is the exception class name it would print."""

    def __init__(self, kind: str, message: str, where: str = "run_pretraining.py"):
        super().__init__(message)
        self.kind, self.where = kind, where


def load(fmt: str) -> dict | None:
    path = os.path.join(CONTRACT_DIR, f"{fmt}.json")
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def applied_patches() -> set[str]:
    """The patches dlperf's applier applied before starting this process (it exports their names)."""
    return {n for n in os.environ.get("DLPERF_PATCHES_APPLIED", "").split(",") if n}


def effective_arguments(contract: dict) -> list[dict]:
    """The entry point's arguments as this process's copy of the script has them: an argument a source
    patch adds or changes (``patch``: the diff's name) counts only when that patch was applied; without
    it the upstream form (``upstream``: the fields it overrides) or nothing."""
    applied, out = applied_patches(), []
    for a in contract["arguments"]:
        if a.get("patch") and a["patch"] not in applied:
            if "upstream" not in a:
                continue
            a = {**a, **a["upstream"]}
        out.append(a)
    return out


def build_parser(contract: dict, prog: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, allow_abbrev=contract.get("allow_abbrev", True))
    for a in effective_arguments(contract):
        kw: dict = {"dest": a["dest"]}
        action = a.get("action") or "store"
        if action in ("store_true", "store_false"):
            kw["action"] = action
            if a.get("default") is not None:
                kw["default"] = a["default"]
        else:
            kw["type"] = _TYPES.get(a.get("type") or "str", str)
            kw["default"] = a.get("default")
            if a.get("nargs") is not None:
                kw["nargs"] = a["nargs"]
            if a.get("choices"):
                kw["choices"] = a["choices"]
            if a.get("required"):
                kw["required"] = True
        p.add_argument(*a["flags"], **kw)
    return p


def parse_absl(contract: dict, argv: list[str]) -> argparse.Namespace:
    """absl-style flags (``--name=value``, ``--name value``, ``--[no]bool``); unknown -> FATAL, exit 1."""
    known = {a["flags"][0].lstrip("-"): a for a in contract["arguments"]}
    ns = argparse.Namespace(**{k: a.get("default") for k, a in known.items()})
    i = 0
    while i < len(argv):
        word = argv[i]
        i += 1
        if not word.startswith("-"):
            continue
        name, eq, value = word.lstrip("-").partition("=")
        spec = known.get(name)
        if spec is None and name.startswith("no") and known.get(name[2:], {}).get("type") == "bool":
            setattr(ns, name[2:], False)
            continue
        if spec is None:
            sys.stderr.write(f"FATAL Flags parsing error: Unknown command line flag '{name}'\n"
                             "Pass --helpshort or --helpfull to see help on flags.\n")
            raise SystemExit(1)
        if spec.get("type") == "bool":
            setattr(ns, name, (value or "true").lower() in ("true", "1", "t", "yes") if eq else True)
            continue
        if not eq:
            if i >= len(argv):
                sys.stderr.write(f"FATAL Flags parsing error: Missing value for flag --{name}\n")
                raise SystemExit(1)
            value, i = argv[i], i + 1
        if spec.get("choices") and value not in spec["choices"]:
            sys.stderr.write(f"FATAL Flags parsing error: flag --{name}={value}: value should be one of "
                             f"<{'|'.join(spec['choices'])}>\n"
                             "Pass --helpshort or --helpfull to see help on flags.\n")
            raise SystemExit(1)
        try:
            setattr(ns, name, _TYPES.get(spec.get("type"), str)(value))
        except ValueError:
            sys.stderr.write(f"FATAL Flags parsing error: flag --{name}={value}: could not convert to {spec['type']}\n")
            raise SystemExit(1)
    return ns


def parse(fmt: str, argv: list[str], prog: str) -> argparse.Namespace:
    """The real script's parse of ``argv`` (exits like it on errors)."""
    contract = load(fmt)
    if contract is None:
        raise SystemExit(f"dlperf-standin: no contract for {fmt!r} in {CONTRACT_DIR}")
    if contract.get("parser") == "absl":
        return parse_absl(contract, argv)
    return build_parser(contract, prog).parse_args(argv)


# --------------------------------------------------------------------------- checks
def read_bert_config(path: str, flag: str) -> dict:
    if not path or not os.path.isfile(path):
        raise ContractError("FileNotFoundError", f"[Errno 2] No such file or directory: {path!r} ({flag})")
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except ValueError as exc:
        raise ContractError("json.decoder.JSONDecodeError", f"{path}: {exc}") from None
    missing = [k for k in BERT_SIZES["base"] if not isinstance(doc.get(k), int)]
    if missing or not isinstance(doc.get("vocab_size"), int):
        raise ContractError("ValueError", f"{path} ({flag}) is not a BERT config: missing {missing or ['vocab_size']}")
    return doc


def bert_size(doc: dict) -> str | None:
    return next((n for n, d in BERT_SIZES.items() if all(doc.get(k) == v for k, v in d.items())), None)


def check_pytorch_bert(ns: argparse.Namespace) -> dict:
    if not ns.do_train:
        raise ContractError("ValueError", " `do_train`  must be True.")
    acc = ns.gradient_accumulation_steps
    if acc < 1:
        raise ContractError("ValueError", f"Invalid gradient_accumulation_steps parameter: {acc}, should be >= 1")
    if ns.train_batch_size % acc != 0:
        raise ContractError("ValueError", f"Invalid gradient_accumulation_steps parameter: {acc}, batch size "
                                          f"{ns.train_batch_size} should be divisible")
    return read_bert_config(ns.config_file, "--config_file")


def check_tensorflow_bert(ns: argparse.Namespace) -> dict:
    doc = read_bert_config(getattr(ns, "bert_config_file", None), "--bert_config_file")
    if not getattr(ns, "input_files", None):
        raise ContractError("AttributeError", "'NoneType' object has no attribute 'split'",
                            where="official/nlp/bert/run_pretraining.py: input_file_pattern.split(',')")
    return doc


#: NumPy dtype names MXNet's ``cast`` accepts for a float model -> the precision that trains
NUMPY_FLOATS = {"float16": "amp", "half": "amp", "f2": "amp", "e": "amp", "float32": "fp32", "single": "fp32",
                "f4": "fp32", "f": "fp32", "float64": "fp64", "double": "fp64", "float": "fp64", "f8": "fp64",
                "d": "fp64"}


def mxnet_precision(dtype: str, where: str) -> str:
    """The precision ``--dtype`` trains in, or numpy's TypeError (``fp16`` is not a dtype name)."""
    prec = NUMPY_FLOATS.get(dtype)
    if prec is None:
        raise ContractError("TypeError", f"data type '{dtype}' not understood", where=where)
    return prec


def glob_data(data: str) -> list[str]:
    """``nlp.utils.glob``: every comma-separated shell pattern expanded."""
    import glob as _glob

    out: list[str] = []
    for pattern in data.split(","):
        out += _glob.glob(os.path.expanduser(pattern.strip()))
    return out


def check_mxnet_bert(ns: argparse.Namespace, world: int) -> int:
    """The number of training files (gluon-nlp's asserts before training)."""
    if ns.total_batch_size % (ns.accumulate * world) != 0:
        raise ContractError("AssertionError", "", where="run_pretraining.py, line 211: "
                            "assert args.total_batch_size % (args.accumulate * num_workers) == 0")
    files = len(glob_data(ns.data))
    if files < world:
        raise ContractError(
            "AssertionError", f"The number of training text files must be no less than the number of "
            f"workers/partitions ({world}). Only {files} files at {ns.data} are found.",
            where="pretraining_utils.py, line 218: assert num_files >= num_parts")
    return files


def work_factor(doc: dict | None, model: str | None = None) -> float:
    """How much slower than the configured speed this launch trains: BERT-large about 3x BERT-base
    (the seeds' tables: MXNet/PyTorch BERT-large runs at roughly a third of BERT-base's samples/s)."""
    if model == "bert_24_1024_16" or (doc is not None and bert_size(doc) == "large"):
        return 3.0
    return 1.0


def check_megatron_gpt(ns: argparse.Namespace, world: int) -> dict:
    """Megatron's derived sizes, or the AssertionError its code raises."""
    def fail(msg: str, where: str = "megatron/arguments.py") -> None:
        raise ContractError("AssertionError", msg, where=where)

    for name in ("num_layers", "hidden_size", "num_attention_heads", "max_position_embeddings"):
        if getattr(ns, name) is None:
            fail(f"{name} argument is None")
    tp = min(ns.tensor_model_parallel_size, world)
    if world % tp:
        fail(f"world size ({world}) is not divisible by tensor model parallel size ({tp})")
    pp = min(ns.pipeline_model_parallel_size, world // tp)
    if world % (tp * pp):
        fail(f"world size is not divisible by tensor parallel size ({tp}) times pipeline paralle size ({pp})")
    dp = world // (tp * pp)
    if ns.micro_batch_size is None or ns.micro_batch_size <= 0:
        fail("micro_batch_size must be > 0")
    gbs = ns.global_batch_size if ns.global_batch_size is not None else ns.micro_batch_size * dp
    if ns.hidden_size % ns.num_attention_heads:
        fail(f"hidden size {ns.hidden_size} % num_attention_heads {ns.num_attention_heads} != 0")
    if ns.seq_length is not None and ns.max_position_embeddings < ns.seq_length:
        fail(f"max_position_embeddings {ns.max_position_embeddings} < seq_length {ns.seq_length}")
    if ns.save is not None and ns.save_interval is None:
        fail("--save needs --save-interval")
    if gbs % (ns.micro_batch_size * dp):
        fail(f"global batch size ({gbs}) is not divisible by micro batch size ({ns.micro_batch_size}) times data "
             f"parallel size ({dp})", where="megatron/microbatches.py")
    for num, den in ((ns.num_attention_heads, tp), (ns.hidden_size, tp)):
        if num % den:
            fail(f"{num} is not divisible by {den}", where="megatron/mpu/utils.py")
    if ns.num_layers % pp:
        fail("num_layers must be divisible by pipeline_model_parallel_size", where="megatron/model/transformer.py")
    return {"tp": tp, "pp": pp, "dp": dp, "global_batch": gbs}


def report(exc: ContractError, script: str) -> int:
    """Print what the real script prints for ``exc`` (a traceback) and return its exit status."""
    sys.stdout.flush()
    tail = f"{exc.kind}: {exc}" if str(exc) else exc.kind
    sys.stderr.write("Traceback (most recent call last):\n"
                     f'  File "{script}", line 1, in <module>\n'
                     f"    (dlperf stand-in: {exc.where})\n"
                     f"{tail}\n")
    sys.stderr.flush()
    return 1
