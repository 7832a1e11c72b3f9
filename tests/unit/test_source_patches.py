"""A suite's source patches are real. Each diff applies, at the lines it names, to the exact
upstream lines it touches at the pinned commit (tests/data/upstream_excerpts/*.json: read from the
upstream repositories' git mirrors, with the file's sha256 and line count), the applier is idempotent,
and a checkout that is not the pinned version fails the trial in one line before anything runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dlperf_tasks.catalog import patches
from dlperf_tasks.catalog.loader import load_suite
from dlperf_tasks.catalog.nodefiles import find_data_file
from dlperf_tasks.core.errors import CatalogError

EXCERPTS = Path(__file__).resolve().parents[1] / "data" / "upstream_excerpts"
APPLIER = patches.BUILTIN_DATA_DIR / patches.APPLIER
CASES = [("mxnet-resnet50", "gluon-cv-f9a8a28.json"), ("mxnet-bert", "gluon-nlp-7b7bf60.json")]


def _checkout(tmp_path: Path, excerpt: dict) -> Path:
    """A checkout whose files hold the recorded upstream lines at their line numbers (other lines are
    placeholders: the diffs must not depend on them)."""
    root = tmp_path / "checkout"
    for f in excerpt["files"]:
        lines = [f"# upstream line {i + 1} (not recorded)" for i in range(f["line_count"])]
        for ex in f["excerpts"]:
            lines[ex["line"] - 1: ex["line"] - 1 + len(ex["lines"])] = ex["lines"]
        assert len(lines) == f["line_count"]
        p = root / f["path"]
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("\n".join(lines) + "\n")
    return root


@pytest.mark.parametrize("suite_id,excerpt_file", CASES)
def test_the_suite_diff_applies_to_the_exact_upstream_lines_at_the_pinned_commit(suite_id, excerpt_file, tmp_path):
    suite = load_suite(suite_id)
    excerpt = json.loads((EXCERPTS / excerpt_file).read_text())
    assert excerpt["repo"] == suite.upstream.repo and excerpt["commit"] == suite.upstream.commit
    (name,) = patches.patch_files(suite)
    diff = find_data_file(name, suite.source).read_text()
    parsed = patches.applier().parse(diff, name)
    recorded = {f["path"]: f for f in excerpt["files"]}
    assert {p for p, _ in parsed} == set(recorded)
    for path, hunks in parsed:
        at = {ex["line"]: ex["lines"] for ex in recorded[path]["excerpts"]}
        for start, old, _new in hunks:
            assert at[start] == old, f"{name} {path} @@ -{start}: old lines differ from upstream"
    root = _checkout(tmp_path, excerpt)
    out = subprocess.run([sys.executable, str(APPLIER), "--root", str(root), str(find_data_file(name, suite.source)),
                          "--", sys.executable, "-c", "import os; print(os.environ['DLPERF_PATCHES_APPLIED'])"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == name and f"dlperf-patch: {name} applied to " in out.stderr
    for path, hunks in parsed:
        text = (root / path).read_text().splitlines()
        shift = 0
        for start, old, new in hunks:  # each hunk landed where it says, no offset
            assert text[start - 1 + shift: start - 1 + shift + len(new)] == new
            shift += len(new) - len(old)
        digest = patches.applier().digest(find_data_file(name, suite.source).read_bytes())
        assert text[-1] == f"# dlperf-patch applied: {name} sha256:{digest}"
        assert len(text) == recorded[path]["line_count"] + shift + 1
    snapshot = {p: (root / p).read_bytes() for p, _ in parsed}
    again = subprocess.run([sys.executable, str(APPLIER), "--root", str(root), str(find_data_file(name, suite.source)),
                            "--", "true"], capture_output=True, text=True, timeout=60)
    assert again.returncode == 0 and f"{name} already applied" in again.stderr
    assert snapshot == {p: (root / p).read_bytes() for p, _ in parsed}


def test_resnet_patch_makes_the_seed_log_lines_and_stop():
    """What the patch changes is what DLPerf's extractor needs: a Speed line per batch, no Loss line, a stop."""
    diff = find_data_file("gluon-cv-f9a8a28-dlperf-rn50.diff").read_text()
    added = [l[1:].strip() for l in diff.splitlines() if l.startswith("+") and not l.startswith("+++")]
    removed = [l[1:].strip() for l in diff.splitlines() if l.startswith("-") and not l.startswith("---")]
    assert "logging.info('Epoch[%d] Batch[%d]\\tSpeed: %.2f samples/sec'," in added
    assert any("Loss[%.3f]" in l for l in removed)
    assert "parser.add_argument('--num-batches', type=int, default=0," in added
    assert "if args.num_batches and nbatch >= args.num_batches:" in added


