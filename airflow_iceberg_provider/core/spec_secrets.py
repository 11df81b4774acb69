"""Secrets inside a job spec, and how they reach a driver that runs on another host.

A job spec is a 0600 JSON file on the submitting host. A client-mode driver (spark-submit's JVM on
this host, or the Spark Connect runner) reads it in place, so a secret in it (the erasure salt)
never leaves that file. A cluster-mode driver runs elsewhere and gets the spec by ``--files``:
before it is shipped, :func:`split_spec_secrets` takes every secret value out of it and returns
them as Spark conf under :data:`SPEC_SECRET_PREFIX`, which then travels with the catalog's
secrets in the 0600 ``--properties-file`` (and is redacted like them). On the driver,
:func:`restore_spec_secrets` puts them back from the session's conf.

Secret entries are named by key, at any depth of nested objects: :data:`SPEC_SECRET_KEYS`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

#: Spec keys whose values are secrets, wherever they appear in the spec's nested objects.
SPEC_SECRET_KEYS = frozenset({"salt"})
#: Spark conf prefix of a spec secret (matches ``secret`` in every redaction regex of the provider).
SPEC_SECRET_PREFIX = "spark.airflow_iceberg.spec-secret."
#: Spec entry listing the paths :func:`split_spec_secrets` moved out (dotted, e.g. ``erasure.salt``).
SECRETS_MOVED = "secrets_in_conf"


def split_spec_secrets(spec: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """``(spec without its secrets, their Spark conf)``; the spec lists the moved paths.

    >>> spec, conf = split_spec_secrets({"table": "db.t", "erasure": {"salt": "s" * 16}})
    >>> spec
    {'table': 'db.t', 'erasure': {}, 'secrets_in_conf': ['erasure.salt']}
    >>> conf
    {'spark.airflow_iceberg.spec-secret.erasure.salt': 'ssssssssssssssss'}
    """
    conf: dict[str, str] = {}

    def strip(node: Mapping[str, Any], path: str) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in node.items():
            where = f"{path}{key}"
            if key in SPEC_SECRET_KEYS and value is not None:
                conf[SPEC_SECRET_PREFIX + where] = str(value)
            elif isinstance(value, Mapping):
                out[key] = strip(value, f"{where}.")
            else:
                out[key] = value
        return out

    stripped = strip(spec, "")
    if conf:
        stripped[SECRETS_MOVED] = sorted(key[len(SPEC_SECRET_PREFIX) :] for key in conf)
    return stripped, conf


def restore_spec_secrets(spec: dict[str, Any], conf_get: Callable[[str], str | None]) -> dict[str, Any]:
    """Put the secrets :func:`split_spec_secrets` moved back into ``spec`` from the driver's conf.

    :param conf_get: reads one Spark conf key (``None`` when unset).
    :raises KeyError: naming the conf key (never a value) when a moved secret is missing.
    """
    for path in spec.pop(SECRETS_MOVED, None) or []:
        value = conf_get(SPEC_SECRET_PREFIX + path)
        if value is None:
            raise KeyError(f"the driver's Spark conf lacks {SPEC_SECRET_PREFIX + path} (a secret of the job spec)")
        *parents, leaf = path.split(".")
        node = spec
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return spec
