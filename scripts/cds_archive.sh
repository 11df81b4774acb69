# The Spark driver's class-data-sharing archive of one Spark runtime (sourced by scripts/bootstrap.sh).

# build_cds_archive SPARK_RUNTIME RUNTIME_DIR LOCK_FILE OUT_DIR
#   SPARK_RUNTIME  3.5 or 4.1 ([iceberg_provider] spark_runtime): scripts/env.sh picks that runtime's
#                  spark-submit, jars and Python for the warm-up job
#   RUNTIME_DIR    .spark-runtime/ or .spark-runtime-4.1/ (its jars/ and bin/python)
#   LOCK_FILE      the runtime's jars.lock (a new jar set rebuilds the archive)
#   OUT_DIR        where spark-driver.jsa goes (scripts/env.sh reads RUNTIME_DIR/cds/spark-driver.jsa)
# Idempotent: a marker keyed on the lock, the warm-up job and `java -version`
# says the archive is current. The warm-up runs scripts/spark_cds_warmup.py through spark-submit with
# -XX:ArchiveClassesAtExit; the JVM writes the archive when the driver exits. On failure the log stays
# in OUT_DIR/warmup.log and drivers start without an archive.
build_cds_archive() {
  local runtime="$1" rt="$2" lock="$3" out="$4" root key spark_home
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  spark_home="$(ls -d "$rt"/lib/python3*/site-packages/pyspark 2>/dev/null | head -n1)"
  if [ -z "$spark_home" ]; then
    printf '[bootstrap] no Spark distribution in %s: no class-data-sharing archive\n' "$rt" >&2
    return 0
  fi
  key="$( { cat "$lock" "$root/scripts/spark_cds_warmup.py"; java -version 2>&1; } | sha1sum | cut -c1-12)"
  [ -f "$out/.ok-$key" ] && return 0
  printf '[bootstrap] building the Spark %s driver'"'"'s class-data-sharing archive in %s\n' "$runtime" "$out" >&2
  rm -rf "$out" && mkdir -p "$out/warmup"
  if (
    # a fresh environment for this runtime: nothing of the caller's Spark settings is kept
    unset SPARK_HOME AIRFLOW__ICEBERG_PROVIDER__SPARK_JARS AIRFLOW__ICEBERG_PROVIDER__PYSPARK_PYTHON \
      AIRFLOW__ICEBERG_PROVIDER__SPARK_DRIVER_JAVA_OPTIONS AIP_SPARK_JVM_START_OPTIONS
    export AIRFLOW__ICEBERG_PROVIDER__SPARK_RUNTIME="$runtime"
    export SPARK_HOME="$spark_home"
    # shellcheck source=scripts/env.sh
    source "$root/scripts/env.sh"
    "$SPARK_HOME/bin/spark-submit" --master 'local[2]' --jars "$(ls "$rt"/jars/*.jar | paste -sd, -)" \
      --conf spark.ui.enabled=false \
      --conf "spark.pyspark.python=$rt/bin/python" --conf "spark.pyspark.driver.python=$rt/bin/python" \
      --conf "spark.driver.extraJavaOptions=-XX:ArchiveClassesAtExit=$out/spark-driver.jsa.part $AIP_SPARK_JVM_START_OPTIONS" \
      "$root/scripts/spark_cds_warmup.py" "$out/warmup" >"$out/warmup.log" 2>&1
  ) && [ -s "$out/spark-driver.jsa.part" ]; then
    mv "$out/spark-driver.jsa.part" "$out/spark-driver.jsa"
    rm -rf "$out/warmup"
    touch "$out/.ok-$key"
  else
    printf '[bootstrap] no class-data-sharing archive (see %s/warmup.log): Spark drivers start without one\n' "$out" >&2
  fi
}
