"""Where an erasure's secrets go in a real spark-submit (client mode): nowhere but this host's 0600 files.

One erasure job, spark-submit in client mode (never the shared Connect server: the point is what
spark-submit ships), with Spark's event log on and its local directories in the test's tmp dir.
The salt and a catalog secret whose key says nothing about being secret are then searched for
in the event log and in Spark's directories, and the event log must show that the job spec was
not shipped with ``--files``. The subject column is numeric and ANSI mode is on: a key that is not
a number must neither fail the job nor reach a log.
"""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook
from airflow_iceberg_provider.operators.erasure import IcebergErasureOperator
from tests.support.erasure import SALT, add_requests, set_salt_connection
from tests.support.lake import catalog_conn_json, fake_context

pytestmark = [pytest.mark.spark, pytest.mark.security]

#: A catalog property Iceberg ignores, whose key does not look secret: secret by the allowlist.
VENDOR_KEY, VENDOR_SECRET = "vendor.api-ref", "VendorValue-5e8b2c71d4"
#: A subject key that does not convert to the bigint subject column.
NOT_A_NUMBER = "acct-9f3b7c-not-a-number"


def _accounts(hook: IcebergCatalogHook) -> None:
    schema = pa.schema([pa.field("user_id", pa.int64()), pa.field("plan", pa.string())])
    tbl = hook.catalog.create_table(
        "db.accounts",
        schema=schema,
        properties={
            "format-version": "2",
            "write.delete.mode": "merge-on-read",
            "write.metadata.metrics.column.user_id": "none",
        },
    )
    tbl.append(pa.Table.from_pylist([{"user_id": i % 10, "plan": f"p{i}"} for i in range(40)], schema=schema))


def _files_text(root) -> bytes:
    return b"".join(p.read_bytes() for p in root.rglob("*") if p.is_file())


def test_client_mode_erasure_keeps_the_salt_and_catalog_secrets_out_of_spark(tmp_path, monkeypatch, capfd):
    (tmp_path / "warehouse").mkdir()
    monkeypatch.setenv(
        "AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT",
        catalog_conn_json(tmp_path / "catalog.db", tmp_path / "warehouse", properties={VENDOR_KEY: VENDOR_SECRET}),
    )
    monkeypatch.delenv("AIRFLOW_CONN_ERASURE_SALT", raising=False)
    set_salt_connection()
    hook = IcebergCatalogHook()
    hook.ensure_namespace("db")
    _accounts(hook)
    add_requests(hook, "db.requests", {"R-1": "7", "R-2": NOT_A_NUMBER})
    events, local = tmp_path / "events", tmp_path / "local"
    events.mkdir()
    local.mkdir()
    result = IcebergErasureOperator(
        task_id="erase",
        table="db.accounts",
        subject_columns="user_id",
        requests_table="db.requests",
        spark_conf={
            "spark.eventLog.enabled": "true",
            "spark.eventLog.dir": f"file://{events}",
            "spark.local.dir": str(local),
            "spark.sql.ansi.enabled": "true",
        },
    ).execute(fake_context())
    assert result["verification"] == "verified" and result["rows_deleted"] == 4, result
    assert result["keys_not_converted"] == {"user_id": 1}  # counted, never printed
    logs = list(events.iterdir())
    assert logs, "Spark wrote no event log"
    text = _files_text(events) + _files_text(local)
    assert SALT.encode() not in text and VENDOR_SECRET.encode() not in text
    assert NOT_A_NUMBER.encode() not in text
    env = next(
        json.loads(line)
        for line in logs[0].read_text().splitlines()
        if '"Event":"SparkListenerEnvironmentUpdate"' in line
    )
    props = dict(env["Spark Properties"])
    assert props[f"spark.sql.catalog.lakehouse.{VENDOR_KEY}"] == "*********(redacted)"  # there, but redacted
    assert "job_spec.json" not in props.get("spark.files", "")  # the spec stayed on this host
    out = capfd.readouterr()
    assert NOT_A_NUMBER not in out.out + out.err and SALT not in out.out + out.err
