"""Warm-up job for the Spark driver's class-data-sharing (CDS) archive.

``scripts/bootstrap.sh`` runs it once through spark-submit with ``-XX:ArchiveClassesAtExit``:
the JVM writes every class it loaded here into an archive that later drivers map instead of
loading and verifying those classes again. It touches what the provider's jobs touch: the JDBC
catalog, copy-on-write and merge-on-read writes, branches and tags, Iceberg's procedures and
metadata tables, and Python data exchange with the driver.

Usage: spark-submit ... spark_cds_warmup.py <warehouse folder>
"""

from __future__ import annotations

import sys

from pyspark.sql import SparkSession


def main(warehouse: str) -> None:
    spark = (
        SparkSession.builder.appName("cds-warmup")
        .config("spark.sql.extensions", "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions")
        .config("spark.sql.catalog.warm", "org.apache.iceberg.spark.SparkCatalog")
        .config("spark.sql.catalog.warm.type", "jdbc")
        .config("spark.sql.catalog.warm.uri", f"jdbc:sqlite:{warehouse}/catalog.db")
        .config("spark.sql.catalog.warm.warehouse", f"file://{warehouse}/tables")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    sql = spark.sql
    sql("CREATE NAMESPACE IF NOT EXISTS warm.db")
    for name, mode in (("cow", "copy-on-write"), ("mor", "merge-on-read")):
        table = f"warm.db.{name}"
        sql(
            f"CREATE TABLE {table} (id BIGINT, customer STRING, amount DOUBLE, day DATE) USING iceberg "
            f"PARTITIONED BY (day) TBLPROPERTIES ('format-version'='2', 'write.delete.mode'='{mode}', "
            f"'write.update.mode'='{mode}', 'write.merge.mode'='{mode}', "
            "'write.parquet.bloom-filter-enabled.column.customer'='true')"
        )
        rows = [(i, f"c{i % 7}", i * 1.5, f"2026-01-0{1 + i % 3}") for i in range(60)]
        frame = spark.createDataFrame(rows, "id BIGINT, customer STRING, amount DOUBLE, day STRING")
        frame.selectExpr("id", "customer", "amount", "CAST(day AS DATE) AS day").writeTo(table).append()
        sql(f"ALTER TABLE {table} CREATE BRANCH audit")
        sql(f"INSERT INTO {table}.branch_audit VALUES (100, 'c1', 1.0, DATE '2026-01-02')")
        sql(f"CALL warm.system.fast_forward('db.{name}', 'main', 'audit')")
        sql(f"ALTER TABLE {table} CREATE TAG t1")
        sql(f"UPDATE {table} SET amount = amount + 1 WHERE id < 5")
        sql(f"DELETE FROM {table} WHERE customer = 'c3'")
        sql(
            f"MERGE INTO {table} t USING (SELECT 1 AS id, 'c9' AS customer) s ON t.id = s.id "
            "WHEN MATCHED THEN UPDATE SET t.customer = s.customer"
        )
        sql(f"SELECT customer, count(*), sum(amount) FROM {table} GROUP BY customer ORDER BY 1").collect()
        sql(f"SELECT * FROM {table} VERSION AS OF 't1' WHERE customer = 'c3'").toPandas()
        for meta in ("snapshots", "refs", "files", "entries", "manifests", "all_files", "history"):
            sql(f"SELECT * FROM {table}.{meta}").collect()
        sql(f"CALL warm.system.rewrite_data_files(table => 'db.{name}', options => map('min-input-files','1'))")
        sql(f"CALL warm.system.rewrite_position_delete_files(table => 'db.{name}')")
        sql(f"CALL warm.system.rewrite_manifests('db.{name}')")
        sql(f"CALL warm.system.expire_snapshots(table => 'db.{name}', retain_last => 1)")
        sql(f"CALL warm.system.remove_orphan_files(table => 'db.{name}', dry_run => true)")
        spark.read.format("parquet").load(f"{warehouse}/tables/db/{name}/data").count()
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1])
