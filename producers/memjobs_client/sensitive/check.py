"""The one refusal every ingest path shares: :func:`ensure_not_sensitive`."""

from __future__ import annotations

from memjobs_client.errors import SensitiveContent
from memjobs_client.sensitive.content import find_sensitive_text
from memjobs_client.sensitive.paths import find_sensitive_path
from memjobs_client.sensitive.rules import Finding


def ensure_not_sensitive(*, text: str | None = None, path: str | None = None, field: str | None = None) -> None:
    """Raise :class:`SensitiveContent` if ``path`` or ``text`` looks like a credential.

    The message says, in the caller's terms, which field (``field``, else
    "content" or "path") and what kind of credential it looks like; the
    detector rule is on the error (``rule``), never the matched text.
    """
    checks: list[tuple[str, Finding | None]] = []
    if path is not None:
        checks.append(("path", find_sensitive_path(path)))
    if text is not None:
        checks.append(("content", find_sensitive_text(text)))
    for what, finding in checks:
        if finding is not None:
            raise SensitiveContent(
                f"{field or what}: refused: it looks like a credential ({finding.description}); "
                "it was not stored or sent to a model",
                rule=finding.rule,
            )
