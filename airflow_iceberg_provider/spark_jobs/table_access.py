"""How a Spark job reaches a table beside Spark SQL: one protocol, chosen once per job.

A job runs either inside spark-submit's driver (a JVM next to the Python process) or as a
Spark Connect client (no JVM here: every Spark call is a request to the server). What a job
needs that Spark SQL does not answer directly (the schema with field ids, live files of a
snapshot, listing and reading files, the FileIO, committing with summary properties) is one
method of :class:`TableAccess`. :func:`for_session` picks the implementation once, from the
session; the job passes that object to the code that needs it, which never asks which one it
holds.

* :class:`JvmTableAccess`: Iceberg's Java API and Hadoop's file systems through py4j; the
  table's own FileIO (with the credentials a catalog vends) for files.
* :class:`ConnectTableAccess`: metadata tables and the current metadata file read through
  pyarrow's file systems (:mod:`._fs`).

What has no SQL form at all (Iceberg's Java scan planning with column metrics, position-delete
writers) is reached through :meth:`TableAccess.java_table`, which is ``None`` under Spark
Connect; its callers say what they do instead.

Tables are named as in SQL (quoted ``catalog.namespace.table``). Imports nothing from pyspark
at module level.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol

from airflow_iceberg_provider.spark_jobs import _compat, _fs

#: Iceberg's per-thread commit properties (what ``CommitMetadata.withCommitProperties`` sets):
#: every Spark SQL commit of the thread copies them into its snapshot summary.
COMMIT_METADATA_CLASS = "org.apache.iceberg.spark.CommitMetadata"

#: (snapshot id -> its data manifests, manifest -> locations of its live data files)
ManifestIndex = tuple[dict[int, list[str]], dict[str, set[str]]]
#: ``read(offset, length) -> bytes`` over one open file
RangeReader = Callable[[int, int], bytes]


class TableAccess(Protocol):
    """Table and file operations a job needs beside Spark SQL (see the module docstring)."""

    #: ``"jvm"`` (spark-submit's driver) or ``"connect"`` (a Spark Connect client)
    mode: str
    spark: Any

    def default_parallelism(self) -> int:
        """The cluster's default parallelism."""
        ...

    def materialize(self, df: Any) -> Any:
        """``df`` with its rows materialised and no lineage (later commits or expiry do not change it)."""
        ...

    def refresh(self, table: str) -> None:
        """Forget what the session cached about ``table`` (the next read sees the catalog's state)."""
        ...

    def location(self, table: str) -> str:
        """The table's base location."""
        ...

    def properties(self, table: str) -> dict[str, str]:
        """The table's own properties, read fresh."""
        ...

    def schema_json(self, table: str, snapshot_id: int | None = None) -> str:
        """JSON of the Iceberg schema (with field ids) a snapshot reads (the current one without ``snapshot_id``)."""
        ...

    def io_impl(self, table: str) -> str:
        """The class name of the FileIO the table's catalog uses ("" when the session cannot tell)."""
        ...

    def snapshot_files(self, table: str, snapshot_id: int) -> list[str]:
        """Locations of the live data files of one snapshot."""
        ...

    def manifest_index(self, table: str) -> ManifestIndex:
        """Snapshot id -> its data manifests; manifest -> locations of its live data files."""
        ...

    def lineage(self, table: str, snapshot_id: int) -> Iterator[tuple[int, str, int | None]]:
        """(snapshot id, operation, parent id) of ``snapshot_id``, then of each parent in turn; ends
        after the first snapshot without a parent, or before one the table no longer has."""
        ...

    def exists(self, table: str, location: str) -> bool:
        """Whether a file exists (through the table's file access)."""
        ...

    def delete(self, table: str, location: str) -> None:
        """Delete one file (through the table's file access)."""
        ...

    def file_sizes(self, locations: list[str]) -> dict[str, int]:
        """Size in bytes of each file (0 when it vanished meanwhile)."""
        ...

    def list_files(self, table: str, root: str) -> list[tuple[str, int]]:
        """(location, modified ms) of every file under ``root`` (nothing when it is missing)."""
        ...

    def open_ranged(self, location: str) -> contextlib.AbstractContextManager[RangeReader]:
        """A ranged reader over one file; failing to open or read raises :class:`OSError`."""
        ...

    def commit_properties(self, properties: Mapping[str, str]) -> contextlib.AbstractContextManager[None]:
        """Stamp ``properties`` on every Iceberg commit the SQL statements inside the block make
        (where the session can; see the implementations)."""
        ...

    def append_empty(self, table: str, branch: str, properties: Mapping[str, str]) -> None:
        """Commit an append of no rows to ``branch`` with ``properties`` in its snapshot summary."""
        ...

    def java_table(self, table: str, refresh: bool = False) -> Any | None:
        """The Iceberg Java table, for what has no SQL form; ``None`` under Spark Connect."""
        ...


