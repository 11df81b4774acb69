"""Operator parameters: one converter per kind, one rule for "unset", one rule for templates.

Every operator, sensor and trigger turns its rendered arguments into values through these
functions, so a duration, an instant, a count, a snapshot id or a ref name means the same
thing (and is refused with the same words) everywhere. Pure: no catalog, no Airflow I/O.

**Unset.** A value is *unset* when it is ``None``, a blank string, or exactly ``"None"`` or
``"null"`` (surrounding blanks ignored): that is what Jinja renders for a Python ``None`` --
``{{ ti.xcom_pull(...) }}`` of a task that returned nothing renders ``"None"``, and
``| tojson`` renders ``"null"``. An unset optional parameter takes its documented default
(the converter returns ``None``); an unset required parameter is refused by name
(``required=True``). This is the rule the write-audit-publish operators already used; the
ref operators used to refuse ``"None"``. A caller whose default would silently pick a
different target may refuse a *rendered* unset string while accepting ``None`` (the tag and
branch operators do so for ``snapshot_id``: a hold must not land on the head by accident).

**Templates.** A string that still holds ``{{`` when a converter sees it was never rendered
(the parameter is not in the operator's ``template_fields``, or a nested template was not
expanded). It is refused with the parameter's name, never parsed as data. Code that
checks arguments before rendering skips templated values and ``XComArg``s with
:func:`is_templated` and converts them in ``execute``.

**Durations** (:func:`duration`, :func:`retention_ms`). One grammar, the union of the two
the provider had (``_ref_logic.duration_ms`` and ``maintenance_policy.parse_duration``), minus
what was ambiguous:

* a ``datetime.timedelta`` (a pendulum ``Duration`` included), kept as it is;
* a short form ``<number><unit>``: ``"500ms"``, ``"90s"``, ``"90m"`` (minutes), ``"36h"``,
  ``"3d"``, ``"2w"``; fractions allowed (``"1.5h"``); units in any case **except** ``"M"``,
  which is refused (minutes or months?): write ``"3m"`` for minutes or ``"P3M"`` for months;
* an ISO-8601 duration: ``"P30D"``, ``"PT12H"``, ``"P1Y2M"`` (a month counts 30 days, a year 365);
* a bare number (``5000``, ``"5000"``) is **milliseconds**, the unit Iceberg stores ref ages in,
  and only where the parameter is documented that way (``bare_ms=True``: the ref retention
  arguments). Elsewhere a number without a unit is refused: it could be seconds,
  milliseconds, or (next to ``older_than``) an epoch instant.

Where the old grammars disagreed: the short forms were refused by the ref operators (now
accepted); bare numbers were milliseconds for refs and refused by maintenance (kept as such
through ``bare_ms``); ``"3M"`` meant three minutes in maintenance (now refused as ambiguous).

**Instants** (:func:`instant_ms`, :func:`cutoff_ms`). One grammar replacing the three
timestamp parsers (``_ref_logic.timestamp_ms``, ``maintenance_policy`` cutoffs,
``hooks.catalog.to_epoch_ms``): a ``datetime`` (naive means UTC; pendulum included), an
ISO-8601 timestamp in extended form (``"2026-01-31T23:59:59Z"``, ``"2026-01-31"``), or epoch
milliseconds as a number or as a decimal string of at least 10 digits (a shorter digit string
is refused: it reads as a count or a compact date ``"20260131"``, not as a time in 2001 or
later). The result must lie between 1970 and the year 9999 (:data:`MAX_EPOCH_MS`).
**Identifiers and ref names** (:func:`validate_table`, :func:`validate_name`,
:func:`validate_ref`). Every table identifier and ref name reaches SQL, file paths or catalog
calls through these helpers, so their patterns are the project's injection guard: plain ASCII
letters, digits and underscores, starting with a letter or underscore (refs may also contain
``-`` and ``.`` after the first character, which Iceberg allows and tag conventions such as
``release-1.2`` use).
"""

from __future__ import annotations

import hashlib
import inspect
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, NoReturn, overload

from airflow_iceberg_provider.exceptions import IcebergValidationError

