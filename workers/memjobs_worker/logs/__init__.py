"""JSON Lines logging with secret redaction and privacy-by-default.

What: :func:`configure_logging` installs a single handler on the root logger
that writes one JSON object per line (``ensure_ascii=False``) using
:class:`JsonFormatter`.  Every record carries ``ts`` (ISO-8601 UTC with
milliseconds and a ``Z``), ``level``, ``logger``, ``msg``, ``pid``,
``thread``, every ``extra=`` field of the log call and, when ``exc_info`` is
given, ``exc_type`` and ``exc`` (the formatted traceback).

Why: the workers handle a voice assistant's memory, and logs end up in places
with weaker access control than the database.  So secrets are redacted (with
the patterns of the producers' credential check, :mod:`memjobs_client.sensitive`)
and user content (:data:`TEXT_FIELDS`, owner ids) is omitted before anything is
written, and mem0's records, which carry memory text, are reduced to a fixed
message.  The redaction is a safety net, not a licence: do not log user
content or secrets on purpose and rely on it to catch them.

Modules: :mod:`~memjobs_worker.logs.redaction` (:func:`redact`, :func:`redact_text`,
what is masked and omitted), :mod:`~memjobs_worker.logs.formatter`
(:class:`JsonFormatter`, mem0 suppression, Dramatiq message arguments) and
:mod:`~memjobs_worker.logs.configure` (:func:`configure_logging`).
"""

from memjobs_client.sensitive import REDACTED
from memjobs_worker.logs.configure import NOISY_LOGGERS, configure_logging
from memjobs_worker.logs.configure import _JsonLinesHandler as _JsonLinesHandler  # tests find our handler by type
from memjobs_worker.logs.formatter import MEM0_SUPPRESSED_MSG as MEM0_SUPPRESSED_MSG  # importable, as before
from memjobs_worker.logs.formatter import JsonFormatter
from memjobs_worker.logs.redaction import OMITTED, TEXT_FIELDS, redact, redact_text, redact_url

__all__ = [
    # setup
    "configure_logging",
    "NOISY_LOGGERS",
    # the formatter
    "JsonFormatter",
    # redaction
    "redact",
    "redact_text",
    "redact_url",
    "REDACTED",
    "OMITTED",
    "TEXT_FIELDS",
]
