"""Exceptions raised by the Iceberg provider.

``AirflowException`` subclasses are retried by Airflow according to the task's
``retries``; ``AirflowFailException`` subclasses fail the task at once because a
retry cannot change the outcome (bad input, failed audit, refused operation).
"""

from __future__ import annotations

from airflow.sdk.exceptions import AirflowException, AirflowFailException


class IcebergProviderError(AirflowException):
    """Base class for retryable provider errors."""


class IcebergValidationError(AirflowFailException, ValueError):
    """A parameter is invalid; the message names it, its problem and the fix."""


class IcebergConnectionError(AirflowFailException):
    """The catalog connection is missing or misconfigured."""


class IcebergCatalogUnavailableError(IcebergProviderError):
    """The catalog could not be reached or was locked; retrying may help."""


class IcebergTableNotFoundError(AirflowFailException):
    """The table (or namespace) does not exist."""


class IcebergRefNotFoundError(AirflowFailException):
    """A branch, tag or snapshot id does not exist on the table."""


class IcebergCommitConflictError(IcebergProviderError):
    """A compare-and-swap commit lost against a concurrent writer."""


class IcebergRefusedError(AirflowFailException):
    """A safety check refused the operation; nothing was committed."""


class IcebergCommitVerificationError(AirflowFailException):
    """A job finished but the catalog does not show the commit it should have made."""


class IcebergSparkJobError(IcebergProviderError):
    """spark-submit failed (non-zero exit) or could not be started."""


class IcebergAuditFailedError(AirflowFailException):
    """A write-audit-publish audit found failing checks; ``main`` was not touched."""


class IcebergPublishConflictError(AirflowFailException):
    """``main`` moved since the WAP branch was cut, so it cannot be fast-forwarded; nothing was changed."""


class IcebergHealthThresholdError(AirflowFailException):
    """A table crossed a health threshold (the check's result is in XCom before this is raised)."""
