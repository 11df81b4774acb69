#!/usr/bin/env bash
# Idempotent environment setup for airflow_iceberg_provider.
#
# Creates (only what is missing):
#   * Debian packages: Java 17, sqlite JDBC driver, jarjar (to relocate Jackson),
#     PostgreSQL server + JDBC driver (server-catalog tests), chromium + chromium-driver (browser test)
#   * .venv            – the Airflow side (apache-airflow, Spark provider, pyiceberg, pytest)
#   * .spark-runtime/  – the Spark side (pyspark 3.5.9, pyarrow for Arrow collects, Iceberg 1.10.2 runtime jars;
#                        jars/s3: AWS SDK v2 for S3FileIO + hadoop-aws/SDK v1 for S3A, only for S3 jobs)
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
[ -f /usr/share/java/sqlite-jdbc.jar ] || need_apt+=(libxerial-sqlite-jdbc-java)
[ -f /usr/share/java/jarjar.jar ] || need_apt+=(libjarjar-java)
command -v zip >/dev/null 2>&1 || need_apt+=(zip)
command -v unzip >/dev/null 2>&1 || need_apt+=(unzip)
# Production catalogs (#7): a PostgreSQL server for the SQL-catalog tests and its JDBC driver for Spark.
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need_apt+=(postgresql)
[ -f /usr/share/java/postgresql.jar ] || need_apt+=(libpostgresql-jdbc-java)
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
if [ ! -f "$RT/.ok-pyspark-arrow" ]; then
  log "creating Spark runtime venv in $RT"
  [ -x "$RT/bin/python" ] || "$PY" -m venv "$RT"
  "$RT/bin/pip" install -q --upgrade pip
  "$RT/bin/pip" install -q "pyspark==3.5.9" "snowpark-connect-deps-iceberg==1.0.3" "pyarrow==18.1.0"
  touch "$RT/.ok-pyspark-arrow"
fi

mkdir -p "$JARS"
SITE="$("$RT/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
if [ ! -f "$JARS/iceberg-spark-runtime-3.5_2.12-1.10.2.jar" ]; then
  src="$(find "$SITE" -name 'iceberg-spark-runtime-3.5_2.12-1.10.2.jar' | head -n1)"
  [ -n "$src" ] || { log "Iceberg runtime jar not found in snowpark-connect-deps-iceberg"; exit 1; }
  cp "$src" "$JARS/"
fi
if [ ! -f "$JARS/iceberg-shaded-jackson.jar" ]; then
  log "relocating Jackson for the Iceberg runtime (jarjar)"
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  mkdir -p "$tmp/classes"
  for j in core databind annotations; do
    (cd "$tmp/classes" && unzip -q -o "$SITE/pyspark/jars/jackson-$j-2.15.2.jar" -x 'META-INF/*')
  done
  (cd "$tmp/classes" && zip -q -r "$tmp/jackson.jar" .)
  echo 'rule com.fasterxml.jackson.** org.apache.iceberg.shaded.com.fasterxml.jackson.@1' > "$tmp/rules.txt"
  java -jar /usr/share/java/jarjar.jar process "$tmp/rules.txt" "$tmp/jackson.jar" "$JARS/iceberg-shaded-jackson.jar.part"
  mv "$JARS/iceberg-shaded-jackson.jar.part" "$JARS/iceberg-shaded-jackson.jar"
fi
[ -e "$JARS/sqlite-jdbc.jar" ] || cp "$(readlink -f /usr/share/java/sqlite-jdbc.jar)" "$JARS/sqlite-jdbc.jar"
[ -e "$JARS/postgresql-jdbc.jar" ] || cp "$(readlink -f /usr/share/java/postgresql.jar)" "$JARS/postgresql-jdbc.jar"
# Spark on S3 (#18): Iceberg's S3FileIO (inside the runtime jar) needs the AWS SDK v2 on the classpath.
# Only its jars are taken from the bodo-iceberg-connector wheel (SDK 2.29.26; no Python package is
# installed). They go to $JARS/s3/, used by the S3 tests via AIP_S3_SPARK_JARS (scripts/env.sh), not by
# every local job. kms is needed even without KMS: S3FileIO's class loading touches its model classes.
S3_JARS="$JARS/s3"
if [ ! -f "$S3_JARS/.ok-awssdk-2.29.26" ]; then
  log "extracting the AWS SDK v2 jars for S3FileIO (bodo-iceberg-connector 2026.10 wheel, ~140 MB download)"
  tmp_s3="$(mktemp -d)"
  "$RT/bin/pip" download -q --no-deps "bodo-iceberg-connector==2026.10" -d "$tmp_s3"
  rm -rf "$S3_JARS" && mkdir -p "$S3_JARS"
  sdk_v2=(annotations apache-client arns auth aws-core aws-json-protocol aws-query-protocol aws-xml-protocol
    checksums checksums-spi crt-core endpoints-spi http-auth http-auth-aws http-auth-aws-eventstream
    http-auth-spi http-client-spi identity-spi json-utils kms metrics-spi profiles protocol-core regions
    retries retries-spi s3 sdk-core sts third-party-jackson-core url-connection-client utils)
  members=("bodo_iceberg_connector/jars/libs/reactive-streams-1.0.4.jar" "bodo_iceberg_connector/jars/libs/eventstream-1.0.1.jar")
  for m in "${sdk_v2[@]}"; do members+=("bodo_iceberg_connector/jars/libs/$m-2.29.26.jar"); done
  unzip -q -o -j "$tmp_s3"/bodo_iceberg_connector-2026.10-*.whl "${members[@]}" -d "$S3_JARS"
  rm -rf "$tmp_s3"
  [ "$(ls "$S3_JARS"/*.jar | wc -l)" = "${#members[@]}" ] || { log "AWS SDK v2 jars incomplete in $S3_JARS"; exit 1; }
  touch "$S3_JARS/.ok-awssdk-2.29.26"
fi
# Raw-file reads through Hadoop's FileSystem (erasure's verification, orphan listing) need a Hadoop
# FileSystem for the s3 scheme: S3A. hadoop-aws 3.3.1 + AWS SDK v1 bundle 1.11.901 work with pyspark's
# Hadoop 3.3.4 client; only these two jars are taken from the sagemaker-pyspark sdist (~180 MB download).
if [ ! -f "$S3_JARS/.ok-s3a-hadoop-aws-3.3.1" ]; then
  log "extracting hadoop-aws + AWS SDK v1 bundle for S3A (sagemaker-pyspark 1.4.5 sdist, ~180 MB download)"
  tmp_s3="$(mktemp -d)"
  "$RT/bin/pip" download -q --no-deps --no-binary :all: "sagemaker-pyspark==1.4.5" -d "$tmp_s3"
  tar xzf "$tmp_s3"/sagemaker_pyspark-1.4.5.tar.gz -C "$tmp_s3" --strip-components=3 \
    sagemaker_pyspark-1.4.5/deps/jars/hadoop-aws-3.3.1.jar sagemaker_pyspark-1.4.5/deps/jars/aws-java-sdk-bundle-1.11.901.jar
  mv "$tmp_s3"/hadoop-aws-3.3.1.jar "$tmp_s3"/aws-java-sdk-bundle-1.11.901.jar "$S3_JARS/"
  rm -rf "$tmp_s3"
  touch "$S3_JARS/.ok-s3a-hadoop-aws-3.3.1"
fi

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
