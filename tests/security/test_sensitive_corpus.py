"""The sensitive-content check measured on a labelled corpus (``tests/corpus/``).

The bar (issue 10): every credential line refused, at most 2 % of the ordinary
lines refused.  The figures are printed with ``-s`` and copied to README.
"""

from __future__ import annotations

from collections import Counter

import pytest

from memjobs_client.sensitive import find_sensitive_text, redact_secrets
from tests.support.sensitive_corpus import negatives, positives

MAX_FALSE_REFUSALS = 0.02


def test_corpus_is_large_and_covers_every_family() -> None:
    families = Counter(family for family, _, _ in positives())
    assert sum(families.values()) >= 150
    assert len(negatives()) >= 300
    assert set(families) >= {
        "vendor_payment",
        "vendor_mail",
        "vendor_messaging",
        "vendor_cloud",
        "vendor_ci",
        "vendor_registry",
        "vendor_model",
        "db_url",
        "card",
        "cn_id",
        "passport",
        "otp",
        "pin",
        "wifi",
        "password_zh",
        "password_en",
        "private_key",
        "encoded",
        "homoglyph",
        "spaced",
    }
    assert any("\u4e00" <= c <= "\u9fff" for line in negatives() for c in line)  # Chinese too


def test_every_credential_line_is_refused() -> None:
    missed = [(family, text) for family, _, text in positives() if find_sensitive_text(text) is None]
    total = len(positives())
    print(f"\ncredential lines refused: {total - len(missed)}/{total}")
    assert missed == []


def test_at_most_two_percent_of_ordinary_lines_are_refused() -> None:
    lines = negatives()
    refused = [(line, str(find_sensitive_text(line))) for line in lines if find_sensitive_text(line)]
    print(f"\nordinary lines refused: {len(refused)}/{len(lines)}")
    assert len(refused) <= MAX_FALSE_REFUSALS * len(lines), refused


@pytest.mark.parametrize(("family", "secret", "text"), positives(), ids=lambda v: str(v)[:24])
def test_redaction_removes_every_secret_of_the_corpus(family: str, secret: str, text: str) -> None:
    redacted = redact_secrets(text)
    assert secret not in redacted
    assert find_sensitive_text(redacted) is None
