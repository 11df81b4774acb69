"""Airflow assets for Iceberg tables: URIs, asset partitions and OpenLineage datasets."""