def test_a_checkout_that_is_not_the_pinned_version_fails_in_one_line_and_runs_nothing(tmp_path):
    root = tmp_path / "other"
    f = root / "scripts" / "classification" / "imagenet" / "train_horovod.py"
    f.parent.mkdir(parents=True)
    f.write_text("print('a newer gluon-cv')\n")
    marker = tmp_path / "ran"
    out = subprocess.run([sys.executable, str(APPLIER), "--root", str(root),
                          str(find_data_file("gluon-cv-f9a8a28-dlperf-rn50.diff")), "--", "touch", str(marker)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 97 and not marker.exists()
    (line,) = out.stderr.strip().splitlines()
    assert line.startswith("dlperf-patch: gluon-cv-f9a8a28-dlperf-rn50.diff: hunk @@ -69 @@ does not apply to "
                           "scripts/classification/imagenet/train_horovod.py")
    assert f.read_text() == "print('a newer gluon-cv')\n"


def test_wrap_and_checkout_root():
    suite = load_suite("mxnet-resnet50")
    argv = patches.wrap(suite, ["mpirun", "-np", "8", "python3", "train_horovod.py"],
                        "/workspace/gluon-cv/scripts/classification/imagenet", {})
    assert argv == ["python3", "/dlperf/catalog/dlperf_patch.py", "--root", "/workspace/gluon-cv",
                    "/dlperf/catalog/gluon-cv-f9a8a28-dlperf-rn50.diff", "--", "mpirun", "-x", "DLPERF_PATCHES_APPLIED",
                    "-np", "8", "python3", "train_horovod.py"]
    assert patches.wrap(load_suite("pytorch-bert"), ["python3", "x.py"], "/w", {}) == ["python3", "x.py"]
    with pytest.raises(ValueError, match="does not end with upstream.workdir"):
        patches.checkout_root("/opt/elsewhere", "scripts/classification/imagenet")
    assert sorted(load_suite("mxnet-bert").node_files()) == ["dlperf_patch.py", "gluon-nlp-7b7bf60-dlperf-bert.diff"]


def test_catalog_refuses_a_patch_file_that_is_not_a_unified_diff(tmp_path):
    from dlperf_tasks.catalog.loader import load_file

    src = Path(load_suite("mxnet-resnet50").source).read_text()
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "broken.diff").write_text("this is not a diff\n")
    bad = tmp_path / "mxnet-resnet50.yaml"
    bad.write_text(src.replace("file: gluon-cv-f9a8a28-dlperf-rn50.diff", "file: broken.diff"))
    with pytest.raises(CatalogError, match="broken.diff: no hunks"):
        load_file(bad)


def test_the_stand_in_image_carries_the_marks_of_the_applied_patches():
    """The overlay stands for an image built with the patches in; the applier leaves such files alone."""
    rootfs = Path(__file__).resolve().parents[2] / "docker" / "standin" / "rootfs" / "workspace"
    for suite_id in ("mxnet-resnet50", "mxnet-bert"):
        suite = load_suite(suite_id)
        (name,) = patches.patch_files(suite)
        root = rootfs / patches.checkout_root(suite.launcher["workdir"], suite.upstream.workdir).split("/")[-1]
        for path, _ in patches.applier().parse(find_data_file(name).read_text(), name):
            assert f"# dlperf-patch applied: {name}" in (root / path).read_text().splitlines()