#: Snapshot operations Iceberg records in a snapshot summary (the one definition).
SNAPSHOT_OPERATIONS = ("append", "overwrite", "delete", "replace")
#: Iceberg stores ref ages as Java ``long`` milliseconds and snapshot counts as ``int``.
JAVA_LONG_MAX = 2**63 - 1
JAVA_INT_MAX = 2**31 - 1
#: Latest instant accepted (9999-12-31T23:59:59.999Z): beyond it nothing can be rendered or compared.
MAX_EPOCH_MS = 253_402_300_799_999
#: Literal strings that mean "unset" (what Jinja renders for ``None``; ``tojson`` renders ``null``).
UNSET_STRINGS = frozenset({"", "None", "null"})

_DECIMAL = re.compile(r"-?[0-9]{1,20}")
_SHORT = re.compile(r"([0-9]+(?:\.[0-9]+)?)\s*(ms|w|d|h|m|s)", re.IGNORECASE)
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}
_DURATION_FORMS = "a timedelta / pendulum.duration(...), '90m', '36h', '3d', or an ISO-8601 duration such as 'P3D'"
_INSTANT_FORMS = "a datetime, an ISO-8601 timestamp such as '2026-01-31T23:59:59+00:00', or epoch milliseconds"


# --------------------------------------------------------------------- identifiers and ref names
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
    return snapshot_id(value, param, required=True)


def branch_name_for_run(dag_id: str, run_id: str, prefix: str = "wap") -> str:
    """Deterministic, valid branch name for a DAG run (same on every retry)."""
    digest = hashlib.sha1(f"{dag_id}\x00{run_id}".encode()).hexdigest()[:10]
    slug = re.sub(r"[^A-Za-z0-9_]+", "_", f"{dag_id}__{run_id}").strip("_")[:80]
    return f"{prefix}_{slug}_{digest}"


# --------------------------------------------------------------------- the two rules
def is_templated(value: object) -> bool:
    """Whether ``value`` is not final until Airflow renders the task.

    True for a string holding Jinja (``{{`` or ``{%``), for an ``XComArg`` (or any value
    Airflow resolves at run time: it has ``resolve`` and ``iter_references``), and for a list,
    tuple, set or mapping holding one of those. Checks that run before rendering (an
    operator's ``check_arguments()`` in ``__init__``) skip such values; ``execute()`` sees them
    rendered.
    """
    if isinstance(value, str):
        return "{{" in value or "{%" in value
    if isinstance(value, Mapping):
        return any(is_templated(k) or is_templated(v) for k, v in value.items())
    if isinstance(value, list | tuple | set | frozenset):
        return any(is_templated(v) for v in value)
    return callable(getattr(value, "resolve", None)) and callable(getattr(value, "iter_references", None))


def is_unset(value: object) -> bool:
    """The one "unset" rule: ``None``, a blank string, ``"None"`` or ``"null"``."""
    return value is None or (isinstance(value, str) and value.strip() in UNSET_STRINGS)


def describe(value: object) -> str:
    """``repr`` of a value, cut to 80 characters for messages."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "...'"


def refuse(param: str, value: Any, problem: str, fix: str) -> NoReturn:
    """Raise the provider's validation error: parameter, value, problem, fix."""
    raise IcebergValidationError(f"{param}={describe(value)} {problem}; {fix}.")


def _check_template(value: object, param: str) -> None:
    if is_templated(value):
        refuse(
            param,
            value,
            "still holds a Jinja template at execute time (it was not rendered)",
            f"list {param!r} in the operator's template_fields, or pass a rendered value",
        )


def _unset(value: object, param: str, required: bool, example: str) -> None:
    if required:
        refuse(param, value, "is not set, and this parameter is required", f"pass e.g. {example}")
    return None


# ------------------------------------------------------------------------ durations
def _number_ms(value: float, param: str) -> int:
    if isinstance(value, float) and not math.isfinite(value):
        refuse(param, value, "is not a finite duration", "pass e.g. 'P30D'")
    return int(value)


