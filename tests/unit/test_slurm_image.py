"""The image a Slurm trial ran with (remote/slurm_image.py): the catalog's pin goes into pyxis's
``--container-image`` (the Docker runtime's rule, ``ContainerSpec.pinned_ref``), and each node's record keeps
the digest of the reference pyxis says it imported. The line format is pyxis's own
(NVIDIA/pyxis 0.24.0 ``pyxis_slurmstepd.c``; its README shows ``pyxis: imported docker image: almalinux:9``)."""

from __future__ import annotations

import dataclasses

from dlperf_tasks.catalog.loader import load_suite
from dlperf_tasks.remote import slurm_image as si
from dlperf_tasks.remote.slurm_script import SlurmOptions
from dlperf_tasks.remote.slurm_trial import pinned_digest

D = "sha256:" + "ab" * 32
OTHER = "sha256:" + "cd" * 32


def test_the_imported_reference_and_its_digest_are_read_from_pyxis_lines():
    text = ("pyxis: importing docker image: nvcr.io#nvidia/pytorch:24.01-py3@" + D + "\n"
            "pyxis: imported docker image: nvcr.io#nvidia/pytorch:24.01-py3@" + D + "\n"
            "Iteration: 1 ...\n")
    assert si.imported_images(text) == ["nvcr.io#nvidia/pytorch:24.01-py3@" + D]
    assert si.digest_of(si.imported_images(text)[0]) == D
    assert si.digest_of("pyxis: imported docker image: almalinux:9") is None  # a tag: no digest to record
    assert si.imported_images("pyxis: imported docker image: almalinux:9") == ["almalinux:9"]


def test_each_node_keeps_its_own_imported_digest_and_a_mismatch_refuses():
    line = "pyxis: imported docker image: reg#img:1@{}\n"
    env = si.node_images([("node1", line.format(D)), ("node2", line.format(D))])
    assert env == {"node1": {"gpu_model": None, "image_digest": D}, "node2": {"gpu_model": None, "image_digest": D}}
    assert si.refusal(D, env, "7") == ""
    assert si.refusal(None, {}, "7") == ""  # nothing pinned: recorded, never refused
    env = si.node_images([("node1", line.format(D)), ("node2", line.format(OTHER))])
    assert si.refusal(D, env, "7") == (f"slurm job 7: node2 imported {OTHER}, the catalog pins {D}: trial refused "
                                       "(another image than the pinned one)")
    env = si.node_images([("node1", "no pyxis here\n")])
    assert "node1 shows no pyxis import of a digest reference" in si.refusal(D, env, "7")
    assert "no node output" in si.refusal(D, {}, "7")


def test_the_batch_line_names_the_nodes_in_node_id_order():
    assert si.batch_hosts("x\ndlperf-nodes: node3 node4\n") == ["node3", "node4"]
    assert si.batch_hosts("") == []


def test_the_pin_follows_the_docker_runtime_rule_and_only_pyxis_is_checked():
    base = load_suite("pytorch-bert")
    suite = dataclasses.replace(base, container=dataclasses.replace(base.container, digest=D))
    pyxis, apptainer = SlurmOptions("/s", "gpu", container="pyxis"), SlurmOptions("/s", "gpu",
                                                                                   container="apptainer")
    mirror = "127.0.0.1:5000/nvidia/pytorch:20.06-py3"  # a site mirror of the catalog's tag: pinned
    assert suite.container.pinned_ref(mirror) == f"{mirror}@{D}"
    assert pinned_digest(suite, pyxis, mirror) == D
    assert pinned_digest(suite, apptainer, mirror) is None  # apptainer pulls the digest reference itself
    assert pinned_digest(suite, pyxis, "127.0.0.1:5000/nvidia/pytorch:21.03-py3") is None  # another tag
    assert suite.container.pinned_ref("127.0.0.1:5000/nvidia/pytorch:21.03-py3").endswith(":21.03-py3")
    assert pinned_digest(base, pyxis, mirror) is None  # the catalog pins nothing
