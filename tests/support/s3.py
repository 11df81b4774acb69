"""S3 helpers for the Spark-on-object-storage tests (#18): the bucket seen through the S3 API, and old objects.

* :func:`s3fs` / :func:`bucket_objects`: pyarrow's S3 client on SeaweedFS, so the tests read the
  bucket itself (not through a catalog);
* :func:`backdate`: make objects look days old. Orphan removal only considers files older than
  its cutoff (>= 24 h), so a test where every *live* file is young proves nothing about whether
  a live file would be listed as an orphan. S3 has no "set modification time"; SeaweedFS's own
  metadata backup does: ``weed shell`` ``fs.meta.save`` -> rewrite each entry's ``mtime`` and
  ``crtime`` (protobuf ``FullEntry.entry.attributes`` fields 2 and 6) -> ``fs.meta.load``, and
  the S3 API then reports the old ``LastModified``. (``fs.meta.load`` 4.48 applies a record only
  when another follows it, so the first record, a directory, is appended again at the end.)
"""

from __future__ import annotations

import struct
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.support.servers import SeaweedServer, _weed_binary


def s3fs(server: SeaweedServer) -> Any:
    from pyarrow import fs

    return fs.S3FileSystem(
        access_key=server.access_key,
        secret_key=server.secret_key,
        endpoint_override=server.s3_endpoint,
        scheme="http",
        region="us-east-1",
        allow_bucket_creation=True,
    )


def bucket_objects(server: SeaweedServer, prefix: str) -> dict[str, Any]:
    """``bucket/key`` -> modification time of every object under ``prefix`` (through the S3 API)."""
    from pyarrow import fs

    infos = s3fs(server).get_file_info(fs.FileSelector(prefix, recursive=True, allow_not_found=True))
    return {i.path: i.mtime for i in infos if i.type == fs.FileType.File}


# ------------------------------------------------------------------ minimal protobuf (varints, bytes)
def _varint(buf: bytes, i: int) -> tuple[int, int]:
    shift = out = 0
    while True:
        b = buf[i]
        i += 1
        out |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            return out, i


def _enc_varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | 0x80 if n else b)
        if not n:
            return bytes(out)


def _fields(buf: bytes) -> list[tuple[int, int, Any]]:
    i, out = 0, []
    while i < len(buf):
        key, i = _varint(buf, i)
        num, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(buf, i)
        elif wire == 2:
            n, i = _varint(buf, i)
            value, i = buf[i : i + n], i + n
        elif wire in (1, 5):
            n = 8 if wire == 1 else 4
            value, i = buf[i : i + n], i + n
        else:
            raise ValueError(f"protobuf wire type {wire} not expected in filer metadata")
        out.append((num, wire, value))
    return out


def _encode(fields: list[tuple[int, int, Any]]) -> bytes:
    out = bytearray()
    for num, wire, value in fields:
        out += _enc_varint(num << 3 | wire)
        out += _enc_varint(value) if wire == 0 else (_enc_varint(len(value)) + value if wire == 2 else value)
    return bytes(out)


def _backdated_entry(entry: bytes, when: int, keep: Callable[[str], bool]) -> bytes:
    fields = _fields(entry)
    name = next((v.decode() for n, w, v in fields if n == 1 and w == 2), "")
    is_dir = any(n == 2 and w == 0 and v for n, w, v in fields)
    if is_dir or keep(name):
        return entry
    out = []
    for num, wire, value in fields:
        if num == 4 and wire == 2:  # FuseAttributes: mtime = 2, crtime = 6 (seconds)
            value = _encode([(n, w, when if (n in (2, 6) and w == 0) else v) for n, w, v in _fields(value)])
        out.append((num, wire, value))
    return _encode(out)


def _weed_shell(server: SeaweedServer, command: str) -> str:
    args = {a.split("=", 1)[0]: a.split("=", 1)[1] for a in server.proc.args if a.startswith("-") and "=" in a}
    master = f"127.0.0.1:{args['-master.port']}.{args['-master.port.grpc']}"
    filer = f"127.0.0.1:{args['-filer.port']}.{args['-filer.port.grpc']}"
    cmd = [_weed_binary(), "shell", f"-master={master}", f"-filer={filer}"]
    done = subprocess.run(cmd, input=command + "\n", capture_output=True, text=True, timeout=120, check=False)
    if done.returncode != 0 or "error" in done.stdout.lower():
        raise RuntimeError(f"weed shell {command!r} failed: {done.stdout[-800:]} {done.stderr[-800:]}")
    return done.stdout


def backdate(server: SeaweedServer, prefix: str, *, days: float, keep: Callable[[str], bool] = lambda name: False):
    """Set the modification time of every object under ``bucket/prefix`` to ``days`` ago (not ``keep(name)`` ones).

    Verified through the S3 API afterwards (raises if SeaweedFS did not apply it).
    """
    when = int(time.time() - days * 86400)
    with tempfile.TemporaryDirectory(prefix="aip-weed-meta-") as tmp:
        saved, loaded = Path(tmp) / "saved.meta", Path(tmp) / "loaded.meta"
        _weed_shell(server, f"fs.meta.save -o {saved} /buckets/{prefix}")
        data, i, out, first = saved.read_bytes(), 0, bytearray(), b""
        while i < len(data):
            (n,) = struct.unpack(">I", data[i : i + 4])
            record = _fields(data[i + 4 : i + 4 + n])
            first = first or data[i : i + 4 + n]
            i += 4 + n
            msg = _encode([(k, w, _backdated_entry(v, when, keep) if k == 2 else v) for k, w, v in record])
            out += struct.pack(">I", len(msg)) + msg
        loaded.write_bytes(bytes(out + first))  # the sentinel: see the module docstring
        _weed_shell(server, f"fs.meta.load {loaded}")
    young = [
        p
        for p, t in bucket_objects(server, prefix).items()
        if not keep(p.rsplit("/", 1)[-1]) and t.timestamp() > when + 60
    ]
    if young:
        raise RuntimeError(f"SeaweedFS did not backdate {len(young)} objects, e.g. {young[:3]}")
