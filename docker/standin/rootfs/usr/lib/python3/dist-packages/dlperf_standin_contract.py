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
  dividing ``train_batch_size`` (DLE's ValueErrors); ``--config_file`` must exist, be a BERT
  config, and be the size ``--bert_model`` names (a BERT-large config with ``bert-base-uncased``
  is refused: the suite would measure the wrong model).
* tensorflow_bert: ``--bert_config_file`` must exist and be a BERT config.
* mxnet_bert (gluon-nlp): ``total_batch_size % (accumulate * workers) == 0`` (its assert).
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


def build_parser(contract: dict, prog: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, allow_abbrev=contract.get("allow_abbrev", True))
    for a in contract["arguments"]:
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


def _dims(doc: dict) -> str:
    return (f"hidden {doc['hidden_size']}, {doc['num_hidden_layers']} layers, {doc['num_attention_heads']} heads, "
            f"intermediate {doc['intermediate_size']}")


def check_pytorch_bert(ns: argparse.Namespace) -> dict:
    if not ns.do_train:
        raise ContractError("ValueError", " `do_train`  must be True.")
    acc = ns.gradient_accumulation_steps
    if acc < 1:
        raise ContractError("ValueError", f"Invalid gradient_accumulation_steps parameter: {acc}, should be >= 1")
    if ns.train_batch_size % acc != 0:
        raise ContractError("ValueError", f"Invalid gradient_accumulation_steps parameter: {acc}, batch size "
                                          f"{ns.train_batch_size} should be divisible")
    doc = read_bert_config(ns.config_file, "--config_file")
    size = bert_size(doc)
    claimed = next((n for n in BERT_SIZES if f"bert-{n}" in (ns.bert_model or "")), None)
    if claimed and size != claimed:
        raise ContractError(
            "ValueError",
            f"--config_file={ns.config_file} is BERT-{size or 'custom'} ({_dims(doc)}) but --bert_model="
            f"{ns.bert_model} claims BERT-{claimed} ({_dims(BERT_SIZES[claimed])}): the run would measure the wrong model")
    return doc


def check_tensorflow_bert(ns: argparse.Namespace) -> dict:
    return read_bert_config(getattr(ns, "bert_config_file", None), "--bert_config_file")


def check_mxnet_bert(ns: argparse.Namespace, world: int) -> None:
    if ns.total_batch_size % (ns.accumulate * world) != 0:
        raise ContractError("AssertionError", "", where="run_pretraining.py, line 211: "
                            "assert args.total_batch_size % (args.accumulate * num_workers) == 0")


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
