#!/usr/bin/env bash
# Rewrites jars.lock from pom.xml and rest-fixture/pom.xml: resolves both with Maven into a scratch
# folder and records, for every jar, the folder it goes to under .spark-runtime/, its coordinates and
# its sha256. Run it after changing a version in a pom; scripts/bootstrap.sh then installs and checks
# exactly what the lock lists.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=spark-deps/resolve.sh
source "$HERE/resolve.sh"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
resolve_spark_deps "$HERE" "$tmp"
{
  echo "# Spark-side jars of airflow_iceberg_provider: <folder under .spark-runtime/> <groupId:artifactId:version[:classifier]> <sha256>"
  echo "# Written by spark-deps/lock.sh from pom.xml and rest-fixture/pom.xml; checked by scripts/bootstrap.sh."
  for part in spark rest-fixture; do
    (cd "$tmp/$part" && find . -name '*.jar' | sort) | while read -r rel; do
      coords="$(coords_of "${rel#./}")"
      echo "$(folder_of "$part" "$coords") $coords $(sha256sum "$tmp/$part/$rel" | cut -d' ' -f1)"
    done
  done
} > "$HERE/jars.lock"
echo "wrote $HERE/jars.lock ($(grep -vc '^#' "$HERE/jars.lock") jars)"
