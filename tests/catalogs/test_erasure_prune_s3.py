"""Erasure pruning on object storage (#13): the probe ``erasure_scan`` runs for ``s3://`` data
files — ranged reads (footer, bloom filter blocks, dictionary pages) through Hadoop's
FileSystem (S3A) — against SeaweedFS. One local Spark JVM in the Spark runtime's python (no
spark-submit); the S3 credentials reach it through its environment, never its argv.
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.support.servers import seaweed, skip_or_fail
from tests.support.task_state import child_env

pytestmark = [pytest.mark.rest, pytest.mark.spark]
ROOT = Path(__file__).resolve().parents[2]

PROBE = r"""
import json, os, sys
from pyspark.sql import SparkSession
from airflow_iceberg_provider.spark_jobs import table_access
from airflow_iceberg_provider.spark_jobs.erasure import prune as ep
from airflow_iceberg_provider.spark_jobs.erasure import scan as esc
c = json.loads(os.environ.pop("AIP_PROBE"))
b = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").config("spark.jars", c["jars"])
for k, v in c["hadoop"].items():
    b = b.config("spark.hadoop." + k, v)
spark = b.getOrCreate()
run = type("Run", (), {"spark": spark, "access": table_access.for_session(spark)})()
out = {}
for name, f in c["files"].items():
    for label, keys in c["keys"].items():
        got = esc._probe_remote(run, f, {"c": ep.key_probes(keys)}, {"c": 1})
        out[f"{name}/{label}"] = got.get("c", "no-answer")
spark.stop()
print("PROBE " + json.dumps(out))
"""


def test_bloom_and_dictionary_proofs_through_s3a(tmp_path):
    jars = os.environ.get("AIP_S3_SPARK_JARS", "")
    if not jars:
        skip_or_fail("S3A jars missing (AIP_S3_SPARK_JARS empty): run scripts/bootstrap.sh")
    from tests.support.s3 import s3fs

    server = seaweed()
    s3 = s3fs(server)
    bucket = f"prune{uuid.uuid4().hex[:10]}"
    s3.create_dir(bucket)  # a plain bucket (the table bucket refuses plain objects)
    schema = pa.schema([pa.field("c", pa.string(), metadata={b"PARQUET:field_id": b"1"})])
    layouts = {
        # few keys per chunk: dictionary pages only, no bloom filter (what parquet-mr writes)
        "dictionary": ([f"customer-{i % 40:03d}" for i in range(2000)], {"row_group_size": 700}),
        # thousands of keys, dictionary off: only the bloom filter can prove absence
        "bloom": (
            [f"customer-{i:05d}" for i in range(3000)],
            {"use_dictionary": False, "bloom_filter_options": {"c": {"ndv": 3000, "fpp": 0.001}}},
        ),
    }
    files = {}
    for name, (values, opts) in layouts.items():
        key = f"{bucket}/data/{name}.parquet"
        with s3.open_output_stream(key) as out:
            pq.write_table(pa.table({"c": values}, schema=schema), out, compression="zstd", **opts)
        files[name] = {"path": f"s3://{key}", "location": f"s3://{key}", "size": s3.get_file_info(key).size}
    files["missing"] = {"path": "s3://x", "location": f"s3://{bucket}/data/none.parquet", "size": 100}
    spec = {
        "jars": jars,
        "hadoop": {
            "fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
            "fs.s3a.endpoint": server.s3_endpoint,
            "fs.s3a.path.style.access": "true",
            "fs.s3a.connection.ssl.enabled": "false",
            "fs.s3a.endpoint.region": "us-east-1",
            "fs.s3a.access.key": server.access_key,
            "fs.s3a.secret.key": server.secret_key,
        },
        "files": files,
        "keys": {"absent": ["nobody", "customer-99999"], "present": ["nobody", "customer-039", "customer-00039"]},
    }
    python = os.environ.get("AIRFLOW__ICEBERG_PROVIDER__PYSPARK_PYTHON") or str(ROOT / ".spark-runtime/bin/python")
    env = child_env(AIP_PROBE=json.dumps(spec))
    done = subprocess.run(
        [python, "-c", PROBE], env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path, check=False
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("PROBE ")]
    assert done.returncode == 0 and lines, done.stderr[-3000:]
    got = json.loads(lines[-1][len("PROBE ") :])
    assert got == {
        "dictionary/absent": "dictionary",
        "dictionary/present": None,
        "bloom/absent": "bloom",
        "bloom/present": None,
        "missing/absent": "no-answer",  # an unreadable object proves nothing: it stays a candidate
        "missing/present": "no-answer",
    }, got
    assert server.secret_key not in done.stdout + done.stderr
