"""dlperf-patch: apply a suite's source patches to the upstream checkout, then run the command.

Shipped to every node with the catalog files (``/dlperf/catalog/dlperf_patch.py`` in the trial
container) and run in front of the training command, in the rank containers and in the MPI sshd
containers alike, so every process of a trial runs the patched scripts::

    python3 dlperf_patch.py --root /workspace/gluon-cv PATCH.diff [PATCH.diff ...] -- python3 train_horovod.py ...

Each PATCH is a unified diff (``--- a/<path>`` / ``+++ b/<path>`` / ``@@ -l,n +l,n @@`` hunks, as
``diff -u`` or ``git diff`` writes it) against the upstream repository at the commit the suite pins.
Every hunk must hold exactly the lines its header counts. A hunk applies where its old lines
(context and removed) stand in the file, at the line it names or the nearest place they are found;
nothing fuzzy. The files are handled as bytes split at ``\\n`` only: bytes outside the hunks (form
feeds, U+2028, control characters, text that is not UTF-8) stay as they were, a CRLF file keeps CRLF.

A patched Python file gets a last line ``# dlperf-patch applied: <patch name> sha256:<digest of the
patch>``; any other file is recorded in ``<root>/.dlperf-patch-applied`` instead (a comment could
break it). A file whose mark names the patch with the same digest, or with no digest (an image
built with the patch already in), is left as it is; a mark of another version of the patch is
refused. Every check runs before anything is written: a patch that fails leaves every file as it
was and fails the trial with one line (exit 97) before anything trains. Writes go to a unique
temporary file created exclusively beside the target, then replace it, under a lock on the checkout
(concurrent appliers all succeed); nothing is written outside the checkout's real path. Then the
command replaces this process (``exec``) with ``DLPERF_PATCHES_APPLIED`` = the patch names.

Standard library only, Python 3.6+ (the NGC MXNet 20.03 image has Python 3.6).
"""

import hashlib
import os
import re
import sys
import tempfile