def for_session(spark: Any) -> TableAccess:
    """The table access for ``spark``: chosen once, by whether it has a driver JVM in this process."""
    if _compat.has_jvm(spark):
        return JvmTableAccess(spark)
    return ConnectTableAccess(spark)


def _read_manifest(jvm: Any, table: Any, manifest: Any) -> set[str]:
    """Locations of the live data files one manifest lists."""
    out: set[str] = set()
    reader = jvm.org.apache.iceberg.ManifestFiles.read(manifest, table.io(), table.specs())
    try:
        it = reader.iterator()
        while it.hasNext():
            out.add(str(it.next().location()))
    finally:
        reader.close()
    return out


class JvmTableAccess:
    """spark-submit's driver: Iceberg's Java API and Hadoop's file systems through py4j."""

    mode = "jvm"

    def __init__(self, spark: Any) -> None:
        self.spark = spark
        self._jvm = _compat.driver_jvm(spark)
        self._tables: dict[str, Any] = {}

    def java_table(self, table: str, refresh: bool = False) -> Any:
        """Loaded once per table through the session's catalog; ``refresh`` re-reads its metadata."""
        loaded = self._tables.get(table)
        if loaded is None:
            loaded = self._jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(
                _compat.java_spark_session(self.spark), table
            )
            self._tables[table] = loaded
        elif refresh:
            loaded.refresh()
        return loaded

    def default_parallelism(self) -> int:
        return int(self.spark.sparkContext.defaultParallelism)

    def materialize(self, df: Any) -> Any:
        """``localCheckpoint(eager=True)``."""
        return df.localCheckpoint(eager=True)

    def refresh(self, table: str) -> None:
        self.spark.sql(f"REFRESH TABLE {table}")
        if table in self._tables:
            self._tables[table].refresh()

    def location(self, table: str) -> str:
        return str(self.java_table(table).location())

    def properties(self, table: str) -> dict[str, str]:
        """From the table's metadata (not Spark's SHOW TBLPROPERTIES extras), refreshed first."""
        props = self.java_table(table, refresh=True).properties()
        return {str(k): str(props.get(k)) for k in props.keySet()}

    def schema_json(self, table: str, snapshot_id: int | None = None) -> str:
        """One py4j call: ``SnapshotUtil.schemaFor`` (the current schema without ``snapshot_id``)."""
        iceberg = self._jvm.org.apache.iceberg
        jtable = self.java_table(table)
        schema = (
            jtable.schema() if snapshot_id is None else iceberg.util.SnapshotUtil.schemaFor(jtable, int(snapshot_id))
        )
        return str(iceberg.SchemaParser.toJson(schema))

    def io_impl(self, table: str) -> str:
        return str(self.java_table(table).io().getClass().getName())

    def snapshot_files(self, table: str, snapshot_id: int) -> list[str]:
        """Read from the snapshot's manifests through the Iceberg API (no Spark job)."""
        jtable = self.java_table(table)
        snap = jtable.snapshot(int(snapshot_id))
        if snap is None:
            return []
        out: set[str] = set()
        for manifest in snap.dataManifests(jtable.io()):
            out |= _read_manifest(self._jvm, jtable, manifest)
        return sorted(out)

    def manifest_index(self, table: str) -> ManifestIndex:
        """Each manifest read once through the Iceberg API."""
        jtable = self.java_table(table, refresh=True)
        io = jtable.io()
        snaps: dict[int, list[str]] = {}
        files: dict[str, set[str]] = {}
        for snap in jtable.snapshots():
            paths = []
            for manifest in snap.dataManifests(io):
                path = str(manifest.path())
                paths.append(path)
                if path not in files:
                    files[path] = _read_manifest(self._jvm, jtable, manifest)
            snaps[int(snap.snapshotId())] = paths
        return snaps, files

    def lineage(self, table: str, snapshot_id: int) -> Iterator[tuple[int, str, int | None]]:
        """Walked through the Java table, one snapshot at a time (only as far as the caller reads)."""
        jtable = self.java_table(table)
        current: int | None = int(snapshot_id)
        while current is not None:
            snap = jtable.snapshot(current)
            if snap is None:
                return
            parent = snap.parentId()
            yield current, str(snap.operation()), None if parent is None else int(parent)
            current = None if parent is None else int(parent)

    def exists(self, table: str, location: str) -> bool:
        return bool(self.java_table(table).io().newInputFile(location).exists())

    def delete(self, table: str, location: str) -> None:
        self.java_table(table).io().deleteFile(location)

    def file_sizes(self, locations: list[str]) -> dict[str, int]:
        """Through Hadoop's FileSystem (``file://``, ``s3a://``, ``hdfs://``)."""
        conf = _compat.hadoop_configuration(self.spark)
        sizes: dict[str, int] = {}
        for p in locations:
            try:
                path = self._jvm.org.apache.hadoop.fs.Path(p)
                sizes[p] = int(path.getFileSystem(conf).getFileStatus(path).getLen())
            except Exception:  # noqa: BLE001 - py4j wraps FileNotFoundException: the file vanished meanwhile
                sizes[p] = 0
        return sizes

    def list_files(self, table: str, root: str) -> list[tuple[str, int]]:
        """Through the table's own FileIO (``listPrefix``: the credentials the catalog vends), else Hadoop's FileSystem."""
        listed = self._list_with_table_io(table, root)
        return self._list_with_hadoop(root) if listed is None else listed

    def _list_with_table_io(self, table: str, root: str) -> list[tuple[str, int]] | None:
        """None when the table's FileIO cannot list prefixes."""
        try:
            it = self.java_table(table).io().listPrefix(root.rstrip("/") + "/").iterator()
        except Exception as err:  # noqa: BLE001 - py4j: no listPrefix on this FileIO
            text = str(getattr(err, "java_exception", err))
            if "UnsupportedOperation" in text or "listPrefix" in text or "does not exist" in text:
                return None
            raise
        out = []
        while it.hasNext():
            info = it.next()
            out.append((str(info.location()), int(info.createdAtMillis())))
        return out

    def _list_with_hadoop(self, root: str) -> list[tuple[str, int]]:
        path = self._jvm.org.apache.hadoop.fs.Path(root)
        filesys = path.getFileSystem(_compat.hadoop_configuration(self.spark))
        if not filesys.exists(path):
            return []
        out = []
        it = filesys.listFiles(path, True)
        while it.hasNext():
            st = it.next()
            out.append((str(st.getPath().toString()), int(st.getModificationTime())))
        return out

    @contextlib.contextmanager
    def open_ranged(self, location: str) -> Iterator[RangeReader]:
        """Hadoop's FileSystem (S3A for ``s3://``); py4j errors become :class:`OSError`."""
        from py4j.protocol import Py4JError

        try:
            path = self._jvm.org.apache.hadoop.fs.Path(location)
            stream = path.getFileSystem(_compat.hadoop_configuration(self.spark)).open(path)
            try:

                def read(offset: int, length: int) -> bytes:
                    stream.seek(offset)
                    return bytes(stream.readNBytes(length))

                yield read
            finally:
                stream.close()
        except Py4JError as err:
            raise OSError(f"cannot read {location}: {type(err).__name__}") from err

    @contextlib.contextmanager
    def commit_properties(self, properties: Mapping[str, str]) -> Iterator[None]:
        """Sets the thread-local that Iceberg's public ``CommitMetadata.withCommitProperties`` sets
        (PySpark pins each Python thread to one JVM thread, and a SQL write commits on the calling
        thread), and clears it afterwards."""
        if not properties:
            yield
            return
        jvm = self._jvm
        loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
        field = jvm.java.lang.Class.forName(COMMIT_METADATA_CLASS, True, loader).getDeclaredField("COMMIT_PROPERTIES")
        field.setAccessible(True)
        local = field.get(None)
        values = jvm.java.util.HashMap()
        for key, value in properties.items():
            values.put(str(key), str(value))
        local.set(values)
        try:
            yield
        finally:
            local.remove()

    def append_empty(self, table: str, branch: str, properties: Mapping[str, str]) -> None:
        """Iceberg's ``AppendFiles`` with no file (no Spark job)."""
        append = self.java_table(table, refresh=True).newAppend().toBranch(branch)
        for key, value in properties.items():
            append = append.set(str(key), str(value))
        append.commit()


