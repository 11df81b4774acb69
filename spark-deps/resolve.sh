# Helpers shared by scripts/bootstrap.sh and spark-deps/lock.sh (sourced, not run).

# resolve_spark_deps SPARK_DEPS_DIR OUT: Maven copies the Spark jars (only the listed artifacts) to
# OUT/spark and, when SPARK_DEPS_DIR has one (the Spark 3.5 side; spark-4.1/ shares it), the REST
# test server's runtime classpath to OUT/rest-fixture, both in repository layout
# (group/artifact/version/file), so every file names its own coordinates.
resolve_spark_deps() {
  local dir="$1" out="$2"
  mvn -q -B -Dstyle.color=never -f "$dir/pom.xml" dependency:copy-dependencies -DexcludeTransitive=true \
    -Dmdep.useRepositoryLayout=true -DoutputDirectory="$out/spark"
  if [ -f "$dir/rest-fixture/pom.xml" ]; then
    mvn -q -B -Dstyle.color=never -f "$dir/rest-fixture/pom.xml" dependency:copy-dependencies -DincludeScope=runtime \
      -Dmdep.useRepositoryLayout=true -DoutputDirectory="$out/rest-fixture"
  fi
}

# coords_of org/apache/x/a/1.0/a-1.0-tests.jar -> org.apache.x:a:1.0:tests
coords_of() {
  local rel="$1" file version artifact group classifier
  file="${rel##*/}"; rel="${rel%/*}"
  version="${rel##*/}"; rel="${rel%/*}"
  artifact="${rel##*/}"; group="${rel%/*}"; group="${group//\//.}"
  classifier="${file#"$artifact-$version"}"; classifier="${classifier%.jar}"; classifier="${classifier#-}"
  echo "$group:$artifact:$version${classifier:+:$classifier}"
}

# path_of org.apache.x:a:1.0:tests -> org/apache/x/a/1.0/a-1.0-tests.jar
path_of() {
  local g a v c
  IFS=: read -r g a v c <<< "$1"
  echo "${g//.//}/$a/$v/$a-$v${c:+-$c}.jar"
}

# file_of org.apache.x:a:1.0:tests -> a-1.0-tests.jar (the name the jar gets in its folder)
file_of() { local p; p="$(path_of "$1")"; echo "${p##*/}"; }

# folder_of PART COORDS: where a jar goes under .spark-runtime/.
folder_of() {
  local part="$1" coords="$2"
  if [ "$part" = rest-fixture ]; then echo rest-fixture; return; fi
  case "$coords" in
    org.apache.iceberg:iceberg-aws-bundle:* | org.apache.hadoop:hadoop-aws:* | com.amazonaws:aws-java-sdk-bundle:*) echo jars/s3 ;;
    software.amazon.awssdk:bundle:*) echo jars/s3 ;;
    org.apache.spark:spark-connect_*) echo jars/connect ;;
    *) echo jars ;;
  esac
}

# install_locked_jars RUNTIME_DIR SPARK_DEPS_DIR: resolves SPARK_DEPS_DIR/pom.xml with Maven and places
# every jar of SPARK_DEPS_DIR/jars.lock (folder, coordinates, sha256) under RUNTIME_DIR after checking
# its sha256; a folder keeps only the jars the lock lists. Skipped while the stamp of the lock's
# content is there and every locked jar is in place. Folders under RUNTIME_DIR:
#   jars/          Iceberg Spark runtime, SQLite and PostgreSQL JDBC drivers (every job)
#   jars/s3/       iceberg-aws-bundle (S3FileIO) + hadoop-aws and its AWS SDK bundle (S3A)
#   jars/connect/  the Spark Connect server plugin (Spark 3.5; pyspark 4 ships its own)
#   rest-fixture/  Apache Iceberg's RESTCatalogServer and its classpath (tests only; 3.5 side)
install_locked_jars() {
  local RT="$1" deps="$2" LOCK="$2/jars.lock" JAR_STAMP stage bad folder coords sha part src got listed jar
  JAR_STAMP="$RT/.ok-jars-$(sha1sum "$LOCK" | cut -c1-12)"
  _jars_in_place() {
    local folder coords sha
    while read -r folder coords sha; do
      [ -f "$RT/$folder/$(file_of "$coords")" ] || return 1
    done < <(grep -v '^#' "$LOCK")
  }
  if [ -f "$JAR_STAMP" ] && _jars_in_place; then
    return 0
  fi
  command -v mvn >/dev/null 2>&1 || { echo "Maven (mvn) is needed to resolve the Spark jars" >&2; return 1; }
  echo "[bootstrap] resolving the Spark-side jars with Maven (${LOCK#"$ROOT/"}: $(grep -vc '^#' "$LOCK") jars)" >&2
  stage="$RT/.jars-staging"
  rm -rf "$stage"
  resolve_spark_deps "$deps" "$stage"
  bad=0
  while read -r folder coords sha; do
    part=spark; [ "$folder" = rest-fixture ] && part=rest-fixture
    src="$stage/$part/$(path_of "$coords")"
    if [ ! -f "$src" ]; then echo "[bootstrap] not resolved by Maven: $coords" >&2; bad=1; continue; fi
    got="$(sha256sum "$src" | cut -d' ' -f1)"
    [ "$got" = "$sha" ] || { echo "[bootstrap] sha256 mismatch for $coords: lock $sha, resolved $got" >&2; bad=1; }
  done < <(grep -v '^#' "$LOCK")
  if [ "$bad" != 0 ]; then
    rm -rf "$stage"
    echo "[bootstrap] jars do not match ${LOCK}: nothing installed" >&2
    return 1
  fi
  for folder in $(grep -v '^#' "$LOCK" | cut -d' ' -f1 | sort -u); do
    mkdir -p "$RT/$folder"
    rm -f "$RT/$folder"/.ok-*
    listed="$(grep -v '^#' "$LOCK" | awk -v f="$folder" '$1 == f {print $2}' | while read -r c; do file_of "$c"; done)"
    for jar in "$RT/$folder"/*.jar; do
      [ -e "$jar" ] || continue
      grep -qxF "${jar##*/}" <<< "$listed" || { echo "[bootstrap] removing $folder/${jar##*/} (not in the lock)" >&2; rm -f "$jar"; }
    done
  done
  while read -r folder coords sha; do
    part=spark; [ "$folder" = rest-fixture ] && part=rest-fixture
    cp "$stage/$part/$(path_of "$coords")" "$RT/$folder/$(file_of "$coords").part"
    mv "$RT/$folder/$(file_of "$coords").part" "$RT/$folder/$(file_of "$coords")"
  done < <(grep -v '^#' "$LOCK")
  rm -rf "$stage"
  rm -f "$RT"/.ok-jars-*
  touch "$JAR_STAMP"
}
