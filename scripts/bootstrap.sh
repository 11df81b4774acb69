#!/usr/bin/env bash
# Idempotent environment setup for airflow_iceberg_provider.
#
# Creates (only what is missing):
#   * Debian packages: Java 17, Maven (resolves the Spark-side jars), PostgreSQL server (server-catalog
#     tests), chromium + chromium-driver (browser test)
#   * .venv            – the Airflow side (apache-airflow, Spark provider, pyiceberg, pytest)
#   * .spark-runtime/  – the Spark side (pyspark 3.5.7 with the Spark Connect client, pyarrow for Arrow
#                        collects) and the jars of spark-deps/jars.lock, resolved with Maven
#   * .spark-runtime-4.1/ – the Spark 4.1 side (pyspark 4.1.1) and the jars of spark-deps/spark-4.1/jars.lock
#   * .work/airflow    – an AIRFLOW_HOME with a migrated SQLite metadata DB
#
# Re-running it is cheap: every step checks a marker or the artefact first.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-python3.11}"
command -v "$PY" >/dev/null 2>&1 || PY=python3
VENV="$ROOT/.venv"
RT="$ROOT/.spark-runtime"
JARS="$RT/jars"
WORK="$ROOT/.work"

log() { printf '[bootstrap] %s\n' "$*" >&2; }

