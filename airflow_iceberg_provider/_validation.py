"""Strict validation of identifiers and ref names, in one place.

Every table identifier and ref name reaches SQL, file paths or catalog calls
through these helpers, so the patterns here are the project's injection guard:
plain ASCII letters, digits and underscores, starting with a letter or
underscore (refs may also contain ``-`` and ``.`` after the first character,
which Iceberg allows and tag conventions such as ``release-1.2`` use).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from airflow_iceberg_provider.exceptions import IcebergValidationError

_NAME = r"[A-Za-z_][A-Za-z0-9_]{0,127}"
NAME_RE = re.compile(rf"^{_NAME}\Z")
TABLE_RE = re.compile(rf"^({_NAME})\.({_NAME})\Z")
REF_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]{0,127}\Z")
MAIN_BRANCH = "main"


@dataclass(frozen=True)
class TableIdent:
    """A validated ``namespace.table`` identifier."""

    namespace: str
    name: str

    @property
    def dotted(self) -> str:
        return f"{self.namespace}.{self.name}"

    def quoted(self, catalog: str | None = None) -> str:
        """Backtick-quoted form for Spark SQL (``catalog``.``ns``.``tbl``)."""
        parts = ([catalog] if catalog else []) + [self.namespace, self.name]
        return ".".join(f"`{p}`" for p in parts)

    def __str__(self) -> str:
        return self.dotted


def _describe(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "...'"


def validate_table(value: object, param: str = "table") -> TableIdent:
    """Return the :class:`TableIdent` for ``namespace.table`` or raise a clear error."""
    if isinstance(value, TableIdent):
        return value
    if not isinstance(value, str):
        raise IcebergValidationError(
            f"{param}={_describe(value)} is not a string; pass the table as 'namespace.table'."
        )
    match = TABLE_RE.match(value)
    if not match:
        raise IcebergValidationError(
            f"{param}={_describe(value)} is not a valid table identifier; expected "
            "'namespace.table' where each part matches [A-Za-z_][A-Za-z0-9_]* (ASCII, at most "
            "128 characters, exactly one dot, no quotes, spaces or catalog prefix)."
        )
    return TableIdent(match.group(1), match.group(2))


def validate_name(value: object, param: str) -> str:
    """Validate a column, namespace or catalog name."""
    if not isinstance(value, str) or not NAME_RE.match(value):
        raise IcebergValidationError(
            f"{param}={_describe(value)} is not a valid name; expected [A-Za-z_][A-Za-z0-9_]* "
            "(ASCII letters, digits and underscores, at most 128 characters)."
        )
    return value


def validate_ref(value: object, param: str = "ref", *, allow_main: bool = True) -> str:
    """Validate a branch or tag name; optionally refuse ``main``."""
    if not isinstance(value, str) or not REF_RE.match(value):
        raise IcebergValidationError(
            f"{param}={_describe(value)} is not a valid ref name; expected a name matching "
            "[A-Za-z_][A-Za-z0-9_.-]* (ASCII, at most 128 characters)."
        )
    if not allow_main and value.lower() == MAIN_BRANCH:
        raise IcebergValidationError(
            f"{param}={value!r} names the main branch, which this operation must not touch; "
            "choose another branch or tag name."
        )
    return value


def validate_snapshot_id(value: object, param: str = "snapshot_id") -> int:
    """A required snapshot id: :func:`airflow_iceberg_provider.params.snapshot_id` (an int or its decimal string)."""
    from airflow_iceberg_provider.params import snapshot_id

    return snapshot_id(value, param, required=True)


def branch_name_for_run(dag_id: str, run_id: str, prefix: str = "wap") -> str:
    """Deterministic, valid branch name for a DAG run (same on every retry)."""
    import hashlib

    digest = hashlib.sha1(f"{dag_id}\x00{run_id}".encode()).hexdigest()[:10]
    slug = re.sub(r"[^A-Za-z0-9_]+", "_", f"{dag_id}__{run_id}").strip("_")[:80]
    return f"{prefix}_{slug}_{digest}"
