"""Keep Airflow's secret masker from warning about this provider's own non-secret words.

When Airflow loads a connection it masks every value of the connection's ``extra``
(``Connection.get`` -> ``get_uri()`` -> ``extra_dejson`` -> ``mask_secret(dict)``), and the masker
checks a value's *length* before it checks whether the key names a secret. The first value
shorter than ``[logging] min_length_masked_secret`` (5) logs "Skipping masking for a secret as
it's too short (<5 chars)" at the top of the task log. Every ``iceberg_catalog`` connection
carries one: ``catalog_type`` is ``sql``, ``rest``, ``glue`` or ``hive`` (and flags in
``properties`` are often ``true``).

The masker skips the words in its ``SECRETS_TO_SKIP_MASKING`` set *before* the length check.
Adding these words there changes no masking at all (values under 5 characters are never
masked), it only stops the misleading warning; a short value of a real secret key elsewhere
still warns, as it should. Short values a user chooses (a four-letter ``catalog_name``)
still make Airflow warn: that is Airflow's masker checking the length before the key.
"""

from __future__ import annotations

import importlib

from airflow_iceberg_provider.hooks.catalog_config import CATALOG_TYPES

#: words this provider's connections carry that are never secrets (all shorter than 5 characters)
NON_SECRET_TERMS = frozenset({*CATALOG_TYPES, "true"})
_MASKER_MODULES = (
    "airflow.sdk._shared.secrets_masker.secrets_masker",  # task processes (Task SDK)
    "airflow._shared.secrets_masker.secrets_masker",  # API server, scheduler, CLI
)


def register_non_secret_terms() -> list[str]:
    """Tell every loaded Airflow secret masker that :data:`NON_SECRET_TERMS` are not secrets.

    Idempotent; returns the masker modules updated (none when Airflow lays them out differently,
    in which case the warning simply stays).
    """
    updated = []
    for name in _MASKER_MODULES:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        terms = getattr(module, "SECRETS_TO_SKIP_MASKING", None)
        if isinstance(terms, set):
            terms.update(NON_SECRET_TERMS)
            updated.append(name)
    return updated
