#!/usr/bin/env bash
# Run the whole test suite (all tiers, Spark included) after bootstrapping.
# Extra arguments go to pytest, e.g. `bash scripts/test.sh -m "not spark"`.
# Two pytest-xdist workers by default, one test module per worker at a time (module-scoped servers
# and Spark fixtures stay shared within a module): a Spark job spends most of its wall time waiting
# (JVM start, scheduling, catalog round trips), so two modules side by side use two cores. Modules are
# handed out in collection order (--no-loadscope-reorder), longest first (tests/conftest.py), so the run
# does not end on one long module.
# AIP_TEST_WORKERS=0 runs everything in one process (e.g. to debug one test).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/bootstrap.sh"
export AIP_WORK="${AIP_WORK:-$ROOT/.work/test}"
mkdir -p "$AIP_WORK"
source "$ROOT/scripts/env.sh"
# The suite's Spark Connect servers live for a few modules each, beside other Spark work on two
# cores: the start-up options of the short drivers (C1-only JIT) cost less CPU there than the full
# JIT that scripts/env.sh gives a long-running server.
export AIP_CONNECT_SERVER_JAVA_OPTIONS="$AIRFLOW__ICEBERG_PROVIDER__SPARK_DRIVER_JAVA_OPTIONS"
cd "$ROOT"
set +e
selected=$#  # pytest arguments given: a selection, so the Spark 4.1 tier below does not run
workers="${AIP_TEST_WORKERS:-2}"
if [ "$workers" != "0" ]; then
  set -- -n "$workers" --dist loadfile --no-loadscope-reorder "$@"
fi
# The working tree before the run: a test that rewrites a tracked file or leaves a file git does not
# ignore fails the run (scripts/tree_guard.py), so `git status` stays clean after `make test`.
tree_before="$AIP_WORK/tree-before.json"
python scripts/tree_guard.py record "$tree_before"
# --durations: the slowest tests, beside the slowest modules that tests/conftest.py prints.
python -m pytest --durations=30 "$@"
rc=$?
set -e
# pytest exit code 5 = no tests collected: that must not pass silently.
if [ "$rc" -eq 5 ]; then
  echo "ERROR: pytest collected no tests" >&2
  rc=1
fi
# The Spark 4.1 tier (tests/spark41, marker spark41) on the other runtime: spark-submit (WAP, erasure
# with the maintenance plan's purge, a killed job), and over Spark Connect with the task process as the
# client every stored procedure once, WAP audit and publish, erasure, expiry, token authentication and
# the format v3 lifecycle. The suite above ran on Spark 3.5, where these modules skip. A fresh
# environment: scripts/env.sh picks the 4.1 runtime's folders when nothing of the 3.5 run is left set.
# AIP_TEST_SPARK41=0 skips it; it does not run when pytest arguments select modules.
if [ "${AIP_TEST_SPARK41:-1}" = 1 ] && [ "$selected" -eq 0 ]; then
  set +e
  env -u SPARK_HOME -u AIRFLOW__ICEBERG_PROVIDER__SPARK_JARS -u AIP_S3_SPARK_JARS -u AIP_SPARK_CONNECT_JARS \
    -u AIRFLOW__ICEBERG_PROVIDER__PYSPARK_PYTHON -u AIRFLOW__ICEBERG_PROVIDER__SPARK_DRIVER_JAVA_OPTIONS \
    -u AIRFLOW__ICEBERG_PROVIDER__SPARK_EXECUTOR_JAVA_OPTIONS -u AIP_CONNECT_SERVER_JAVA_OPTIONS \
    AIRFLOW__ICEBERG_PROVIDER__SPARK_RUNTIME=4.1 AIP_WORK="$AIP_WORK/spark41" \
    bash -c 'source scripts/env.sh && python -m pytest -n 2 --dist loadfile -m spark41 tests/spark41'
  rc41=$?
  set -e
  [ "$rc41" -eq 0 ] || rc="$rc41"
fi
# shellcheck disable=SC2086 # AIP_TREE_ALLOW: path prefixes a target may change (make docs-images: docs/images/)
python scripts/tree_guard.py check "$tree_before" ${AIP_TREE_ALLOW:-} || rc=1
exit "$rc"
