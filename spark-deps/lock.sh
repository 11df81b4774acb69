#!/usr/bin/env bash
# Rewrites jars.lock from pom.xml and rest-fixture/pom.xml: resolves both with Maven into a scratch
# folder and records, for every jar, the folder it goes to under .spark-runtime/, its coordinates and
# its sha256. Run it after changing a version in a pom; scripts/bootstrap.sh then installs and checks
# exactly what the lock lists.
#
#   spark-deps/lock.sh                      the Spark 3.5 side (spark-deps/jars.lock)
#   spark-deps/lock.sh spark-deps/spark-4.1 the Spark 4.1 side (spark-deps/spark-4.1/jars.lock, .spark-runtime-4.1/)
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=spark-deps/resolve.sh
source "$HERE/resolve.sh"
DIR="$(cd "${1:-$HERE}" && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
resolve_spark_deps "$DIR" "$tmp"
{
  echo "# Spark-side jars of airflow_iceberg_provider: <folder under .spark-runtime/> <groupId:artifactId:version[:classifier]> <sha256>"
  echo "# Written by spark-deps/lock.sh from pom.xml and rest-fixture/pom.xml; checked by scripts/bootstrap.sh."
  for part in spark rest-fixture; do
    [ -d "$tmp/$part" ] || continue
    (cd "$tmp/$part" && find . -name '*.jar' | sort) | while read -r rel; do
      coords="$(coords_of "${rel#./}")"
      echo "$(folder_of "$part" "$coords") $coords $(sha256sum "$tmp/$part/$rel" | cut -d' ' -f1)"
    done
  done
} > "$DIR/jars.lock"
echo "wrote $DIR/jars.lock ($(grep -vc '^#' "$DIR/jars.lock") jars)"