MARK = "# dlperf-patch applied: "
SIDECAR = ".dlperf-patch-applied"
HUNK = re.compile(br"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
EXIT_PATCH_FAILED = 97
COMMENT_MARK_SUFFIXES = (".py",)


class PatchError(Exception):
    pass


def _show(b):
    return repr(b.decode("utf-8", "backslashreplace"))[:80]


def _lines(data):
    """``data`` split at ``\\n`` only, each line without its ``\\n`` (a final line without one kept)."""
    out = data.split(b"\n")
    if out and out[-1] == b"":
        out.pop()
    return out


def _key(line):
    return line[:-1] if line.endswith(b"\r") else line


def _target(path_line, name, lineno):
    path = path_line[4:].split(b"\t")[0].strip()
    if path == b"/dev/null":
        raise PatchError("{}: line {}: creating or deleting files is not supported".format(name, lineno))
    if path[:2] in (b"a/", b"b/"):
        path = path[2:]
    try:
        text = path.decode("utf-8")
    except UnicodeDecodeError:
        raise PatchError("{}: line {}: target path is not UTF-8: {}".format(name, lineno, _show(path)))
    if not text or text.startswith("/") or ".." in text.split("/") or "\x00" in text:
        raise PatchError("{}: bad target path {!r}".format(name, text))
    return text


def parse_bytes(data, name):
    """``[(path, [(old_start, old_lines, new_lines), ...]), ...]`` of a unified diff, lines as bytes."""
    files, cur = [], None
    lines = [_key(l) for l in _lines(data)]
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if line.startswith(b"--- ") and i < len(lines) and lines[i].startswith(b"+++ "):
            path = _target(lines[i], name, i + 1)
            i += 1
            cur = (path, [])
            files.append(cur)
            continue
        m = HUNK.match(line)
        if not m:
            continue  # text between files: git's "diff --git"/"index" lines, a trailing blank line, comments
        if cur is None:
            raise PatchError("{}: hunk before any '--- a/... +++ b/...' header".format(name))
        old_n = 1 if m.group(2) is None else int(m.group(2))
        new_n = 1 if m.group(4) is None else int(m.group(4))
        start, old, new, header = int(m.group(1)), [], [], i
        while len(old) < old_n or len(new) < new_n:
            if i >= len(lines):
                raise PatchError("{}: hunk @@ -{} @@ at line {} ends early: its header promises {} old and {} new "
                                 "line(s), it has {} and {} (truncated patch)".format(
                                     name, start, header, old_n, new_n, len(old), len(new)))
            line = lines[i]
            i += 1
            tag, body = line[:1], line[1:]
            if tag == b"\\":
                continue
            if tag in (b" ", b""):
                old.append(body)
                new.append(body)
            elif tag == b"-":
                old.append(body)
            elif tag == b"+":
                new.append(body)
            else:
                raise PatchError("{}: hunk @@ -{} @@ ends early at line {}: {} (truncated patch?)".format(
                    name, start, i, _show(line)))
            if len(old) > old_n or len(new) > new_n:
                raise PatchError("{}: hunk @@ -{} @@ at line {} has more lines than its header promises".format(
                    name, start, header))
        cur[1].append((start, old, new))
    if not files or not all(h for _, h in files):
        raise PatchError("{}: no hunks (not a unified diff)".format(name))
    return files


def parse(text, name):
    """:func:`parse_bytes` of a str diff, lines as str (the catalog's check at load)."""
    files = parse_bytes(text.encode("utf-8", "surrogateescape"), name)
    dec = lambda ls: [l.decode("utf-8", "surrogateescape") for l in ls]  # noqa: E731
    return [(p, [(s, dec(o), dec(n)) for s, o, n in hunks]) for p, hunks in files]


def _find(keys, old, start):
    """Index where ``old`` stands in ``keys``, nearest to ``start`` (0-based), or -1."""
    n = len(old)
    best = -1
    for k in range(0, len(keys) - n + 1):
        if keys[k:k + n] == old and (best < 0 or abs(k - start) < abs(best - start)):
            best = k
    return best


def apply_bytes(data, hunks, name, path):
    """The patched bytes of one file (PatchError when a hunk's old lines are not there)."""
    raw = data.split(b"\n")  # the last item is what follows the last \n (b"" when the file ends with one)
    tail = raw.pop()
    eol_cr = bool(raw) and raw[0].endswith(b"\r")
    lines = raw + ([tail] if tail else [])
    keys = [_key(l) for l in lines]
    shift = 0
    for old_start, old, new in hunks:
        at = _find(keys, old, old_start - 1 + shift)
        if at < 0:
            raise PatchError("{}: hunk @@ -{} @@ does not apply to {} (its {} old line(s) are not in the file: "
                             "not the upstream version the suite pins?)".format(name, old_start, path, len(old)))
        new_raw = [l + b"\r" if eol_cr else l for l in new]
        lines[at:at + len(old)] = new_raw
        keys[at:at + len(old)] = list(new)
        shift += len(new) - len(old)
    out = b"\n".join(lines)
    if lines and (tail == b"" or lines[-1] != tail):
        out += b"\n"
    return out


def digest(patch_bytes):
    return hashlib.sha256(patch_bytes).hexdigest()[:16]


def _comment_mark(path):
    return path.endswith(COMMENT_MARK_SUFFIXES)


def _mark_state(keys, name, dig):
    """``"same"``, ``"other"`` (a mark of another version of the patch) or None."""
    plain = (MARK + name).encode("utf-8")
    for k in keys:
        if k == plain or k == plain + b" sha256:" + dig.encode():
            return "same"
        if k.startswith(plain + b" sha256:"):
            return "other"
    return None


def _inside(root_real, path):
    real = os.path.realpath(path)
    if not real.startswith(root_real.rstrip(os.sep) + os.sep):
        raise PatchError("{} resolves to {}, outside the checkout {}: refused".format(path, real, root_real))
    return real


def _write(real, data):
    """``data`` into ``real`` through a fresh temporary file beside it (O_EXCL: a planted file or
    symlink of any name is never followed), removed again when anything fails."""
    fd, tmp = tempfile.mkstemp(prefix=".dlperf-patch.", suffix=".tmp", dir=os.path.dirname(real))
    done = False
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        if os.path.exists(real):
            os.chmod(tmp, os.stat(real).st_mode & 0o7777)
        os.replace(tmp, real)
        done = True
    finally:
        if not done and os.path.lexists(tmp):
            os.unlink(tmp)


def plan(root, patch_path, overlay=None):
    """``(name, [(real path, rel, new bytes or None, sidecar line or None)])``: every check of one
    patch, nothing written (new bytes None: already applied). ``overlay``: real path -> bytes that
    earlier patches of the same run will have written (and the sidecar's lines under SIDECAR)."""
    overlay = {} if overlay is None else overlay
    name = os.path.basename(patch_path)
    try:
        with open(patch_path, "rb") as f:
            patch = f.read()
    except OSError as exc:
        raise PatchError("{}: cannot read the patch: {}".format(name, exc.strerror or exc))
    if "\n" in name or "\r" in name:
        raise PatchError("{!r}: a patch name must be one line".format(name))
    files = parse_bytes(patch, name)
    dig = digest(patch)
    root_real = os.path.realpath(root)
    side = overlay[SIDECAR] if SIDECAR in overlay else _sidecar_lines(root_real)
    steps = []
    for rel, hunks in files:
        real = _inside(root_real, os.path.join(root, rel))
        try:
            if real in overlay:
                data = overlay[real]
            else:
                with open(real, "rb") as f:
                    data = f.read()
        except OSError as exc:
            raise PatchError("{}: cannot read {}: {}".format(name, rel, exc.strerror or exc))
        entry = "{} sha256:{} {}".format(name, dig, rel)
        if _comment_mark(rel):
            state = _mark_state([_key(l) for l in _lines(data)], name, dig)
        else:
            state = "same" if entry in side else (
                "other" if any(s.startswith(name + " sha256:") and s.endswith(" " + rel) for s in side) else None)
        if state == "same":
            steps.append((real, rel, None, None))
            continue
        if state == "other":
            raise PatchError("{}: {} carries the mark of another version of {} (the patch changed under the same "
                             "name): rebuild the checkout from the pinned commit".format(name, rel, name))
        new = apply_bytes(data, hunks, name, rel)
        if _comment_mark(rel):
            eol = b"\r\n" if data.split(b"\n")[0].endswith(b"\r") else b"\n"
            if new and not new.endswith(b"\n"):
                new += eol
            new += (MARK + name + " sha256:" + dig).encode("utf-8") + eol
            steps.append((real, rel, new, None))
        else:
            steps.append((real, rel, new, entry))
    return name, steps


def _sidecar_lines(root_real):
    try:
        with open(os.path.join(root_real, SIDECAR), "rb") as f:
            return f.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return []


def _lock(root):
    """An exclusive lock on the checkout directory (None where the platform has no flock)."""
    try:
        import fcntl
        fd = os.open(root, os.O_RDONLY)
        fcntl.flock(fd, fcntl.LOCK_EX)
        return fd
    except (ImportError, OSError):
        return None


def apply_all(root, patch_paths):
    """Apply the patches in order under ``root``, all checked before anything is written; returns
    ``[(name, files it changed)]`` (already patched: no files)."""
    overlay, report = {}, []
    for p in patch_paths:
        name, steps = plan(root, p, overlay)
        changed = []
        for real, rel, new, entry in steps:
            if new is None:
                continue
            overlay[real] = new
            changed.append((real, rel))
            if entry:
                if SIDECAR not in overlay:
                    overlay[SIDECAR] = _sidecar_lines(os.path.realpath(root))
                overlay[SIDECAR] = overlay[SIDECAR] + [entry]
        report.append((name, changed))
    root_real = os.path.realpath(root)
    for real, data in overlay.items():
        if real == SIDECAR:
            _write(_inside(root_real, os.path.join(root_real, SIDECAR)), ("\n".join(data) + "\n").encode("utf-8"))
        else:
            _write(real, data)
    return [(name, [rel for _, rel in changed]) for name, changed in report]


def apply(root, patch_path):
    """Apply one patch file under ``root``; returns the files it changed (already patched: none)."""
    return apply_all(root, [patch_path])[0][1]


def main(argv):
    if "--" not in argv or len(argv) < 4 or argv[0] != "--root":
        sys.stderr.write("usage: dlperf_patch.py --root DIR PATCH... -- COMMAND...\n")
        return 2
    sep = argv.index("--")
    root, patches, command = argv[1], argv[2:sep], argv[sep + 1:]
    if not command:
        sys.stderr.write("dlperf-patch: no command after --\n")
        return 2
    lock = _lock(root)
    try:
        report = apply_all(root, patches)
        for name, changed in report:
            sys.stderr.write("dlperf-patch: {} {}\n".format(
                name, "applied to " + ", ".join(changed) if changed else "already applied"))
    except PatchError as exc:
        sys.stderr.write("dlperf-patch: {}\n".format(str(exc).replace("\n", " ")))
        return EXIT_PATCH_FAILED
    except OSError as exc:
        sys.stderr.write("dlperf-patch: cannot patch under {}: {}\n".format(root, exc))
        return EXIT_PATCH_FAILED
    finally:
        if lock is not None:
            os.close(lock)
    sys.stderr.flush()
    os.environ["DLPERF_PATCHES_APPLIED"] = ",".join(name for name, _ in report)
    os.execvp(command[0], command)
    return 127  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
