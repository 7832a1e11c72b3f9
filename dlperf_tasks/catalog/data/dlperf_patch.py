"""dlperf-patch: apply a suite's source patches to the upstream checkout, then run the command.

Shipped to every node with the catalog files (``/dlperf/catalog/dlperf_patch.py`` in the trial
container) and run in front of the training command, in the rank containers and in the MPI sshd
containers alike, so every process of a trial runs the patched scripts::

    python3 dlperf_patch.py --root /workspace/gluon-cv PATCH.diff [PATCH.diff ...] -- python3 train_horovod.py ...

Each PATCH is a unified diff (``--- a/<path>`` / ``+++ b/<path>`` / ``@@ -l,n +l,n @@`` hunks)
against the upstream repository at the commit the suite pins. A hunk applies where its old lines
(context and removed) stand in the file, at the line it names or the nearest place they are found;
nothing fuzzy. A patched file gets a last line ``# dlperf-patch applied: <patch name>``: a file
that carries it (an image built with the patch already in) is left as it is. A hunk whose old
lines are nowhere in the file fails the trial with one line naming the patch, the file and the hunk,
before anything trains. Then the command replaces this process (``exec``) with
``DLPERF_PATCHES_APPLIED`` = the patch names, comma-separated.

Standard library only, Python 3.6+ (the NGC MXNet 20.03 image has Python 3.6).
"""

import os
import re
import sys

MARK = "# dlperf-patch applied: "
HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
EXIT_PATCH_FAILED = 97


class PatchError(Exception):
    pass


def parse(text, name):
    """``[(path, [(old_start, old_lines, new_lines), ...]), ...]`` of a unified diff."""
    files, cur, hunk = [], None, None
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if line.startswith("--- ") and i < len(lines) and lines[i].startswith("+++ "):
            path = lines[i][4:].split("\t")[0].strip()
            i += 1
            if path.startswith("b/"):
                path = path[2:]
            if not path or path.startswith("/") or ".." in path.split("/"):
                raise PatchError("{}: bad target path {!r}".format(name, path))
            cur, hunk = (path, []), None
            files.append(cur)
            continue
        m = HUNK.match(line)
        if m:
            if cur is None:
                raise PatchError("{}: hunk before any '--- a/... +++ b/...' header".format(name))
            hunk = (int(m.group(1)), [], [])
            cur[1].append(hunk)
            continue
        if hunk is None or line.startswith("\\"):
            continue
        tag, body = line[:1], line[1:]
        if tag in (" ", ""):
            hunk[1].append(body)
            hunk[2].append(body)
        elif tag == "-":
            hunk[1].append(body)
        elif tag == "+":
            hunk[2].append(body)
        else:
            raise PatchError("{}: unreadable diff line {}: {!r}".format(name, i, line[:80]))
    if not files or not all(h for _, h in files):
        raise PatchError("{}: no hunks (not a unified diff)".format(name))
    return files


def _find(lines, old, start):
    """Index where ``old`` stands in ``lines``, nearest to ``start`` (0-based), or -1."""
    n = len(old)
    best = -1
    for k in range(0, len(lines) - n + 1):
        if lines[k:k + n] == old and (best < 0 or abs(k - start) < abs(best - start)):
            best = k
    return best


def apply_text(text, hunks, name, path):
    """The patched text of one file (PatchError when a hunk's old lines are not there)."""
    lines = text.splitlines()
    shift = 0
    for old_start, old, new in hunks:
        at = _find(lines, old, old_start - 1 + shift)
        if at < 0:
            raise PatchError("{}: hunk @@ -{} @@ does not apply to {} (its {} old line(s) are not in the file: "
                             "not the upstream version the suite pins?)".format(name, old_start, path, len(old)))
        lines[at:at + len(old)] = new
        shift += len(new) - len(old)
    return "\n".join(lines) + "\n" + MARK + name + "\n"


def apply(root, patch_path):
    """Apply one patch file under ``root``; returns the files it changed (already patched: none)."""
    name = os.path.basename(patch_path)
    with open(patch_path, encoding="utf-8") as f:
        files = parse(f.read(), name)
    changed = []
    for rel, hunks in files:
        path = os.path.join(root, rel)
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except OSError as exc:
            raise PatchError("{}: cannot read {}: {}".format(name, path, exc.strerror or exc))
        if (MARK + name) in text.splitlines():
            continue
        new = apply_text(text, hunks, name, rel)
        tmp = path + ".dlperf-patch.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(new)
        os.chmod(tmp, os.stat(path).st_mode & 0o7777)
        os.replace(tmp, path)
        changed.append(rel)
    return changed


def main(argv):
    if "--" not in argv or len(argv) < 4 or argv[0] != "--root":
        sys.stderr.write("usage: dlperf_patch.py --root DIR PATCH... -- COMMAND...\n")
        return 2
    sep = argv.index("--")
    root, patches, command = argv[1], argv[2:sep], argv[sep + 1:]
    if not command:
        sys.stderr.write("dlperf-patch: no command after --\n")
        return 2
    names = []
    try:
        for p in patches:
            changed = apply(root, p)
            names.append(os.path.basename(p))
            sys.stderr.write("dlperf-patch: {} {}\n".format(
                os.path.basename(p), "applied to " + ", ".join(changed) if changed else "already applied"))
    except PatchError as exc:
        sys.stderr.write("dlperf-patch: {}\n".format(exc))
        return EXIT_PATCH_FAILED
    sys.stderr.flush()
    os.environ["DLPERF_PATCHES_APPLIED"] = ",".join(names)
    os.execvp(command[0], command)
    return 127  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