def _duration_text_ms(text: str, value: Any, param: str, bare_ms: bool) -> int:
    if _DECIMAL.fullmatch(text):
        if bare_ms:
            return int(text)
        refuse(param, value, "is a number without a unit", f"give the unit: {_DURATION_FORMS}")
    if (m := _SHORT.fullmatch(text)) is not None:
        if m.group(2) == "M":
            refuse(param, value, "is ambiguous ('M': minutes or months?)", "write '3m' for minutes or 'P3M' for months")
        return int(float(m.group(1)) * _UNIT_MS[m.group(2).lower()])
    if text[:1] in "Pp" or text[:2] in ("-P", "-p"):
        import pendulum

        try:
            parsed = pendulum.parse(text)
        except (ValueError, OverflowError):  # pendulum's ParserError is a ValueError
            parsed = None
        if isinstance(parsed, timedelta):
            return int(parsed.total_seconds() * 1000)
    if text[:1].isdigit() and "-" in text:
        refuse(param, value, "is a point in time, not a duration", f"pass {_DURATION_FORMS}")
    refuse(param, value, "is not a duration", f"pass {_DURATION_FORMS}")


def _duration_ms(value: object, param: str, bare_ms: bool) -> int:
    """Milliseconds of a set duration (exact Python int, unbounded, any sign)."""
    if isinstance(value, bool):
        refuse(param, value, "is not a duration", f"pass {_DURATION_FORMS}")
    if isinstance(value, timedelta):
        return int(value.total_seconds() * 1000)
    if isinstance(value, int | float):
        if not bare_ms:
            refuse(param, value, "is a number without a unit", f"give the unit: {_DURATION_FORMS}")
        return _number_ms(value, param)
    if isinstance(value, str):
        return _duration_text_ms(value.strip(), value, param, bare_ms)
    refuse(param, value, "is not a duration", f"pass {_DURATION_FORMS}")


@overload
def duration(value: object, param: str, *, required: Literal[True], bare_ms: bool = ...) -> timedelta: ...
@overload
def duration(value: object, param: str, *, required: bool = ..., bare_ms: bool = ...) -> timedelta | None: ...
def duration(value: object, param: str, *, required: bool = False, bare_ms: bool = False) -> timedelta | None:
    """A duration (see the module docstring for the grammar); unset gives ``None``.

    A ``timedelta`` is returned as it is (pendulum ``Duration`` kept); any sign is accepted
    here, the caller bounds it (see :func:`retention_ms` for positive retentions).

    :param required: refuse an unset value instead of returning ``None``.
    :param bare_ms: read a bare number as milliseconds (else it is refused).
    """
    _check_template(value, param)
    if is_unset(value):
        _unset(value, param, required, "'36h' or 'P3D'")
        return None
    if isinstance(value, timedelta):
        return value
    ms = _duration_ms(value, param, bare_ms)
    try:
        return timedelta(milliseconds=ms)
    except OverflowError:
        refuse(param, value, "is longer than a timedelta can hold (999999999 days)", "pass a shorter duration")


def retention_ms(value: object, param: str) -> int | None:
    """A positive retention in milliseconds (Iceberg's ``max-ref-age-ms`` / ``max-snapshot-age-ms``).

    Unset gives ``None`` (no retention set: the table's default applies). Bare numbers are
    milliseconds. Zero, negative and values beyond a Java ``long`` are refused.
    """
    _check_template(value, param)
    if is_unset(value):
        return None
    ms = _duration_ms(value, param, bare_ms=True)
    if ms <= 0:
        refuse(
            param,
            value,
            f"is {ms} ms; a retention must be positive",
            "leave it unset (None) to keep the ref and its snapshots forever, or pass a positive duration "
            "such as 'P30D'",
        )
    if ms > JAVA_LONG_MAX:
        refuse(param, value, f"is {ms} ms, more than Iceberg can store (2^63-1 ms)", "leave it unset (None)")
    return ms


# ------------------------------------------------------------------------- instants
def _datetime_ms(dt: datetime, value: Any, param: str) -> int:
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    try:
        return int(dt.timestamp() * 1000)
    except (OverflowError, OSError, ValueError) as err:
        refuse(param, value, f"is out of range ({err})", f"pass {_INSTANT_FORMS}")


