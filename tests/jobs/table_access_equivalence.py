"""Spark side of tests/spark/test_table_access.py: both table-access implementations, one table.

In one classic session (spark-submit), where both run: builds ``db.access`` with three appends, a
renamed column and a branch, then asks :class:`JvmTableAccess` and :class:`ConnectTableAccess`
every question of the protocol, including about a missing file and a missing directory, and
writes both answers side by side to ``spec["result_path"]``.
"""

from __future__ import annotations

import json
from typing import Any

from iceberg_job_runtime import JobContext, run_job


def answers(access: Any, t: str, snapshots: list[int], files: dict[str, int], missing: str) -> dict[str, Any]:
    from airflow_iceberg_provider.spark_jobs import _fs
    from airflow_iceberg_provider.spark_jobs.erasure.scan import norm_path

    location = access.location(t)
    snaps, manifests = access.manifest_index(t)
    one = sorted(files)[0]
    with access.open_ranged(one) as read:
        footer = read(files[one] - 4, 4).decode("ascii")
    try:
        with access.open_ranged(missing) as read:
            read(0, 4)
        missing_read = "read"
    except OSError:
        missing_read = "OSError"
    return {
        "location": norm_path(location),
        "properties": access.properties(t),
        "field_ids": _fs.top_level_field_ids(access.schema_json(t)),
        "field_ids_first": _fs.top_level_field_ids(access.schema_json(t, snapshots[0])),
        "snapshot_files": {str(s): sorted(norm_path(p) for p in access.snapshot_files(t, s)) for s in snapshots},
        "reachable": {
            str(s): sorted({norm_path(p) for m in ms for p in manifests.get(m, ())}) for s, ms in sorted(snaps.items())
        },
        "lineage": [list(step) for step in access.lineage(t, snapshots[-1])],
        "lineage_missing": list(access.lineage(t, 1)),
        "exists": [access.exists(t, one), access.exists(t, missing)],
        "sizes": {norm_path(k): v for k, v in access.file_sizes([one, missing]).items()},
        # the Parquet files (what the jobs look for: a local file system also holds Hadoop's .crc files)
        "listed": sorted(
            p
            for loc, _ in access.list_files(t, location.rstrip("/") + "/data")
            if (p := norm_path(loc)).endswith(".parquet")
        ),
        "listed_missing": access.list_files(t, location.rstrip("/") + "/nothing-here"),
        "footer": footer,
        "missing_read": missing_read,
        "java_table": access.java_table(t) is not None,
    }


def equivalence(ctx: JobContext) -> dict[str, Any]:
    from airflow_iceberg_provider.spark_jobs.erasure.scan import norm_path
    from airflow_iceberg_provider.spark_jobs.table_access import ConnectTableAccess, JvmTableAccess

    spark = ctx.spark
    t = ctx.table("db.access")
    spark.sql(f"CREATE TABLE {t} (id BIGINT, name STRING) USING iceberg TBLPROPERTIES ('owner.team' = 'lake')")
    for i in range(3):  # positional inserts: the second column is renamed after the first
        spark.sql(f"INSERT INTO {t} SELECT id, CAST(id AS STRING) FROM range({i * 10}, {(i + 1) * 10}, 1, 2)")
        if i == 0:
            spark.sql(f"ALTER TABLE {t} RENAME COLUMN name TO label")
    spark.sql(f"ALTER TABLE {t} CREATE BRANCH side")
    spark.sql(f"DELETE FROM {t} WHERE id < 5")
    spark.sql(f"REFRESH TABLE {t}")
    snapshots = [int(r[0]) for r in spark.sql(f"SELECT snapshot_id FROM {t}.snapshots ORDER BY committed_at").collect()]
    files = {
        str(r[0]): int(r[1]) for r in spark.sql(f"SELECT file_path, file_size_in_bytes FROM {t}.data_files").collect()
    }
    missing = sorted(files)[0].rsplit("/", 1)[0] + "/no-such-file.parquet"
    jvm, sql = JvmTableAccess(spark), ConnectTableAccess(spark)
    out: dict[str, Any] = {
        "jvm": answers(jvm, t, snapshots, files, missing),
        "sql": answers(sql, t, snapshots, files, missing),
        "head": str(snapshots[-1]),
        "snapshots": snapshots,
        "live_files": sorted(norm_path(p) for p in files),
    }
    appended = {}
    for label, access in (("jvm", jvm), ("sql", sql)):
        before = int(spark.sql(f"SELECT count(*) FROM {t}.snapshots").collect()[0][0])
        access.append_empty(t, "side", {"test.append": label})
        spark.sql(f"REFRESH TABLE {t}")
        head = spark.sql(
            f"SELECT s.summary['test.append'] FROM {t}.refs r JOIN {t}.snapshots s ON r.snapshot_id = s.snapshot_id "
            "WHERE r.name = 'side'"
        ).collect()[0][0]
        after = int(spark.sql(f"SELECT count(*) FROM {t}.snapshots").collect()[0][0])
        appended[label] = {"new_snapshots": after - before, "summary": head}
    out["append_empty"] = appended
    with open(ctx.spec["result_path"], "w", encoding="utf-8") as fh:
        json.dump(out, fh)
    return {}


if __name__ == "__main__":
    run_job(equivalence)
