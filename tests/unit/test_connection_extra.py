"""One reader of a connection's ``extra`` (remote.connections.connection_extra): the SSH node
secrets, inventories built from connections and the S3 store all go through it, each raising its
own error class that names the connection and never echoes the extra text."""

from __future__ import annotations

import pytest

from dlperf_tasks.core.errors import RemoteError, StoreError
from dlperf_tasks.remote.connections import connection_extra, ssh_secrets
from dlperf_tasks.remote.inventory import Cluster
from dlperf_tasks.store.s3backend import settings_from_connection


def test_mapping_json_text_and_empty_are_read_alike():
    assert connection_extra({"extra": {"a": 1}}) == {"a": 1}
    assert connection_extra({"extra": '{"a": 1}'}) == {"a": 1}
    assert connection_extra({"extra": ""}) == {} == connection_extra({})
    src = {"a": 1}
    assert connection_extra({"extra": src}) is not src  # a copy: callers may pop keys


@pytest.mark.parametrize("call, error", [
    (lambda c: ssh_secrets(c, "node_ssh"), RemoteError),
    (lambda c: Cluster.from_connections([{**c, "host": "h"}]), RemoteError),
    (settings_from_connection, StoreError),
])
def test_each_caller_keeps_its_error_class_and_names_the_connection(call, error):
    for bad, words in [("{not json s3cr3t", "not valid JSON"), ("[1, 2]", "must be a JSON object")]:
        with pytest.raises(error, match=words) as ei:
            call({"conn_id": "node_ssh", "extra": bad})
        assert "node_ssh" in str(ei.value) and "s3cr3t" not in str(ei.value)


def test_store_settings_from_a_json_extra():
    out = settings_from_connection({"login": "k", "password": "s", "extra": '{"endpoint_url": "http://h:1", '
                                    '"region_name": "r", "s3": {"addressing_style": "path"}}'})
    assert out == {"access_key_id": "k", "secret_access_key": "s", "endpoint_url": "http://h:1", "region": "r",
                   "addressing_style": "path"}
