"""The job script's liveness check (``signal <dir> 0``), run here with real processes: a process
group whose members have all exited but are not reaped yet (zombies: on a node whose init reaps
orphans late they stay for seconds) is dead; one with a running member is alive."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from dlperf_tasks.remote import jobs


def _signal(job_dir: Path, sig: str) -> str:
    return subprocess.run(["bash", "-c", jobs.JOB_SCRIPT, "dlperf-job", "signal", str(job_dir), sig],
                          capture_output=True, text=True, timeout=30).stdout.strip()


def _state(pid: int) -> str:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rsplit(") ", 1)[1].split()[0]


def test_a_group_of_zombies_is_not_alive_and_a_running_one_is(tmp_path):
    # setsid execs in place (this child is no group leader): the child's pid is its group id
    child = subprocess.Popen(["setsid", "sleep", "30"])
    try:
        (tmp_path / "pid").write_text(str(child.pid))
        deadline = time.monotonic() + 10
        while not Path(f"/proc/{child.pid}/cmdline").read_bytes().startswith(b"sleep"):
            assert time.monotonic() < deadline, "setsid did not exec sleep"
            time.sleep(0.01)
        assert _signal(tmp_path, "0") == "hit"
        child.terminate()
        deadline = time.monotonic() + 10
        while _state(child.pid) != "Z":  # exited, not reaped: this test is its parent and has not waited
            assert time.monotonic() < deadline, "the child did not exit"
            time.sleep(0.01)
        assert _signal(tmp_path, "0") == ""  # kill -0 alone would still succeed here
        assert _signal(tmp_path, "TERM") == "hit"  # other signals still report that the group existed
    finally:
        child.kill()
        child.wait()
    assert _signal(tmp_path, "0") == "" and _signal(tmp_path, "TERM") == ""


def test_no_pid_file_or_a_bad_one_is_never_alive(tmp_path):
    assert _signal(tmp_path, "0") == ""
    for bad in ("1", "0", "-5", "12x", ""):
        (tmp_path / "pid").write_text(bad)
        assert _signal(tmp_path, "0") == "", bad