def _instant_ms(value: object, param: str) -> int:
    """Epoch milliseconds of a set instant (unchecked range)."""
    if isinstance(value, bool):
        refuse(param, value, "is not a timestamp", f"pass {_INSTANT_FORMS}")
    if isinstance(value, datetime):
        return _datetime_ms(value, value, param)
    if isinstance(value, int | float):
        if isinstance(value, float) and not math.isfinite(value):
            refuse(param, value, "is not a timestamp", f"pass {_INSTANT_FORMS}")
        return int(value)
    if isinstance(value, str):
        text = value.strip()
        if _DECIMAL.fullmatch(text):
            if len(text.lstrip("-")) < 10:
                refuse(
                    param,
                    value,
                    "is too short for epoch milliseconds (a count or a compact date?)",
                    f"pass {_INSTANT_FORMS}, or a duration such as '7d' where one is accepted",
                )
            return int(text)
        if "-" in text[1:]:  # ISO extended form has dashes; the basic form '20260131' is refused above
            try:
                parsed = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
            except ValueError:
                parsed = None
            if parsed is not None:
                return _datetime_ms(parsed, value, param)
    refuse(param, value, "is not a timestamp", f"pass {_INSTANT_FORMS}")


def _in_range(ms: int, value: Any, param: str) -> int:
    if ms < 0:
        refuse(param, value, f"is {ms} ms since the epoch, before 1970", "pass a real commit time")
    if ms > MAX_EPOCH_MS:
        refuse(param, value, f"is {ms} ms since the epoch, after the year 9999", f"pass {_INSTANT_FORMS}")
    return ms


def instant_ms(value: object, param: str, *, required: bool = False) -> int | None:
    """A point in time as epoch milliseconds (grammar in the module docstring); unset gives ``None``."""
    _check_template(value, param)
    if is_unset(value):
        _unset(value, param, required, "'2026-01-31T23:59:59+00:00'")
        return None
    return _in_range(_instant_ms(value, param), value, param)


def is_duration_text(text: str) -> bool:
    """Whether a string is written as a duration (short form or ISO ``P...``), not as an instant."""
    text = text.strip()
    return bool(_SHORT.fullmatch(text)) or text[:1] in "Pp" or text[:2] in ("-P", "-p")


def cutoff_ms(value: object, param: str, *, now: int) -> int:
    """A required "older than" cutoff as epoch ms: a duration means ``now`` minus it, else an instant.

    Bare numbers are instants (epoch milliseconds); durations need a unit or the ISO form.
    """
    _check_template(value, param)
    if is_unset(value):
        refuse(
            param,
            value,
            "is not set, and this parameter is required",
            "pass e.g. '7d', 'P7D' or '2026-01-31T00:00:00Z'",
        )
    if isinstance(value, timedelta) or (isinstance(value, str) and is_duration_text(value)):
        out = now - _duration_ms(value, param, bare_ms=False)
    else:
        out = _instant_ms(value, param)
    if not 0 <= out <= MAX_EPOCH_MS:
        refuse(
            param,
            value,
            f"resolves to {out} ms since the epoch, outside 1970..9999",
            "pass a duration such as '7d' or a real timestamp",
        )
    return out


# ---------------------------------------------------------------- counts and ids
def positive_int(
    value: Any,
    param: str,
    *,
    required: bool = False,
    minimum: int = 1,
    maximum: int = JAVA_INT_MAX,
    hint: str = "",
) -> int | None:
    """An integer in ``minimum..maximum`` (a decimal string as templates render is accepted); unset gives ``None``.

    :param hint: a sentence appended to the refusal (why the bound exists).
    """
    _check_template(value, param)
    if is_unset(value):
        _unset(value, param, required, str(max(minimum, 1)))
        return None
    if isinstance(value, str) and _DECIMAL.fullmatch(value.strip()):
        value = int(value.strip())
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        bound = "2^31-1" if maximum == JAVA_INT_MAX else ("2^63-1" if maximum == JAVA_LONG_MAX else str(maximum))
        raise IcebergValidationError(
            f"{param}={describe(value)} is invalid: it must be {'a positive integer' if minimum == 1 else 'an integer'} from {minimum} to {bound}; "
            f"pass e.g. {max(minimum, 1)}{' or leave it unset (None)' if not required else ''}.{' ' + hint if hint else ''}"
        )
    return value


