# Helpers shared by scripts/bootstrap.sh and spark-deps/lock.sh (sourced, not run).

# resolve_spark_deps SPARK_DEPS_DIR OUT: Maven copies the Spark jars (only the listed artifacts) to
# OUT/spark and the REST test server's runtime classpath to OUT/rest-fixture, both in repository
# layout (group/artifact/version/file), so every file names its own coordinates.
resolve_spark_deps() {
  local dir="$1" out="$2"
  mvn -q -B -Dstyle.color=never -f "$dir/pom.xml" dependency:copy-dependencies -DexcludeTransitive=true \
    -Dmdep.useRepositoryLayout=true -DoutputDirectory="$out/spark"
  mvn -q -B -Dstyle.color=never -f "$dir/rest-fixture/pom.xml" dependency:copy-dependencies -DincludeScope=runtime \
    -Dmdep.useRepositoryLayout=true -DoutputDirectory="$out/rest-fixture"
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
    org.apache.spark:spark-connect_*) echo jars/connect ;;
    *) echo jars ;;
  esac
}
