# Source me: the embedded default environment (local Spark, SQLite catalog, local warehouse).
# Values already set in the caller's environment win, so CI or a user can point elsewhere.
_AIP_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export AIP_ROOT="$_AIP_ROOT"
export AIP_WORK="${AIP_WORK:-$_AIP_ROOT/.work}"
# The Spark line: 3.5 (.spark-runtime/) or 4.1 (.spark-runtime-4.1/), as [iceberg_provider] spark_runtime
# says (docs/compatibility.md). Everything below that names a runtime folder follows it.
export AIRFLOW__ICEBERG_PROVIDER__SPARK_RUNTIME="${AIRFLOW__ICEBERG_PROVIDER__SPARK_RUNTIME:-3.5}"
_rt="$_AIP_ROOT/.spark-runtime"
[ "$AIRFLOW__ICEBERG_PROVIDER__SPARK_RUNTIME" = "4.1" ] && _rt="$_AIP_ROOT/.spark-runtime-4.1"
# Spark distribution = the runtime venv's pyspark package (its bin/ holds spark-submit, no python).
export SPARK_HOME="${SPARK_HOME:-$(ls -d "$_rt"/lib/python3*/site-packages/pyspark 2>/dev/null | head -n1)}"
export PATH="$_AIP_ROOT/.venv/bin:$SPARK_HOME/bin:$PATH"
export AIRFLOW_HOME="${AIRFLOW_HOME:-$_AIP_ROOT/.work/airflow}"
export AIRFLOW__CORE__LOAD_EXAMPLES=False
# The pristine migrated Airflow DB (scripts/bootstrap.sh) that tests copy for an isolated Airflow.
export AIP_PRISTINE_AIRFLOW_DB="${AIP_PRISTINE_AIRFLOW_DB:-$_AIP_ROOT/.work/airflow-pristine/airflow.db}"
export AIRFLOW__CORE__DAGS_FOLDER="${AIRFLOW__CORE__DAGS_FOLDER:-$_AIP_ROOT/example_dags}"
export AIRFLOW__CORE__UNIT_TEST_MODE="${AIRFLOW__CORE__UNIT_TEST_MODE:-False}"
_jars="$_rt/jars"
# The Spark-side jars come from Maven (spark-deps/pom.xml, checked against spark-deps/jars.lock by
# scripts/bootstrap.sh). jars/: the Iceberg Spark runtime and the SQLite and PostgreSQL JDBC drivers.
_default_jars="$(ls "$_jars"/*.jar 2>/dev/null | paste -sd, -)"
export AIRFLOW__ICEBERG_PROVIDER__SPARK_JARS="${AIRFLOW__ICEBERG_PROVIDER__SPARK_JARS:-$_default_jars}"
# Object storage: iceberg-aws-bundle (S3FileIO) and hadoop-aws with its AWS SDK bundle (S3A, raw-file
# reads); S3 tests and S3 users append this list to the Spark jars. Local jobs don't need them.
_s3_jars="$(ls "$_jars"/s3/*.jar 2>/dev/null | paste -sd, -)"
export AIP_S3_SPARK_JARS="${AIP_S3_SPARK_JARS:-$_s3_jars}"
# The Spark Connect server plugin (org.apache.spark:spark-connect_2.12, same version as pyspark); pyspark 4
# ships its own (spark-connect_2.13 in SPARK_HOME/jars), so the 4.1 runtime has no such folder.
_connect_jars="$(ls "$_jars"/connect/*.jar 2>/dev/null | paste -sd, -)"
export AIP_SPARK_CONNECT_JARS="${AIP_SPARK_CONNECT_JARS:-$_connect_jars}"
# Apache Iceberg's REST catalog test server: its classpath folder (tests start it with java -cp).
export AIP_ICEBERG_REST_FIXTURE_CP="${AIP_ICEBERG_REST_FIXTURE_CP:-$_AIP_ROOT/.spark-runtime/rest-fixture/*}"
# JVM options for the short Spark jobs of the demo and the tests on small machines: C1-only JIT and the
# serial collector spend far less CPU on start-up than the defaults, and the class-data-sharing
# archive that scripts/bootstrap.sh builds spares loading Spark's and Iceberg's classes again.
export AIP_SPARK_JVM_START_OPTIONS="${AIP_SPARK_JVM_START_OPTIONS:--XX:TieredStopAtLevel=1 -XX:+UseSerialGC}"
_jvm="$AIP_SPARK_JVM_START_OPTIONS"
[ -f "$_rt/cds/spark-driver.jsa" ] && _jvm="-XX:SharedArchiveFile=$_rt/cds/spark-driver.jsa $_jvm"
export AIRFLOW__ICEBERG_PROVIDER__SPARK_DRIVER_JAVA_OPTIONS="${AIRFLOW__ICEBERG_PROVIDER__SPARK_DRIVER_JAVA_OPTIONS:-$_jvm}"
# A Spark Connect server (scripts/connect_server.py) runs many jobs: the archive for its start, and
# the JVM's full JIT (C1 then C2), whose compiled code its later jobs reuse.
_server_jvm="-XX:+UseSerialGC"
[ -f "$_rt/cds/spark-driver.jsa" ] && _server_jvm="-XX:SharedArchiveFile=$_rt/cds/spark-driver.jsa $_server_jvm"
export AIP_CONNECT_SERVER_JAVA_OPTIONS="${AIP_CONNECT_SERVER_JAVA_OPTIONS:-$_server_jvm}"
export AIRFLOW__ICEBERG_PROVIDER__SPARK_EXECUTOR_JAVA_OPTIONS="${AIRFLOW__ICEBERG_PROVIDER__SPARK_EXECUTOR_JAVA_OPTIONS:-$_jvm}"
# Spark conf of every provider job of the demo and the tests: small tables on two local cores, where
# Spark's 200 shuffle partitions are mostly overhead (docs/performance.md, Shuffle partitions). Not a
# spark-defaults.conf: Spark puts its conf directory on the JVM's class path, and a non-empty directory
# there makes the JVM refuse the class-data-sharing archive above.
_conf='{"spark.sql.shuffle.partitions": "4"}'
export AIRFLOW__ICEBERG_PROVIDER__SPARK_CONF_DEFAULTS="${AIRFLOW__ICEBERG_PROVIDER__SPARK_CONF_DEFAULTS:-$_conf}"
export AIRFLOW__ICEBERG_PROVIDER__PYSPARK_PYTHON="${AIRFLOW__ICEBERG_PROVIDER__PYSPARK_PYTHON:-$_rt/bin/python}"
# JSON defaults go through a variable: inside ${VAR:-default} the JSON's first "}" would end the
# expansion, and a second `source` (VAR already set) would append the rest, e.g. "}}", to VAR.
_conn='{"conn_type": "spark", "host": "local[2]"}'
export AIRFLOW_CONN_SPARK_DEFAULT="${AIRFLOW_CONN_SPARK_DEFAULT:-$_conn}"
mkdir -p "$AIP_WORK/lake/warehouse"
_conn="{\"conn_type\": \"iceberg_catalog\", \"host\": \"sqlite:///$AIP_WORK/lake/catalog.db\", \"extra\": {\"catalog_type\": \"sql\", \"catalog_name\": \"lakehouse\", \"warehouse\": \"file://$AIP_WORK/lake/warehouse\"}}"
export AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT="${AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT:-$_conn}"
export SPARK_LOCAL_IP="${SPARK_LOCAL_IP:-127.0.0.1}"
unset _jars _default_jars _s3_jars _connect_jars _conn _jvm _rt _AIP_ROOT