@overload
def snapshot_id(value: object, param: str = ..., *, required: Literal[True]) -> int: ...
@overload
def snapshot_id(value: object, param: str = ..., *, required: bool = ...) -> int | None: ...
def snapshot_id(value: object, param: str = "snapshot_id", *, required: bool = False) -> int | None:
    """A snapshot id: an ``int`` or its decimal string (XCom carries ids as strings); unset gives ``None``.

    Floats are refused: a float has already lost the low bits of a 64-bit id.
    """
    _check_template(value, param)
    if is_unset(value):
        _unset(value, param, required, "the integer id or its decimal string")
        return None
    if isinstance(value, str) and _DECIMAL.fullmatch(value.strip()):
        value = int(value.strip())
    if isinstance(value, bool) or not isinstance(value, int):
        problem = (
            "is a float, which has lost the id's low digits" if isinstance(value, float) else "is not a snapshot id"
        )
        refuse(
            param,
            value,
            problem,
            "pass the integer id or its decimal string (see the table's snapshots via IcebergCatalogHook.list_snapshots)",
        )
    return value


_SHA256_HEX = re.compile(r"[0-9a-f]{64}")
_EVENT_ID = re.compile(r"[A-Za-z0-9_.:-]{1,128}")


@dataclass(frozen=True)
class AuditBinding:
    """One audit run's verdict, as the audit task returns it: its ``audit_event_id`` (the
    ``event_id`` of its ``audit_results`` rows), the ``spec_hash`` of the checks it ran and the
    ``snapshot_id`` it audited."""

    event_id: str
    spec_hash: str
    snapshot_id: int


def audit_binding(value: Any, param: str = "audit") -> AuditBinding | None:
    """The audit task's XCom (a mapping, or its JSON text) as an :class:`AuditBinding`; unset gives ``None``.

    Only ``audit_event_id``, ``spec_hash`` and ``snapshot_id`` are read (the audit's whole return
    value may be passed); each must be present and well formed.
    """
    _check_template(value, param)
    if is_unset(value):
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            value = None
    fix = (
        "pass the audit task's return value (e.g. audit_task.output), which holds audit_event_id, spec_hash and "
        "snapshot_id"
    )
    if not isinstance(value, Mapping):
        refuse(param, value, "is not an audit task's result (a mapping or its JSON text)", fix)
    event_id, digest = value.get("audit_event_id"), value.get("spec_hash")
    if not isinstance(event_id, str) or not _EVENT_ID.fullmatch(event_id):
        refuse(param, value, "has no valid audit_event_id", fix)
    if not isinstance(digest, str) or not _SHA256_HEX.fullmatch(digest):
        refuse(param, value, "has no valid spec_hash (64 lowercase hex digits)", fix)
    return AuditBinding(
        event_id, digest, snapshot_id(value.get("snapshot_id"), f"{param}['snapshot_id']", required=True)
    )


@overload
def ref_name(value: object, param: str = ..., *, required: Literal[True] = ..., allow_main: bool = ...) -> str: ...
@overload
def ref_name(value: object, param: str = ..., *, required: bool, allow_main: bool = ...) -> str | None: ...
def ref_name(value: object, param: str = "ref", *, required: bool = True, allow_main: bool = True) -> str | None:
    """A branch or tag name (the strict pattern of :mod:`~airflow_iceberg_provider.params`).

    Not stripped: a name with a trailing blank or newline is refused, never silently changed.
    Unset gives ``None`` when ``required=False``.
    """
    _check_template(value, param)
    if is_unset(value):
        _unset(value, param, required, "'release-1.2'")
        return None
    return validate_ref(value, param, allow_main=allow_main)


def operation(value: object, param: str = "operation") -> str | None:
    """A snapshot operation (:data:`SNAPSHOT_OPERATIONS`); unset gives ``None`` (any operation)."""
    _check_template(value, param)
    if is_unset(value):
        return None
    if value not in SNAPSHOT_OPERATIONS:
        refuse(param, value, "is not a snapshot operation", f"use one of {SNAPSHOT_OPERATIONS}")
    return str(value)


def operations(values: Any, param: str = "expected_operations") -> list[str]:
    """A non-empty list of snapshot operations (each one of :data:`SNAPSHOT_OPERATIONS`)."""
    items = [values] if isinstance(values, str) else list(values or ())
    bad = [op for op in items if op not in SNAPSHOT_OPERATIONS]
    if bad or not items:
        refuse(
            param,
            values,
            f"holds unknown operations {bad}" if bad else "is empty",
            f"use a subset of {list(SNAPSHOT_OPERATIONS)}",
        )
    return [str(op) for op in items]


