"""The node-side patch applier (catalog/data/dlperf_patch.py) is exact or refuses: a truncated or
changed patch is refused with exit 97 and every file untouched, concurrent appliers all succeed,
nothing is written outside the checkout, bytes outside the hunks stay as they were (CRLF, form
feeds, U+2028, control characters, text that is not UTF-8, NUL), a non-Python target gets no
comment, and ``git diff`` output with a trailing blank line applies. Runs the real applier script."""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from dlperf_tasks.catalog import patches

APPLIER = patches.BUILTIN_DATA_DIR / patches.APPLIER

ORIGINAL = b"import os\n\ndef speed():\n    return 1\n\nprint(speed())\n"
DIFF = (b"--- a/pkg/train.py\n+++ b/pkg/train.py\n@@ -3,2 +3,2 @@\n def speed():\n"
        b"-    return 1\n+    return 2\n")


def _run(root: Path, *diffs: Path, command=("true",)) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(APPLIER), "--root", str(root), *map(str, diffs), "--", *command],
                          capture_output=True, timeout=60)


def _setup(tmp_path: Path, content: bytes = ORIGINAL, diff: bytes = DIFF, rel: str = "pkg/train.py"):
    root = tmp_path / "checkout"
    (root / rel).parent.mkdir(parents=True, exist_ok=True)
    (root / rel).write_bytes(content)
    patch = tmp_path / "fix.diff"
    patch.write_bytes(diff)
    return root, root / rel, patch


def _one_refusal(out: subprocess.CompletedProcess, *words: str) -> str:
    assert out.returncode == 97, out.stderr
    (line,) = out.stderr.decode().strip().splitlines()
    assert line.startswith("dlperf-patch: ") and "Traceback" not in line
    for w in words:
        assert w in line, line
    return line


def test_a_truncated_hunk_is_refused_and_the_file_untouched(tmp_path):
    # the header promises 2 old and 3 new lines; the patch ends after two of them
    diff = b"--- a/pkg/train.py\n+++ b/pkg/train.py\n@@ -3,2 +3,3 @@\n def speed():\n-    return 1\n+    x = 2\n"
    root, target, patch = _setup(tmp_path, diff=diff)
    _one_refusal(_run(root, patch), "truncated")
    assert target.read_bytes() == ORIGINAL


def test_a_hunk_cut_by_the_next_file_header_is_refused_and_no_file_is_written(tmp_path):
    diff = (b"--- a/pkg/train.py\n+++ b/pkg/train.py\n@@ -3,2 +3,2 @@\n def speed():\n"
            b"--- a/pkg/other.py\n+++ b/pkg/other.py\n@@ -1 +1 @@\n-a\n+b\n")
    root, target, patch = _setup(tmp_path, diff=diff)
    (root / "pkg" / "other.py").write_bytes(b"a\n")
    _one_refusal(_run(root, patch))
    assert target.read_bytes() == ORIGINAL and (root / "pkg" / "other.py").read_bytes() == b"a\n"


def test_a_failing_second_patch_leaves_the_first_unwritten(tmp_path):
    root, target, patch = _setup(tmp_path)
    bad = tmp_path / "bad.diff"
    bad.write_bytes(b"--- a/pkg/train.py\n+++ b/pkg/train.py\n@@ -1 +1 @@\n-not there\n+x\n")
    _one_refusal(_run(root, patch, bad), "bad.diff", "does not apply")
    assert target.read_bytes() == ORIGINAL


def test_a_changed_patch_under_the_same_name_is_refused_not_taken_as_applied(tmp_path):
    root, target, patch = _setup(tmp_path)
    assert _run(root, patch).returncode == 0
    patched = target.read_bytes()
    assert b"    return 2\n" in patched
    patch.write_bytes(DIFF.replace(b"+    return 2", b"+    return 3"))
    _one_refusal(_run(root, patch), "another version of fix.diff")
    assert target.read_bytes() == patched
    patch.write_bytes(DIFF)  # the same content again: already applied
    again = _run(root, patch)
    assert again.returncode == 0 and b"fix.diff already applied" in again.stderr
    assert target.read_bytes() == patched


def test_concurrent_appliers_on_one_checkout_all_succeed(tmp_path):
    root, target, patch = _setup(tmp_path)
    with ThreadPoolExecutor(8) as pool:
        outs = list(pool.map(lambda _: _run(root, patch), range(8)))
    assert [o.returncode for o in outs] == [0] * 8, [o.stderr for o in outs]
    text = target.read_bytes()
    assert text.count(b"    return 2\n") == 1 and text.count(b"# dlperf-patch applied: fix.diff") == 1
    assert sorted(p.name for p in target.parent.iterdir()) == ["train.py"]  # no temporary file left


