"""scripts/testcluster's kill of a simulated node's processes, with real processes: a shell killed inside
``pyenv rehash`` leaves pyenv's lock behind (every later shell on this machine would wait for it), so the
kill removes the lock such a process made; a kill of other processes leaves a lock alone."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.fixtures.cluster import tc


def _holder(tmp_path: Path, name: str, lock: Path) -> subprocess.Popen:
    """A process named like pyenv's rehash command (or not) that makes ``lock`` and keeps running."""
    script = tmp_path / name
    script.write_text(f"#!/bin/bash\n: > {lock}\nwhile :; do sleep 0.1; done\n")
    proc = subprocess.Popen(["bash", str(script)])
    deadline = time.monotonic() + 20
    while not lock.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert lock.exists()
    return proc


@pytest.mark.parametrize("name,removed", [("pyenv-rehash", True), ("some-tool", False)])
def test_a_killed_rehash_leaves_no_pyenv_lock(tmp_path, monkeypatch, name, removed):
    lock = tmp_path / "shims" / ".pyenv-shim"
    lock.parent.mkdir()
    monkeypatch.setattr(tc, "PYENV_LOCK", lock)
    proc = _holder(tmp_path, name, lock)
    try:
        assert ("pyenv-rehash" in tc.process_table()[proc.pid][1]) is removed
        tc.sigkill_all([proc.pid])
        assert not tc.pid_alive(proc.pid)
    finally:
        proc.kill()
        proc.wait(timeout=10)
    assert lock.exists() is not removed


def test_only_a_lock_older_than_any_real_rehash_is_swept(tmp_path, monkeypatch):
    lock = tmp_path / ".pyenv-shim"
    monkeypatch.setattr(tc, "PYENV_LOCK", lock)
    assert tc.clear_stale_pyenv_lock() is False  # none there
    lock.write_text("#!/usr/bin/env bash\n")
    assert tc.clear_stale_pyenv_lock() is False and lock.exists()  # a rehash in progress
    old = time.time() - tc.STALE_PYENV_LOCK_S - 5
    os.utime(lock, (old, old))
    assert tc.clear_stale_pyenv_lock() is True and not lock.exists()