# ----------------------------------------------------------------- flags and enums
#: The only spellings of a flag (compared case-insensitively, after stripping blanks).
FLAG_WORDS = {"true": True, "false": False}
#: What an *optional* flag (default ``None``) also accepts as "unset": Python ``None`` and what
#: Jinja renders for it. A blank string is refused: it is not a decision.
_FLAG_UNSET = ("None", "null")


@overload
def flag(value: Any, param: str, *, optional: Literal[False] = ...) -> bool: ...
@overload
def flag(value: Any, param: str, *, optional: bool) -> bool | None: ...
def flag(value: Any, param: str, *, optional: bool = False) -> bool | None:
    """A boolean flag: ``True``/``False`` or the strings ``"true"``/``"false"`` in any case.

    Nothing else is a flag: ``"yes"``, ``"1"``, ``1``, ``"on"``, ``""`` and (unless
    ``optional``) ``None`` are refused with the parameter named, so no flag can fail open
    (``dry_run="yes"`` never means "run for real").

    :param optional: the parameter's default is ``None`` (the engine's own default); then
        ``None`` and the rendered ``"None"``/``"null"`` give ``None``.
    :raises IcebergValidationError: for any other value.
    """
    _check_template(value, param)
    if isinstance(value, bool):
        return value
    if optional and (value is None or (isinstance(value, str) and value.strip() in _FLAG_UNSET)):
        return None
    if isinstance(value, str) and value.strip().lower() in FLAG_WORDS:
        return FLAG_WORDS[value.strip().lower()]
    problem = "is not set, and this flag is required" if value is None else "is not a boolean flag"
    refuse(
        param,
        value,
        problem,
        "pass True or False (or the strings 'true'/'false' from a template)"
        + ("; None leaves it at the engine's default" if optional else ""),
    )


def flag_parameters(cls: type) -> dict[str, bool]:
    """The boolean flags of a class's constructors (its own and its bases' in this package).

    A flag is a keyword parameter annotated ``bool``, ``bool | str`` or ``bool | None`` (the value
    says whether ``None`` is accepted: an optional flag). Parameters that also take other types
    (``bool | dict``, ``Asset | bool``) are not flags and are converted where they are used.
    """
    found: dict[str, bool] = {}
    for klass in reversed(cls.__mro__):
        if not klass.__module__.startswith("airflow_iceberg_provider.") or "__init__" not in vars(klass):
            continue
        for name, parameter in inspect.signature(vars(klass)["__init__"]).parameters.items():
            parts = {part.strip() for part in str(parameter.annotation).split("|")}
            if "bool" in parts and parts <= {"bool", "str", "None"}:
                found[name] = "None" in parts
    return found


def resolve_flags(obj: Any) -> None:
    """Convert every flag of ``obj`` (:func:`flag_parameters`) in place with :func:`flag`.

    The first step of every operator's and sensor's ``execute()``: after rendering, before any
    I/O, so a flag that is not a boolean stops the task with the parameter named and nothing changed.
    """
    for name, optional in flag_parameters(type(obj)).items():
        setattr(obj, name, flag(getattr(obj, name), name, optional=optional))


def choice(value: Any, param: str, choices: Sequence[str]) -> str:
    """An enum parameter: exactly one of ``choices`` (case-sensitive, no stripping).

    :raises IcebergValidationError: naming the parameter and the accepted values.
    """
    _check_template(value, param)
    if not isinstance(value, str) or value not in choices:
        refuse(param, value, "is not one of the accepted values", f"use one of {list(choices)}")
    return value


__all__ = [
    "JAVA_INT_MAX",
    "AuditBinding",
    "JAVA_LONG_MAX",
    "MAX_EPOCH_MS",
    "REF_RE",
    "SNAPSHOT_OPERATIONS",
    "UNSET_STRINGS",
    "choice",
    "audit_binding",
    "cutoff_ms",
    "describe",
    "duration",
    "flag",
    "flag_parameters",
    "instant_ms",
    "is_duration_text",
    "is_templated",
    "is_unset",
    "operation",
    "operations",
    "positive_int",
    "ref_name",
    "refuse",
    "resolve_flags",
    "retention_ms",
    "snapshot_id",
]
