"""``dlperf sweep --dry-run --cluster slurm.yaml`` prints each trial's sbatch line, its batch script and
every srun line as they would be submitted (cli/_dryrun_slurm.py over remote/slurm_trial.build_job);
a topology the cluster's nodes cannot hold is refused before anything is printed."""

from __future__ import annotations

import subprocess

from dlperf_tasks.cli import main

SLURM_YAML = """
name: pod
scheduler: slurm
login: {host: login1.example.org, user: bench, key_file: /nonexistent/id_ed25519}
slurm: {partition: gpu, account: bench, time_limit: "00:20:00", gpus_per_node: 8, work_dir: /shared/dlperf,
        container: pyxis, exclude: [gpu09]}
"""


def _dry(tmp_path, capsys, *args):
    p = tmp_path / "slurm.yaml"
    p.write_text(SLURM_YAML)
    rc = main(["sweep", "--dry-run", "--cluster", str(p), "--trials", "1", "--batch-sizes", "32",
               "--precisions", "fp32", *args])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_batch_script_and_every_srun_line_are_printed(tmp_path, capsys):
    rc, out, _ = _dry(tmp_path, capsys, "--suite", "pytorch-bert", "--topologies", "2n8g")
    assert rc == 0
    lines = out.splitlines()
    submit = next(l for l in lines if " submit: sbatch --parsable " in l)
    for flag in ("--nodes=2", "--exclusive", "--gpus-per-node=8", "--partition=gpu", "--account=bench",
                 "--time=0-00:20:00", "--exclude=gpu09"):
        assert flag in submit
    script = "\n".join(lines[lines.index(submit) + 1:lines.index("DLPERF_BATCH")])
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)  # the script as printed parses
    trial_id = submit.split(" submit: ")[0]
    sruns = [l for l in lines if l.startswith(f"{trial_id} srun: srun ")]
    assert len(sruns) == 2 and "--overlap" in sruns[0] and "--container-image=nvcr.io#nvidia/pytorch" in sruns[1]
    for s in sruns:  # every srun line printed is in the script
        assert s.split(" srun: ", 1)[1] in script


def test_a_topology_wider_than_the_nodes_is_refused(tmp_path, capsys):
    rc, out, err = _dry(tmp_path, capsys, "--suite", "pytorch-bert", "--topologies", "1n16g")
    assert rc == 2 and "slurm.gpus_per_node is 8" in err and "submit:" not in out