class ConnectTableAccess:
    """A Spark Connect client: metadata tables, and files through pyarrow's file systems (:mod:`._fs`)."""

    mode = "connect"

    def __init__(self, spark: Any) -> None:
        self.spark = spark

    def java_table(self, table: str, refresh: bool = False) -> None:
        """No Java API in a Spark Connect client."""
        return None

    def default_parallelism(self) -> int:
        """``spark.default.parallelism`` when the server sets it, else 2."""
        try:
            value = self.spark.conf.get("spark.default.parallelism", None)
        except Exception:  # noqa: BLE001 - a server refusing to read core conf
            value = None
        return int(value) if value and str(value).isdigit() else 2

    def materialize(self, df: Any) -> Any:
        """``localCheckpoint(eager=True)`` on Spark 4, where Spark Connect serves it. Spark 3.5's
        Connect has no checkpoint: there the rows travel to the client and back as a cached local
        relation; meant for small results (matched subject rows), as the checkpoint is."""
        session = df.sparkSession
        if int(str(session.version).split(".", 1)[0]) >= 4:
            return df.localCheckpoint(eager=True)
        local = session.createDataFrame(df.toPandas(), schema=df.schema).cache()
        local.count()
        return local

    def refresh(self, table: str) -> None:
        self.spark.sql(f"REFRESH TABLE {table}")

    def location(self, table: str) -> str:
        return _fs.table_location(self.spark, table)

    def properties(self, table: str) -> dict[str, str]:
        """``SHOW TBLPROPERTIES`` without Iceberg's extras (Spark also hides its reserved ``owner``)."""
        return _fs.table_properties(self.spark, table)

    def schema_json(self, table: str, snapshot_id: int | None = None) -> str:
        """From the current metadata file."""
        return _fs.schema_json(_fs.current_metadata(self.spark, table), snapshot_id)

    def io_impl(self, table: str) -> str:
        """The FileIO the catalog conf names."""
        catalog = table.split(".", 1)[0].strip("`")
        return str(self.spark.conf.get(f"spark.sql.catalog.{catalog}.io-impl", "") or "")

    def snapshot_files(self, table: str, snapshot_id: int) -> list[str]:
        """The ``data_files`` metadata table ``VERSION AS OF`` the snapshot."""
        return _fs.snapshot_data_files(self.spark, table, snapshot_id)

    def manifest_index(self, table: str) -> ManifestIndex:
        """From metadata tables: each snapshot's data manifests (``all_manifests``), plus one
        pseudo-manifest per snapshot holding its live data files (``data_files VERSION AS OF``),
        so "a manifest lists a subject file" reads "the snapshot does"."""
        self.refresh(table)
        snaps: dict[int, list[str]] = {}
        for r in self.spark.sql(
            f"SELECT DISTINCT reference_snapshot_id, path FROM {table}.all_manifests WHERE content = 0"
        ).collect():
            snaps.setdefault(int(r[0]), []).append(str(r[1]))
        files: dict[str, set[str]] = {}
        for r in self.spark.sql(f"SELECT snapshot_id FROM {table}.snapshots").collect():
            sid = int(r[0])
            live = f"live-files-of-snapshot:{sid}"
            files[live] = set(_fs.snapshot_data_files(self.spark, table, sid))
            snaps.setdefault(sid, []).append(live)
        return snaps, files

    def lineage(self, table: str, snapshot_id: int) -> Iterator[tuple[int, str, int | None]]:
        """From one query of the ``snapshots`` metadata table."""
        rows = self.spark.sql(f"SELECT snapshot_id, parent_id, operation FROM {table}.snapshots").collect()
        by_id = {int(r[0]): (None if r[1] is None else int(r[1]), str(r[2])) for r in rows}
        current: int | None = int(snapshot_id)
        while current is not None and current in by_id:
            parent, operation = by_id[current]
            yield current, operation, parent
            current = parent

    def exists(self, table: str, location: str) -> bool:
        return _fs.exists(self.spark, location)

    def delete(self, table: str, location: str) -> None:
        _fs.delete(self.spark, location)

    def file_sizes(self, locations: list[str]) -> dict[str, int]:
        return {p: _fs.file_size(self.spark, p) for p in locations}

    def list_files(self, table: str, root: str) -> list[tuple[str, int]]:
        return [(loc, mtime_ms) for loc, mtime_ms, _size in _fs.list_files(self.spark, root)]

    @contextlib.contextmanager
    def open_ranged(self, location: str) -> Iterator[RangeReader]:
        """pyarrow's file system (S3 with the session's S3A settings); its ``ValueError`` (``ArrowInvalid``,
        an unsupported scheme) becomes :class:`OSError`."""
        try:
            with _fs.open_ranged(self.spark, location) as fh:

                def read(offset: int, length: int) -> bytes:
                    fh.seek(offset)
                    return bytes(fh.read(length))

                yield read
        except ValueError as err:
            raise OSError(f"cannot read {location}: {err}") from err

    @contextlib.contextmanager
    def commit_properties(self, properties: Mapping[str, str]) -> Iterator[None]:
        """Nothing to stamp with: the statement runs on a server thread this client cannot reach."""
        if properties:
            print("[wap_write] Spark Connect: SQL statements commit without the run's snapshot summary properties")
        yield

    def append_empty(self, table: str, branch: str, properties: Mapping[str, str]) -> None:
        """An empty append through the DataFrame API (``snapshot-property.*`` write options)."""
        writer = self.spark.table(table).where("false").writeTo(f"{table}.`branch_{branch}`")
        for key, value in properties.items():
            writer = writer.option(f"snapshot-property.{key}", str(value))
        writer.append()
