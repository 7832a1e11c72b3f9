"""The image digest recorded for a run, from ``<RepoDigests as JSON> <image id>`` (the CLI's
``{{json .RepoDigests}} {{.Id}}`` or the engine API's inspect, whose JSON has spaces)."""

from dlperf_tasks.remote.dockercmd import parse_digest

IMAGE = "127.0.0.1:5000/nvidia/pytorch:20.06-py3"


def test_several_repo_digests_with_spaces_pick_the_images_repository():
    out = ('["127.0.0.1:5077/nvidia/pytorch@sha256:aa", "127.0.0.1:5000/nvidia/pytorch@sha256:bb", '
           '"127.0.0.1:5000/nvidia/tensorflow@sha256:cc"] sha256:ffff')
    assert parse_digest(out, IMAGE) == "127.0.0.1:5000/nvidia/pytorch@sha256:bb"
    compact = out.replace(", ", ",")
    assert parse_digest(compact, IMAGE) == "127.0.0.1:5000/nvidia/pytorch@sha256:bb"


def test_no_repo_digest_gives_the_image_id():
    assert parse_digest("[] sha256:ffff", "local:1") == "sha256:ffff"
    assert parse_digest("null sha256:ffff", "local:1") == "sha256:ffff"
    assert parse_digest("", IMAGE) is None
