"""Pure rules shared by the Airflow side and the Spark jobs: one definition, shipped to both.

:func:`~airflow_iceberg_provider.hooks._job_package.job_package_zip` ships this package in the
Spark job zip next to ``spark_jobs``, so the operators (Airflow side) and the jobs (Spark
driver) import the same module. Rules for every module here:

* import only the standard library and other ``core`` modules at module level: no Airflow,
  no pyiceberg, no pyspark (pyarrow/pyiceberg only inside the functions that need them), so
  every module imports in the Spark runtime without Airflow (``tests/unit/test_spark_job_package.py``);
* no I/O and no engine: values in, decisions out;
* the Airflow side never imports ``spark_jobs``; what both sides need lives here.

Modules: :mod:`.governance` (governance table schemas, the ledger row type, legal-hold naming),
:mod:`.audit_checks` (the audit check-spec grammar), :mod:`.audit_report` (how an audit's outcome
reads), :mod:`.erasure_lifecycle` (erasure statuses, phases, ref analysis, evidence ids),
:mod:`.maintenance_actions` (maintenance action names, order and option checks),
:mod:`.spark_types` (Iceberg -> Spark SQL type names), :mod:`.spec_secrets` (secrets of a job spec
in cluster deploy mode).
"""
