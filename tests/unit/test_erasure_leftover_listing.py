"""Listing leftover candidates of a local warehouse (no Spark): the purge's first step for
files a killed rewrite left behind. Only unreferenced Parquet files older than the in-flight
guard are candidates; object stores go through the job's table access instead."""

from __future__ import annotations

import os
import time
from types import SimpleNamespace

import pytest

from airflow_iceberg_provider.spark_jobs.erasure import scan as esc


@pytest.mark.parametrize(
    ("location", "expected"),
    [
        ("file:///wh/db/t/data", "/wh/db/t/data"),
        ("file:/wh/db/t/data", "/wh/db/t/data"),
        ("/wh/db/t/data", "/wh/db/t/data"),
        ("s3://bucket/db/t/data", None),
        ("s3a://bucket/db/t/data", None),
    ],
)
def test_local_dir_only_for_local_locations(location, expected):
    assert esc._local_dir(location) == expected


def _fake_run(table_dir):
    # the job's table access answers the location only: a local directory is listed in Python
    access = SimpleNamespace(location=lambda table: "file:" + str(table_dir))
    return SimpleNamespace(access=access, t="`lake`.`db`.`t`")


def test_unreferenced_parquet_lists_only_old_unreferenced_parquet_files(tmp_path):
    data = tmp_path / "data" / "day=2026-01-01"
    data.mkdir(parents=True)
    old = time.time() - 7200
    files = {}
    for name in ("leftover.parquet", "live.parquet", "fresh.parquet", "notes.txt", "name%20encoded.parquet"):
        p = data / name
        p.write_bytes(b"PAR1")
        files[name] = p
        if name != "fresh.parquet":
            os.utime(p, (old, old))
    referenced = {esc.norm_path("file://" + str(files["live.parquet"]))}
    guard_ms = int((time.time() - 3600) * 1000)
    found = esc.unreferenced_parquet(_fake_run(tmp_path), referenced, guard_ms)
    locs = sorted(loc for _, loc in found)
    assert locs == sorted(["file:" + str(files["leftover.parquet"]), "file:" + str(files["name%20encoded.parquet"])])
    # normalised paths agree with the referenced set's normalisation (a referenced file never listed)
    assert all(p == esc.norm_path(loc) for p, loc in found)


def test_unreferenced_parquet_of_a_table_without_data_dir_is_empty(tmp_path):
    assert esc.unreferenced_parquet(_fake_run(tmp_path), set(), int(time.time() * 1000)) == []
