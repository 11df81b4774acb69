"""The storage jars an S3 warehouse needs on the Spark side, added to a submission or refused by name.

A connection whose warehouse is on S3 maps to Iceberg's ``S3FileIO`` (AWS SDK v2, in
``iceberg-aws-bundle``) and to Hadoop's S3A for the jobs that read raw files (``hadoop-aws`` with
the AWS SDK v1 bundle it is built against). Without those jars the first Spark job fails with
``NoClassDefFoundError: software/amazon/awssdk/...``. :func:`with_storage_jars` reads what the
submission's conf needs and, for each artifact missing from the jars and packages:

* takes the pinned jar from beside the Iceberg runtime jar (its folder or its ``s3/`` subfolder,
  the layout ``scripts/bootstrap.sh`` installs from ``spark-deps/jars.lock``);
* else, when the submission resolves Maven packages anyway (``spark_packages``), adds the pinned
  Maven coordinate;
* else refuses before spark-submit starts, naming the jars and the two settings that fix it.

The versions are the ones ``spark-deps/jars.lock`` pins (a test checks they agree).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from airflow_iceberg_provider import ICEBERG_SPARK_RUNTIME
from airflow_iceberg_provider.exceptions import IcebergConnectionError

S3_FILE_IO = "org.apache.iceberg.aws.s3.S3FileIO"
#: artifact -> (group, version); ``None``: the Iceberg runtime's own version.
STORAGE_ARTIFACTS: dict[str, tuple[str, str | None]] = {
    "iceberg-aws-bundle": ("org.apache.iceberg", None),
    "hadoop-aws": ("org.apache.hadoop", "3.3.4"),
    "aws-java-sdk-bundle": ("com.amazonaws", "1.12.262"),
}
_RUNTIME_JAR = re.compile(r"^iceberg-spark-runtime-[\d.]+_[\d.]+-(?P<version>\d[\w.]*)\.jar$")


def needed_artifacts(conf: Mapping[str, str]) -> list[str]:
    """The storage artifacts a submission's conf needs: ``S3FileIO`` needs the AWS bundle, S3A needs
    ``hadoop-aws`` and its SDK."""
    needed = []
    if any(
        key.startswith("spark.sql.catalog.") and key.endswith(".io-impl") and value == S3_FILE_IO
        for key, value in conf.items()
    ):
        needed.append("iceberg-aws-bundle")
    if any(key.startswith("spark.hadoop.fs.s3a.") for key in conf):
        needed += ["hadoop-aws", "aws-java-sdk-bundle"]
    return needed


def iceberg_version(jars: Sequence[str], packages: Sequence[str]) -> str:
    """The Iceberg version of the submission's runtime (jar name or coordinate), else the provider's pin."""
    for jar in jars:
        match = _RUNTIME_JAR.match(Path(jar).name)
        if match:
            return match["version"]
    for coordinate in packages:
        parts = coordinate.split(":")
        if len(parts) >= 3 and parts[1].startswith("iceberg-spark-runtime-"):
            return parts[2]
    return ICEBERG_SPARK_RUNTIME.rsplit(":", 1)[1]


def _present(artifact: str, jars: Sequence[str], packages: Sequence[str]) -> bool:
    jar_name = re.compile(rf"^{re.escape(artifact)}-\d[\w.-]*\.jar$")
    return any(jar_name.match(Path(j).name) for j in jars) or any(
        len(p.split(":")) >= 3 and p.split(":")[1] == artifact for p in packages
    )


def _beside_runtime(file_name: str, jars: Sequence[str]) -> str | None:
    for jar in jars:
        if "://" in jar or not _RUNTIME_JAR.match(Path(jar).name):
            continue
        for folder in (Path(jar).parent, Path(jar).parent / "s3"):
            if (folder / file_name).is_file():
                return str(folder / file_name)
    return None


def with_storage_jars(
    conf: Mapping[str, str], jars: Sequence[str], packages: Sequence[str]
) -> tuple[list[str], list[str]]:
    """``(jars, packages)`` with the storage artifacts the conf needs.

    :raises IcebergConnectionError: an artifact is neither given, nor beside the runtime jar, nor
        resolvable from Maven (no ``spark_packages``); the message names the jars and the settings.
    """
    jars, packages = list(jars), list(packages)
    version = iceberg_version(jars, packages)
    missing = []
    for artifact in needed_artifacts(conf):
        if _present(artifact, jars, packages):
            continue
        group, pinned = STORAGE_ARTIFACTS[artifact]
        artifact_version = pinned or version
        local = _beside_runtime(f"{artifact}-{artifact_version}.jar", jars)
        if local:
            jars.append(local)
        elif packages:
            packages.append(f"{group}:{artifact}:{artifact_version}")
        else:
            missing.append((f"{artifact}-{artifact_version}.jar", f"{group}:{artifact}:{artifact_version}"))
    if missing:
        raise IcebergConnectionError(
            "The catalog connection's warehouse is on S3 (Iceberg's S3FileIO and Hadoop's S3A), and the "
            f"Spark jobs lack {', '.join(name for name, _ in missing)}: nothing was submitted. Add the local "
            "jars to [iceberg_provider] spark_jars (or the operator's jars argument), or put their Maven "
            f"coordinates in [iceberg_provider] spark_packages: {','.join(c for _, c in missing)}."
        )
    return jars, packages
