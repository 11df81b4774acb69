"""IcebergSparkHook: the submission as data, the secret channel, and refusals before submit."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import zipfile
from pathlib import Path

import pytest

from airflow_iceberg_provider import ICEBERG_SPARK_RUNTIME
from airflow_iceberg_provider.exceptions import IcebergConnectionError, IcebergValidationError
from airflow_iceberg_provider.hooks._job_package import job_package_zip
from airflow_iceberg_provider.hooks.spark import (
    JOB_RUNTIME_MODULE,
    IcebergSparkHook,
    java_properties_line,
    job_path,
)
from tests.support.lake import catalog_conn_json

SECRET = "TopSecret-4f1c9a-Value"


@pytest.fixture
def secret_lake(tmp_path, monkeypatch):
    (tmp_path / "wh").mkdir()
    monkeypatch.setenv(
        "AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT",
        catalog_conn_json(tmp_path / "c.db", tmp_path / "wh", properties={"s3.secret-access-key": SECRET}),
    )
    return tmp_path


def test_plan_splits_secrets_and_defaults_to_maven_runtime(secret_lake, monkeypatch):
    monkeypatch.delenv("AIRFLOW__ICEBERG_PROVIDER__SPARK_JARS", raising=False)
    monkeypatch.delenv("AIRFLOW__ICEBERG_PROVIDER__SPARK_PACKAGES", raising=False)
    hook = IcebergSparkHook(conf={"spark.executor.instances": 2}, pyspark_python="/opt/py")
    plan = hook.plan("/app.py", spec={"table": "db.t"})
    assert plan.packages == [ICEBERG_SPARK_RUNTIME] and plan.jars == []
    assert plan.conf["spark.sql.catalog.lakehouse.type"] == "jdbc"
    assert plan.conf["spark.executor.instances"] == "2"
    assert plan.conf["spark.pyspark.python"] == "/opt/py"
    assert plan.secret_conf == {"spark.sql.catalog.lakehouse.s3.secret-access-key": SECRET}
    assert SECRET not in json.dumps(plan.conf) and SECRET not in json.dumps(plan.env_vars)
    # the job runtime ships inside the spark_jobs package zip (one --py-files entry)
    assert plan.py_files == [str(job_package_zip())]
    assert "iceberg_job_runtime.py" in zipfile.ZipFile(plan.py_files[0]).namelist()
    assert plan.spec["catalog_name"] == "lakehouse" and plan.spec["governance_namespace"] == "governance"


def test_user_conf_cannot_override_secret_into_argv(secret_lake):
    key = "spark.sql.catalog.lakehouse.s3.secret-access-key"
    plan = IcebergSparkHook(conf={key: "leak"}).plan("/app.py")
    assert key not in plan.conf


def test_jars_from_config(secret_lake, monkeypatch):
    monkeypatch.setenv("AIRFLOW__ICEBERG_PROVIDER__SPARK_JARS", "/a.jar, /b.jar")
    plan = IcebergSparkHook().plan("/app.py")
    assert plan.jars == ["/a.jar", "/b.jar"] and plan.packages == []


def test_driver_and_executor_jvm_options_layer_config_under_the_task(secret_lake, monkeypatch):
    monkeypatch.setenv("AIRFLOW__ICEBERG_PROVIDER__SPARK_DRIVER_JAVA_OPTIONS", "-XX:+UseSerialGC -Xshare:auto")
    monkeypatch.setenv("AIRFLOW__ICEBERG_PROVIDER__SPARK_EXECUTOR_JAVA_OPTIONS", "-XX:TieredStopAtLevel=1")
    plan = IcebergSparkHook(conf={"spark.driver.extraJavaOptions": "-Dtask=1"}).plan("/app.py")
    driver = plan.conf["spark.driver.extraJavaOptions"].split()
    # the provider's log4j configuration, then the configured options, then the task's own
    assert driver[0].startswith("-Dlog4j2.configurationFile=file:") and driver[0].endswith("log4j2.properties")
    assert driver[1:] == ["-XX:+UseSerialGC", "-Xshare:auto", "-Dtask=1"]
    assert plan.conf["spark.executor.extraJavaOptions"] == "-XX:TieredStopAtLevel=1"
    # a task that brings its own log4j configuration keeps it, and nothing is configured for executors
    monkeypatch.setenv("AIRFLOW__ICEBERG_PROVIDER__SPARK_EXECUTOR_JAVA_OPTIONS", "")
    own = IcebergSparkHook(conf={"spark.driver.extraJavaOptions": "-Dlog4j2.configurationFile=file:/mine"})
    plan = own.plan("/app.py")
    assert (
        plan.conf["spark.driver.extraJavaOptions"]
        == "-XX:+UseSerialGC -Xshare:auto -Dlog4j2.configurationFile=file:/mine"
    )
    assert "spark.executor.extraJavaOptions" not in plan.conf


def test_conf_defaults_layer_under_the_catalog_and_the_task(secret_lake, monkeypatch):
    monkeypatch.setenv(
        "AIRFLOW__ICEBERG_PROVIDER__SPARK_CONF_DEFAULTS",
        json.dumps(
            {
                "spark.sql.shuffle.partitions": 4,
                "spark.sql.adaptive.enabled": True,
                "spark.executor.instances": "1",
                "spark.sql.catalog.lakehouse.type": "hadoop",
            }
        ),
    )
    plan = IcebergSparkHook(conf={"spark.executor.instances": 3}).plan("/app.py")
    assert plan.conf["spark.sql.shuffle.partitions"] == "4" and plan.conf["spark.sql.adaptive.enabled"] == "true"
    assert plan.conf["spark.executor.instances"] == "3"  # the task's own spark_conf wins
    assert plan.conf["spark.sql.catalog.lakehouse.type"] == "jdbc"  # the catalog connection's conf wins


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("{not json", "is not JSON"),
        ('["spark.sql.shuffle.partitions"]', "is a JSON list, not an object"),
        ('{"shuffle.partitions": 4}', "not Spark conf with a scalar value: ['shuffle.partitions']"),
        ('{"spark.sql.x": {"a": 1}}', "not Spark conf with a scalar value: ['spark.sql.x']"),
        ('{"spark.hadoop.fs.s3a.secret.key": "SeCrEt-42"}', "names secret conf ['spark.hadoop.fs.s3a.secret.key']"),
    ],
)
def test_bad_conf_defaults_are_refused_naming_the_option_and_the_fix(secret_lake, monkeypatch, value, problem):
    monkeypatch.setenv("AIRFLOW__ICEBERG_PROVIDER__SPARK_CONF_DEFAULTS", value)
    with pytest.raises(IcebergValidationError) as err:
        IcebergSparkHook().plan("/app.py")
    assert str(err.value).startswith("[iceberg_provider] spark_conf_defaults") and problem in str(err.value)
    assert "a JSON object of Spark conf keys" in str(err.value) or "catalog connection" in str(err.value)  # the fix
    assert "SeCrEt-42" not in str(err.value)


def test_java_properties_escaping():
    assert java_properties_line("k", "a=b:c\\d\n#x") == "k=a\\=b\\:c\\\\d\\n\\#x"
    assert java_properties_line("a key", " lead") == "a\\ key=\\ lead"
    assert java_properties_line("k", "é") == "k=\\u00e9"


def test_unknown_job_lists_known_ones():
    with pytest.raises(ValueError, match="Unknown Spark job 'nope'"):
        job_path("nope")


def test_refuses_missing_spark_connection_before_submit(secret_lake, monkeypatch):
    monkeypatch.delenv("AIRFLOW_CONN_NO_SUCH_SPARK", raising=False)
    hook = IcebergSparkHook(spark_conn_id="no_such_spark")
    with pytest.raises(IcebergConnectionError, match="Spark connection 'no_such_spark' does not exist"):
        hook.submit(hook.plan(str(JOB_RUNTIME_MODULE), spec={}))


@pytest.mark.parametrize("line", ["3.5", "4.1"])
def test_refuses_missing_spark_submit(secret_lake, monkeypatch, line):
    """The message names the distribution of the configured Spark line."""
    monkeypatch.setenv("AIRFLOW__ICEBERG_PROVIDER__SPARK_RUNTIME", line)
    monkeypatch.setenv("PATH", "/nonexistent")
    hook = IcebergSparkHook()
    with pytest.raises(IcebergConnectionError, match=rf"'spark-submit' is not on PATH; install a Spark {line} dist"):
        hook.submit(hook.plan(str(JOB_RUNTIME_MODULE), spec={}))


def test_refuses_missing_jars(secret_lake):
    hook = IcebergSparkHook(jars=["/does/not/exist.jar"])
    with pytest.raises(IcebergConnectionError, match="Spark jars not found"):
        hook.submit(hook.plan(str(JOB_RUNTIME_MODULE), spec={}))


def _shim(tmp_path: Path) -> Path:
    """A spark-submit wrapper that records its argv and the properties file mode."""
    real = os.popen("command -v spark-submit").read().strip()
    assert real, "spark-submit must be on PATH for spark tests (source scripts/env.sh)"
    shim_dir = tmp_path / "shim"
    shim_dir.mkdir()
    record = tmp_path / "argv.txt"
    script = shim_dir / "spark-submit"
    script.write_text(
        "#!/usr/bin/env bash\n"
        f'printf "%s\\n" "$@" > {record}\n'
        'prev=""; for a in "$@"; do if [ "$prev" = "--properties-file" ]; then '
        f'stat -c "%a" "$a" > {record}.mode; fi; prev="$a"; done\n'
        f'exec {real} "$@"\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return shim_dir


@pytest.mark.spark
def test_secret_reaches_spark_but_not_argv_or_logs(secret_lake, monkeypatch, capfd, caplog, context):
    import hashlib

    from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook
    from airflow_iceberg_provider.operators.spark import IcebergSparkSubmitOperator
    from tests.support.lake import create_orders_table

    hook = IcebergCatalogHook()
    create_orders_table(hook, "db.orders")
    shim = _shim(secret_lake)
    monkeypatch.setenv("PATH", f"{shim}:{os.environ['PATH']}")
    op = IcebergSparkSubmitOperator(
        task_id="probe",
        table="db.orders",
        application=str(Path(__file__).parents[1] / "jobs" / "secret_probe.py"),
        params_for_job={"expected_sha256": hashlib.sha256(SECRET.encode()).hexdigest()},
        expected_operations=["append"],
    )
    caplog.set_level("DEBUG")
    result = op.execute(context)
    assert result["operation"] == "append" and result["added_records"] == 1
    argv = (secret_lake / "argv.txt").read_text()
    assert "--properties-file" in argv and "spark.sql.catalog.lakehouse.uri" in argv  # capture works
    assert SECRET not in argv
    assert (secret_lake / "argv.txt.mode").read_text().strip() == "600"
    out, err = capfd.readouterr()
    logs = out + err + caplog.text
    assert "Spark-Submit cmd" in logs or "[iceberg-job]" in logs  # logs were captured
    assert SECRET not in logs
    assert SECRET not in json.dumps(result)
    ledger = hook.governance.read("ledger", event_id=result["job_run_id"])
    assert ledger and SECRET not in json.dumps(ledger, default=str)


def _java_properties_value(line: str) -> str:
    """The value of one ``key=value`` line decoded by java.util.Properties' rules: a backslash
    escape ``\\uXXXX`` is one UTF-16 code unit, so a supplementary character is a surrogate pair."""
    raw = line.split("=", 1)[1]
    units: list[int] = []
    i = 0
    while i < len(raw):
        ch = raw[i]
        if ch == "\\" and raw[i + 1] == "u":
            units.append(int(raw[i + 2 : i + 6], 16))
            i += 6
        elif ch == "\\":
            units.append(ord({"n": "\n", "r": "\r", "t": "\t", "f": "\f"}.get(raw[i + 1], raw[i + 1])))
            i += 2
        else:
            assert ord(ch) < 0x10000
            units.append(ord(ch))
            i += 1
    return b"".join(u.to_bytes(2, "big") for u in units).decode("utf-16-be")


@pytest.mark.security
def test_java_properties_writes_supplementary_characters_as_surrogate_pairs():
    password = "pa55=😀:𝄞\U0010ffffé"
    line = java_properties_line("spark.secret", password)
    assert "\\ud83d\\ude00" in line and "\\ud834\\udd1e" in line and "\\udbff\\udfff" in line
    assert all(ord(ch) < 127 for ch in line)
    assert _java_properties_value(line) == password


@pytest.mark.security
def test_java_reads_an_emoji_password_back(tmp_path):
    """One round trip through a real JVM's java.util.Properties (single-file source launch)."""
    java = shutil.which("java")
    if java is None:
        pytest.skip("no java on PATH")
    password = "p😀w=d:#é 𝄞"
    (tmp_path / "secret.properties").write_text(java_properties_line("spark.secret", password) + "\n")
    (tmp_path / "Read.java").write_text(
        "import java.io.*; import java.util.*;\n"
        "public class Read { public static void main(String[] a) throws Exception {\n"
        "  Properties p = new Properties();\n"
        "  try (InputStream in = new FileInputStream(a[0])) { p.load(in); }\n"
        '  try (Writer w = new OutputStreamWriter(new FileOutputStream(a[1]), "UTF-8")) {\n'
        '    w.write(p.getProperty("spark.secret")); } } }\n'
    )
    subprocess.run(
        [java, str(tmp_path / "Read.java"), str(tmp_path / "secret.properties"), str(tmp_path / "out.txt")],
        check=True,
        capture_output=True,
        timeout=120,
    )
    assert (tmp_path / "out.txt").read_text(encoding="utf-8") == password