def test_a_planted_temp_file_symlink_writes_nothing_outside(tmp_path):
    root, target, patch = _setup(tmp_path)
    outside = tmp_path / "outside.txt"
    outside.write_bytes(b"keep\n")
    (target.parent / "train.py.dlperf-patch.tmp").symlink_to(outside)
    assert _run(root, patch).returncode == 0
    assert outside.read_bytes() == b"keep\n" and b"    return 2\n" in target.read_bytes()


def test_a_symlinked_directory_out_of_the_checkout_is_refused(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "train.py").write_bytes(ORIGINAL)
    root = tmp_path / "checkout"
    root.mkdir()
    (root / "pkg").symlink_to(elsewhere)
    patch = tmp_path / "fix.diff"
    patch.write_bytes(DIFF)
    _one_refusal(_run(root, patch), "outside the checkout")
    assert (elsewhere / "train.py").read_bytes() == ORIGINAL


def test_bytes_outside_the_hunks_stay_as_they_were(tmp_path):
    odd = ("s = 'a\x0cb\u2028c\x1cd\x1de\x85f'\n").encode("utf-8") + b"t = b'\xff\xfe\x00'\n"
    content = odd + ORIGINAL + odd
    root, target, patch = _setup(tmp_path, content=content)
    out = _run(root, patch)
    assert out.returncode == 0, out.stderr
    got = target.read_bytes()
    assert got.startswith(odd + ORIGINAL.replace(b"return 1", b"return 2") + odd)
    assert got[len(content):].startswith(b"# dlperf-patch applied: fix.diff sha256:")


def test_a_crlf_file_keeps_its_line_ends(tmp_path):
    content = ORIGINAL.replace(b"\n", b"\r\n")
    root, target, patch = _setup(tmp_path, content=content)
    assert _run(root, patch).returncode == 0
    got = target.read_bytes()
    assert got.startswith(content.replace(b"return 1", b"return 2"))
    assert got.count(b"\n") == got.count(b"\r\n")


def test_a_patch_that_is_not_utf8_or_has_nul_gives_one_line_or_applies(tmp_path):
    root, target, patch = _setup(tmp_path, content=b"x = '\xe9\x00'\n" + ORIGINAL,
                                 diff=DIFF.replace(b"return 2", b"return '\xe9'"))
    assert _run(root, patch).returncode == 0
    assert target.read_bytes().startswith(b"x = '\xe9\x00'\n" + ORIGINAL.replace(b"return 1", b"return '\xe9'"))
    patch.write_bytes(b"\xff\xfe\x00garbage\n")
    _one_refusal(_run(root, patch), "no hunks")


def test_a_non_python_target_gets_no_comment(tmp_path):
    content = b'{\n  "layers": 24,\n  "hidden": 1024\n}\n'
    diff = b'--- a/cfg/model.json\n+++ b/cfg/model.json\n@@ -2,2 +2,2 @@\n-  "layers": 24,\n+  "layers": 12,\n   "hidden": 1024\n'
    root, target, patch = _setup(tmp_path, content=content, diff=diff, rel="cfg/model.json")
    assert _run(root, patch).returncode == 0
    assert target.read_bytes() == content.replace(b'"layers": 24', b'"layers": 12')
    again = _run(root, patch)
    assert again.returncode == 0 and b"already applied" in again.stderr
    assert target.read_bytes() == content.replace(b'"layers": 24', b'"layers": 12')


def test_git_diff_output_with_a_trailing_blank_line_applies(tmp_path):
    content = b"def speed():\n    return 1\nprint(speed())\n"
    diff = (b"diff --git a/pkg/train.py b/pkg/train.py\nindex 1111111..2222222 100644\n"
            b"--- a/pkg/train.py\n+++ b/pkg/train.py\n@@ -1,2 +1,2 @@\n def speed():\n-    return 1\n+    return 2\n\n")
    root, target, patch = _setup(tmp_path, content=content, diff=diff)
    out = _run(root, patch)
    assert out.returncode == 0, out.stderr
    assert target.read_bytes().startswith(content.replace(b"return 1", b"return 2"))


def test_an_empty_context_line_without_its_space_still_counts(tmp_path):
    diff = b"--- a/pkg/train.py\n+++ b/pkg/train.py\n@@ -4,3 +4,3 @@\n-    return 1\n+    return 2\n\n print(speed())\n"
    root, target, patch = _setup(tmp_path, diff=diff)
    out = _run(root, patch)
    assert out.returncode == 0, out.stderr