# ---------------------------------------------------------------- apt packages
need_apt=()
command -v java >/dev/null 2>&1 && java -version 2>&1 | grep -q '"17\.' || need_apt+=(openjdk-17-jre-headless)
command -v mvn >/dev/null 2>&1 || need_apt+=(maven)
command -v zip >/dev/null 2>&1 || need_apt+=(zip)
command -v unzip >/dev/null 2>&1 || need_apt+=(unzip)
# Production catalogs: a PostgreSQL server for the SQL-catalog tests (Spark's JDBC driver comes from Maven).
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need_apt+=(postgresql)
# Governance view (#17): the real-browser test drives Debian's Chromium through chromedriver (no browser download).
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
command -v chromedriver >/dev/null 2>&1 || need_apt+=(chromium-driver)
if [ ${#need_apt[@]} -gt 0 ]; then
  log "installing Debian packages: ${need_apt[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi

# ---------------------------------------------------------------- Airflow venv
STAMP="$VENV/.bootstrap-$(sha1sum "$ROOT/pyproject.toml" | cut -c1-12)"
if [ ! -f "$STAMP" ]; then
  log "creating Airflow venv in $VENV"
  [ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
  "$VENV/bin/pip" install -q --upgrade pip
  "$VENV/bin/pip" install -q -e "$ROOT[dev]"
  rm -f "$VENV"/.bootstrap-*
  touch "$STAMP"
fi

# ---------------------------------------------------------------- Spark runtime
# pyspark is pinned to the Spark version of the Spark Connect server jar (spark-deps/pom.xml,
# spark.version): Maven Central serves org.apache.spark:spark-connect_2.12 at 3.5.7, so the whole
# Spark side is 3.5.7. The [connect] extra brings the Spark Connect client's grpcio, grpcio-status,
# googleapis-common-protos and pandas; pandas stays on 2.x, the line Spark 3.5 supports.
RT_STAMP="$RT/.ok-pyspark-3.5.7-connect"
if [ ! -f "$RT_STAMP" ]; then
  log "creating Spark runtime venv in $RT (pyspark 3.5.7 + Spark Connect client)"
  [ -x "$RT/bin/python" ] || "$PY" -m venv "$RT"
  "$RT/bin/pip" install -q --upgrade pip
  "$RT/bin/pip" install -q "pyspark[connect]==3.5.7" "pyarrow==18.1.0" "pandas>=2.2,<3" \
    "grpcio" "grpcio-status" "googleapis-common-protos"
  # Earlier runtimes took jars out of this PyPI package; nothing uses it any more.
  if "$RT/bin/pip" show -q snowpark-connect-deps-iceberg >/dev/null 2>&1; then
    "$RT/bin/pip" uninstall -q -y snowpark-connect-deps-iceberg
  fi
  rm -f "$RT"/.ok-pyspark-*
  touch "$RT_STAMP"
fi

# ---------------------------------------------------------------- Spark-side jars (Maven)
# Pinned Maven coordinates (spark-deps/pom.xml; spark-deps/rest-fixture/pom.xml for Iceberg's REST
# test server), resolved by Maven itself, so the machine's settings.xml (mirrors, proxies) applies.
# Every jar is checked against spark-deps/jars.lock (folder, coordinates, sha256) before it is
# placed; a folder keeps only the jars the lock lists. Folders under .spark-runtime/:
#   jars/          Iceberg Spark runtime, SQLite and PostgreSQL JDBC drivers (every job)
#   jars/s3/       iceberg-aws-bundle (S3FileIO) + hadoop-aws and its AWS SDK v1 bundle (S3A)
#   jars/connect/  the Spark Connect server plugin
#   rest-fixture/  Apache Iceberg's RESTCatalogServer and its classpath (tests only)
LOCK="$ROOT/spark-deps/jars.lock"
# shellcheck source=spark-deps/resolve.sh
source "$ROOT/spark-deps/resolve.sh"
install_locked_jars "$RT" "$ROOT/spark-deps"

# ---------------------------------------------------------------- Spark driver start-up (CDS)
# A class-data-sharing archive of the classes a provider job loads (scripts/spark_cds_warmup.py):
# drivers started by scripts/env.sh map it instead of loading those classes again, which roughly
# halves a short job's start-up CPU on small machines (docs/performance.md). It is tied to the JDK
# build and the jars, so it is rebuilt when either changes; a JVM that cannot use
# it starts as usual. One archive per Spark runtime (scripts/cds_archive.sh), in <runtime>/cds/.
# shellcheck source=scripts/cds_archive.sh
source "$ROOT/scripts/cds_archive.sh"
build_cds_archive 3.5 "$RT" "$LOCK" "$RT/cds"

# ---------------------------------------------------------------- Spark 4.1 runtime
# The second supported Spark line ([iceberg_provider] spark_runtime = 4.1, docs/compatibility.md):
# pyspark 4.1 (Scala 2.13; its jars hold the Spark Connect server) in .spark-runtime-4.1/, and the
# jars of spark-deps/spark-4.1/jars.lock (Iceberg's 4.1 runtime at 1.12.0), checked the same way.
# The Airflow venv's pyspark-client (pyproject.toml) is pinned to the same minor: on Spark 4 the
# Connect client runs inside the task process.
RT41="$ROOT/.spark-runtime-4.1"
RT41_STAMP="$RT41/.ok-pyspark-4.1.1"
if [ ! -f "$RT41_STAMP" ]; then
  log "creating Spark 4.1 runtime venv in $RT41 (pyspark 4.1.1)"
  [ -x "$RT41/bin/python" ] || "$PY" -m venv "$RT41"
  "$RT41/bin/pip" install -q --upgrade pip
  "$RT41/bin/pip" install -q "pyspark[connect]==4.1.1" "pyarrow==18.1.0" "pandas>=2.2,<3" \
    "grpcio" "grpcio-status" "googleapis-common-protos" "zstandard"
  rm -f "$RT41"/.ok-pyspark-*
  touch "$RT41_STAMP"
fi
install_locked_jars "$RT41" "$ROOT/spark-deps/spark-4.1"
build_cds_archive 4.1 "$RT41" "$ROOT/spark-deps/spark-4.1/jars.lock" "$RT41/cds"

# ---------------------------------------------------------------- AIRFLOW_HOME
export AIRFLOW_HOME="$WORK/airflow"
mkdir -p "$AIRFLOW_HOME"
if [ ! -f "$AIRFLOW_HOME/.migrated" ]; then
  log "migrating Airflow metadata DB in $AIRFLOW_HOME"
  AIRFLOW__CORE__LOAD_EXAMPLES=False AIRFLOW__CORE__DAGS_FOLDER="$ROOT/example_dags" \
    "$VENV/bin/airflow" db migrate >/dev/null
  touch "$AIRFLOW_HOME/.migrated"
fi
# A pristine migrated DB that nothing ever runs against: tests copy it for an isolated Airflow
# (the shared DB above collects DAGs, runs and triggers from `make demo` and dags tests).
PRISTINE="$WORK/airflow-pristine"
if [ ! -f "$PRISTINE/.migrated" ]; then
  log "migrating a pristine Airflow DB template in $PRISTINE"
  rm -rf "$PRISTINE" && mkdir -p "$PRISTINE"
  AIRFLOW_HOME="$PRISTINE" AIRFLOW__CORE__LOAD_EXAMPLES=False AIRFLOW__CORE__DAGS_FOLDER="$PRISTINE/no-dags" \
    "$VENV/bin/airflow" db migrate >/dev/null
  touch "$PRISTINE/.migrated"
fi
log "ready: venv=$VENV spark-runtime=$RT AIRFLOW_HOME=$AIRFLOW_HOME"
