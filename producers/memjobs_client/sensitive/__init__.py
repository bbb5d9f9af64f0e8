"""Refuse content and paths that look like credentials, before they go anywhere.

What: one check shared by every ingest path (every text field of every job,
through the contracts' validation; consolidation input and output; the
worker's logs).  :func:`find_sensitive_text` and
:func:`find_sensitive_path` say which rule matched, :func:`ensure_not_sensitive`
raises :class:`~memjobs_client.errors.SensitiveContent` (reason
``sensitive_content``), and :func:`redact_secrets` blanks the secret values out
of text that must still reach a model.

Why: a voice assistant hears people read out Wi-Fi passwords, bank PINs and API
keys, in Chinese and in English.  None of that may be stored in memory or sent
to a model service, so the check runs at the producer, before anything is
queued.  The gateway imports ``producers/`` alone, so this package uses the
standard library only, and the BIP39 word list of ``mnemonic`` (Trezor's
reference package, no dependencies) for bare seed phrases
(:mod:`~memjobs_client.sensitive.seeds`).

How, and what it will not do (one module each):

* :mod:`~memjobs_client.sensitive.normalize` — NFKC one character at a time, with
  invisible format characters dropped, Cyrillic and Greek look-alikes folded
  to Latin, and offsets mapped back for redaction.
* :mod:`~memjobs_client.sensitive.content` — the content rules, in order:
  token *shapes* (:mod:`~memjobs_client.sensitive.shapes`: vendor keys, PEM
  blocks, JWTs, URLs with passwords, Wi-Fi QR codes) matched anywhere; long
  random values assigned to secret-like names; disclosures in English
  (:mod:`~memjobs_client.sensitive.disclosures`) and Chinese
  (:mod:`~memjobs_client.sensitive.zh`); numbers
  (:mod:`~memjobs_client.sensitive.numbers`: Luhn-valid cards, resident
  identity numbers, one-time codes, PINs); and disguises
  (:mod:`~memjobs_client.sensitive.encoded`: base64 or hex, tokens broken by
  spaces).  "my password is hunter2" is refused, "I forgot my password
  yesterday" and "max_tokens: 2048" are not: the disclosure rules want a
  keyword, a connector and a value that looks like one (judged by
  :mod:`~memjobs_client.sensitive.values`).  A heuristic: it trades a few
  misses for few false refusals; ``tests/security/test_sensitive_corpus.py`` measures both.
* :mod:`~memjobs_client.sensitive.paths` — credential file and directory names.
* :mod:`~memjobs_client.sensitive.document` — a Markdown document checked
  whole, its lines also read joined: a secret split over two lines (or two
  edits) is found.
* :mod:`~memjobs_client.sensitive.redact` and :mod:`~memjobs_client.sensitive.check` —
  blanking secrets out, and the refusal itself.
* :mod:`~memjobs_client.sensitive.structured` — the stricter masking of
  machine text the worker's logs add (values under secret-like names,
  ``Authorization:`` headers, URL user info, ``Bearer …``), built on the
  names and shapes of :mod:`~memjobs_client.sensitive.shapes`: the refusal
  and the log redaction share one source of secret patterns.
* A :class:`Finding` (:mod:`~memjobs_client.sensitive.rules`) and every error
  message name the rule only, never the matched text, because the matched
  text is the secret.
"""

from memjobs_client.sensitive.check import ensure_not_sensitive
from memjobs_client.sensitive.content import find_sensitive_text
from memjobs_client.sensitive.document import find_sensitive_document
from memjobs_client.sensitive.paths import PATH_RULE as PATH_RULE  # importable, as before; not in __all__
from memjobs_client.sensitive.paths import find_sensitive_path
from memjobs_client.sensitive.redact import REDACTED, redact_secrets
from memjobs_client.sensitive.rules import Finding
from memjobs_client.sensitive.structured import is_secret_key, redact_structured

__all__ = [
    # the check
    "ensure_not_sensitive",
    "find_sensitive_document",
    "find_sensitive_path",
    "find_sensitive_text",
    "Finding",
    # redaction
    "REDACTED",
    "redact_secrets",
    "redact_structured",
    "is_secret_key",
]
