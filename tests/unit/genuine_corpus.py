"""The genuine-log corpus (tests/data/genuine_logs/corpus.json): real public logs with provenance, laid
out in DLPerf's tree and read by the real extractor. Shared by the corpus and seed-001 tests."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "data" / "genuine_logs"


def entries() -> list[dict]:
    return json.loads((ROOT / "corpus.json").read_text())["entries"]


def read(entry: dict) -> bytes:
    """The log's bytes (stored gzip-compressed: tqdm bars make the DLE logs large and repetitive)."""
    path = ROOT / entry["file"]
    data = path.read_bytes()
    return gzip.decompress(data) if path.suffix == ".gz" else data


def lay_out(entry: dict, tree: Path) -> Path:
    """Put one entry's log at its DLPerf-tree place (``as``) under ``tree``."""
    dst = tree / entry["as"]
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_bytes(read(entry))
    return dst
