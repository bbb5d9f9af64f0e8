"""Tests for memjobs_client.sensitive: the one credential check every ingest path shares."""

from __future__ import annotations

import base64
import time

import pytest

from memjobs_client.errors import PermanentError, SensitiveContent
from memjobs_client.sensitive import (
    REDACTED,
    Finding,
    ensure_not_sensitive,
    find_sensitive_document,
    find_sensitive_path,
    find_sensitive_text,
    redact_secrets,
)

# Fake credentials, assembled so that this file itself does not look like a leak.
AWS_KEY_ID = "AKIA" + "IOSFODNN7EXAMPL1"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCY" + "EXAMPLEKEY"
GITHUB = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
GITHUB_PAT = "github_pat_" + "11ABCDEFG0123456789_abcdefghijklmnopqrstuv"
SLACK = "xoxb-" + "1234567890-0987654321-AbCdEfGhIjKlMnOp"
SK_KEY = "sk-" + "proj-Ab12Cd34Ef56Gh78Ij90Kl12"
DASHSCOPE = "sk-" + "8f2a9c1d3e4b5a6f7081928374655647"
GOOGLE = "AIza" + "SyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q"
JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9"
    ".eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4ifQ"
    ".SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
)
STRIPE = "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc"
BEARER = "abcDEF1234567890ghiJKL"
HEX32 = "8f2a9c1d3e4b5a6f7081928374655647"
PEM_BODY = "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun"
PEM = f"-----BEGIN RSA PRIVATE KEY-----\n{PEM_BODY}\n-----END RSA PRIVATE KEY-----"
OPENSSH = (
    "-----BEGIN OPENSSH PRIVATE KEY-----\n"
    "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n"
    "-----END OPENSSH PRIVATE KEY-----"
)


# --------------------------------------------------------------------------
# Content rules: positives, with the rule and the secret value they carry
# --------------------------------------------------------------------------

POSITIVES: list[tuple[str, str, str]] = [
    # (text, expected rule, secret value that must not survive)
    # private keys
    (f"here is my key\n{PEM}\nthanks", "private_key_block", PEM_BODY),
    (OPENSSH, "private_key_block", "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ"),
    (
        '{"private_key": "-----BEGIN PRIVATE KEY-----\\n' + PEM_BODY + '\\n-----END PRIVATE KEY-----\\n"}',
        "private_key_block",
        PEM_BODY,
    ),
    # token shapes
    (f"my access key id is {AWS_KEY_ID}", "aws_access_key", AWS_KEY_ID),
    (f"aws_secret_access_key = {AWS_SECRET}", "aws_secret_key", AWS_SECRET),
    (f"export GH={GITHUB}", "github_token", GITHUB),
    (f"token {GITHUB_PAT}", "github_token", GITHUB_PAT),
    (f"slack bot {SLACK} ok", "slack_token", SLACK),
    (f"use {SK_KEY} for the model", "sk_api_key", SK_KEY),
    (f"DashScope: {DASHSCOPE}", "sk_api_key", DASHSCOPE),
    (f"maps key {GOOGLE}", "google_api_key", GOOGLE),
    (f"cookie {JWT}", "jwt", JWT),
    (f"stripe {STRIPE}", "stripe_key", STRIPE),
    (f"Authorization: Bearer {BEARER}", "bearer_token", BEARER),
    ("Authorization: Basic dXNlcjpodW50ZXIy", "basic_auth", "dXNlcjpodW50ZXIy"),
    ("db at postgres://admin:s3cretPw@db.example.com:5432/app", "url_credentials", "s3cretPw"),
    (f'SECRET_KEY = "{HEX32}"', "high_entropy_assignment", HEX32),
    (f"SIGNING_SALT: {HEX32}", "high_entropy_assignment", HEX32),
    # English disclosures
    ("my password is hunter2!", "password_assignment", "hunter2"),
    ("password: Tr0ub4dor&3", "password_assignment", "Tr0ub4dor&3"),
    ("the wifi password is 88886666", "password_assignment", "88886666"),
    ("my bank PIN is 4321", "password_assignment", "4321"),
    ("my password is swordfish", "password_assignment", "swordfish"),
    ("the password for my gmail account is hunter22", "password_assignment", "hunter22"),
    ("my passcode was changed to 246810", "password_assignment", "246810"),
    ("password is set to qwerty123", "password_assignment", "qwerty123"),
    ("change the password to Tr0ub4dor", "password_assignment", "Tr0ub4dor"),
    ("my password is 'correct horse battery staple'", "password_assignment", "correct horse"),
    ('db_password = "pa55word"', "password_assignment", "pa55word"),
    ('{"password": "hunter2x"}', "password_assignment", "hunter2x"),
    ("pwd=letmein99", "password_assignment", "letmein99"),
    ("my PIN is 1 2 3 4", "password_assignment", "1 2 3 4"),
    ("my pin is one two three four", "password_assignment", "one two three four"),
    ("API_KEY=abcd1234efgh", "secret_assignment", "abcd1234efgh"),
    ("my api key is abcd1234efgh", "secret_assignment", "abcd1234efgh"),
    ("the access token: zzTOP123", "secret_assignment", "zzTOP123"),
    ("client_secret=f00b4rb4z", "secret_assignment", "f00b4rb4z"),
    ("credentials: admin/admin123", "secret_assignment", "admin/admin123"),
    ("the secret is 7y7y7y", "secret_assignment", "7y7y7y"),
    # Chinese disclosures
    ("我的密码是 hunter2", "zh_password_phrase", "hunter2"),
    ("wifi密码：88886666", "zh_password_phrase", "88886666"),
    ("银行卡密码是一二三四五六", "zh_password_phrase", "一二三四五六"),
    ("我的支付密码是 123456", "zh_password_phrase", "123456"),
    ("验证码 884213，五分钟内有效", "zh_password_phrase", "884213"),
    ("新密码设置成abcd1234", "zh_password_phrase", "abcd1234"),
    ("密码改成 Qwer!234 了", "zh_password_phrase", "Qwer!234"),
    ("我的密码就是abc123", "zh_password_phrase", "abc123"),
    ("门禁口令为 8 8 6 6", "zh_password_phrase", "8 8 6 6"),
    ("PIN码是1234", "zh_password_phrase", "1234"),
    ("API密钥是abcd1234efgh", "zh_password_phrase", "abcd1234efgh"),
    ("我的密码是hunter。", "zh_password_phrase", "hunter"),
    (f"我的API密钥是{SK_KEY}", "sk_api_key", SK_KEY),
    # full-width forms (NFKC)
    ("ｍｙ ｐａｓｓｗｏｒｄ ｉｓ ｈｕｎｔｅｒ２", "password_assignment", "ｈｕｎｔｅｒ２"),
    ("ｐａｓｓｗｏｒｄ：Ｔｒ０ｕｂ", "password_assignment", "Ｔｒ０ｕｂ"),
    ("密码：８８８８６６６６", "zh_password_phrase", "８８８８６６６６"),
    ("ＰＩＮ码是１２３４", "zh_password_phrase", "１２３４"),
    # invisible characters do not hide a keyword
    ("pass\u200bword: hunter22", "password_assignment", "hunter22"),
]

NEGATIVES: list[str] = [
    # everyday English
    "I forgot my password yesterday",
    "remind me to change the password",
    "remind me to change the password to something stronger",
    "the API is slow",
    "my token of appreciation",
    "a token of appreciation is flowers",
    "the password is wrong",
    "my password expired",
    "password is incorrect, try again",
    "password is 8 characters long",
    "the password is at least 12 characters",
    "I changed my password 3 times",
    "Your password must contain 1 digit",
    "my PIN is hard to remember",
    "I need to send my password to Alice",
    "the secret is patience",
    "My secret is that I love pizza",
    "credentials are in the vault",
    "API key is required",
    "my private key is on the usb stick",
    "The token is valid for 3600 seconds",
    "the bearer of bad news",
    "pin it to the top of the chat",
    "the keynote is at 9",
    # everyday Chinese
    "我忘记密码了",
    "密码太难记了",
    "帮我提醒一下改密码",
    "钥匙放在门口",
    "密码是什么",
    "密码是多少来着",
    "密码是2024年改的",
    "密码是wifi的那个",
    "密码学很有意思",
    "令牌桶算法",
    "验证码已发送",
    "我的密码改了三次",
    "验证码是4位数",
    # documentation and code that mention credentials without containing any
    "-----BEGIN RSA PRIVATE KEY----- is the first line of a key file",
    "password = os.environ['DB_PASSWORD']",
    "password: ${DB_PASSWORD}",
    "Set password: <your password>",
    "your password: ********",
    "token: ${{ secrets.GITHUB_TOKEN }}",
    "password = getpass.getpass()",
    "postgres://user:password@localhost/db",
    "https://example.com:8080/path@v2",
    "cache_key = user_profile_settings_for_the_dashboard_v2",
    "commit 8f2a9c1d3e4b5a6f7081928374655647 fixed it",
    "task-management-and-planning-notes",
    "",
]


@pytest.mark.parametrize(("text", "rule", "secret"), POSITIVES)
def test_positive_is_found_with_its_rule(text: str, rule: str, secret: str) -> None:
    finding = find_sensitive_text(text)
    assert finding is not None
    assert finding.rule == rule


@pytest.mark.parametrize("text", NEGATIVES)
def test_ordinary_text_is_not_flagged(text: str) -> None:
    assert find_sensitive_text(text) is None
    assert redact_secrets(text) == text


@pytest.mark.parametrize(("text", "rule", "secret"), POSITIVES)
def test_redaction_removes_the_value_and_keeps_the_words(text: str, rule: str, secret: str) -> None:
    redacted = redact_secrets(text)
    assert secret not in redacted
    assert REDACTED in redacted
    assert find_sensitive_text(redacted) is None
    assert redact_secrets(redacted) == redacted  # idempotent


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("my password is hunter2!", "my password is [REDACTED]"),
        ("我的密码是 hunter2，别告诉别人", "我的密码是 [REDACTED]，别告诉别人"),
        ("wifi密码：88886666 记一下", "wifi密码：[REDACTED] 记一下"),
        ("ｐａｓｓｗｏｒｄ：Ｔｒ０ｕｂ ok", "ｐａｓｓｗｏｒｄ：[REDACTED] ok"),
        (
            "call postgres://admin:s3cretPw@db:5432/app now",
            "call postgres://admin:[REDACTED]@db:5432/app now",
        ),
        (f"before {JWT} after", "before [REDACTED] after"),
        (f"a\n{PEM}\nb", "a\n[REDACTED]\nb"),
        (
            "my password is hunter2 and my pin is 4321, thanks",
            "my password is [REDACTED] and my pin is [REDACTED], thanks",
        ),
        ("API_KEY=abcd1234efgh\nDEBUG=true", "API_KEY=[REDACTED]\nDEBUG=true"),
        ("pass\u200bword: hunter22 bye", "pass\u200bword: [REDACTED] bye"),
        ("nothing to see here", "nothing to see here"),
    ],
)
def test_redaction_is_exact(text: str, expected: str) -> None:
    assert redact_secrets(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("(my password: hunter22)", "(my password: [REDACTED])"),
        ("password: [REDACTED])", "password: [REDACTED])"),
        ("wifi key was Password->", "wifi key was [REDACTED]>"),
        ("password=[REDACTED]] ok", "password=[REDACTED]] ok"),
    ],
)
def test_a_value_that_opens_with_a_marker_is_not_redacted_again(text: str, expected: str) -> None:
    # Its core lost the marker's "]" ("[REDACTED"), was judged a secret, and
    # each redaction round added a "]": "[REDACTED]]]])".
    assert redact_secrets(text) == expected
    assert redact_secrets(expected) == expected
    assert find_sensitive_text(expected) is None


def test_ensure_not_sensitive_raises_with_rule_not_value() -> None:
    with pytest.raises(SensitiveContent) as caught:
        ensure_not_sensitive(text="my password is hunter2!")
    err = caught.value
    assert isinstance(err, PermanentError)
    assert err.reason == "sensitive_content"
    assert err.rule == "password_assignment" and "password or PIN" in str(err)
    assert "hunter2" not in str(err)


def test_ensure_not_sensitive_checks_paths_and_passes_clean_input() -> None:
    with pytest.raises(SensitiveContent) as caught:
        ensure_not_sensitive(text="notes about lunch", path="/home/me/.ssh/id_ed25519")
    assert caught.value.rule == "credential_path"
    assert caught.value.reason == "sensitive_content"
    ensure_not_sensitive(text="notes about lunch", path="notes/lunch.md")
    ensure_not_sensitive(text="我忘记密码了")
    ensure_not_sensitive()


@pytest.mark.parametrize(("text", "rule", "secret"), POSITIVES)
def test_findings_and_errors_never_carry_the_secret(text: str, rule: str, secret: str) -> None:
    finding = find_sensitive_text(text)
    assert finding is not None
    for shown in (finding.rule, finding.description, str(finding), repr(finding)):
        assert secret not in shown
    with pytest.raises(SensitiveContent) as caught:
        ensure_not_sensitive(text=text)
    message = str(caught.value)
    assert caught.value.rule == rule and rule not in message  # the kind in words, not the rule's id
    assert secret not in message
    assert text not in message


def test_finding_is_frozen() -> None:
    finding = Finding("jwt", "JSON Web Token")
    with pytest.raises(AttributeError):
        finding.rule = "other"  # type: ignore[misc]


# --------------------------------------------------------------------------
# Paths
# --------------------------------------------------------------------------

SENSITIVE_PATHS = [
    "/home/me/.ssh/id_rsa",
    "/home/me/.ssh/known_hosts",
    "~/.ssh/id_ed25519.pub",  # anything under .ssh
    "/home/me/.gnupg/pubring.kbx",
    "C:\\Users\\me\\.aws\\credentials",
    "~/.kube/config",
    "~/.docker/config.json",
    "/home/me/.netrc",
    "C:\\Users\\me\\_netrc",
    "~/.pgpass",
    "~/.npmrc",
    "~/.pypirc",
    "~/.git-credentials",
    "project/.env",
    "project/.env.production",
    "project/.envrc",
    "keys/id_rsa",
    "keys/id_ed25519",
    "keys/id_ecdsa",
    "keys/id_dsa",
    "backup\\id_rsa.old",
    "certs/server.pem",
    "certs/server.key",
    "certs/client.p12",
    "certs/client.pfx",
    "android/release.keystore",
    "java/trust.jks",
    "vault/Passwords.kdbx",
    "infra/terraform.tfstate",
    "gcp/credentials.json",
    "credentials",
    "k8s/secrets.yaml",
    "k8s/secrets.yml",
    "app/secrets.json",
    "notes/my_passwords.txt",
    "notes/PASSWORD-list.csv",
    "笔记/银行密码.txt",
    "/etc/shadow",
    "ＩＤ＿ＲＳＡ",  # full-width
    "id_rsa.",  # Windows drops the trailing dot
]
SAFE_PATHS = [
    "keys/id_rsa.pub",
    "keys/id_ed25519_work.pub",
    "/srv/app/config.yaml",
    "notes/meeting.md",
    "/home/me/.envoy/routes.yaml",
    "/home/me/env/bin/python",
    "docs/secretary-notes.docx",
    "README.md",
    "C:\\Users\\me\\Documents\\report.docx",
    "",
]


@pytest.mark.parametrize("path", SENSITIVE_PATHS)
def test_sensitive_paths(path: str) -> None:
    finding = find_sensitive_path(path)
    assert finding is not None
    assert finding.rule == "credential_path"
    with pytest.raises(SensitiveContent):
        ensure_not_sensitive(path=path)


@pytest.mark.parametrize("path", SAFE_PATHS)
def test_safe_paths(path: str) -> None:
    assert find_sensitive_path(path) is None
    ensure_not_sensitive(path=path)


def test_path_with_inline_credentials_uses_the_token_rule() -> None:
    finding = find_sensitive_path("https://me:s3cretPw@files.example.com/report.pdf")
    assert finding is not None and finding.rule == "url_credentials"
    assert "s3cretPw" not in str(finding)


# --------------------------------------------------------------------------
# Robustness
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "password is " * 20000,
        "密码是" * 50000,
        "-----BEGIN RSA PRIVATE KEY-----" * 5000,
        "http://" + "a:" * 50000,
        "secret_key_" * 20000 + "=",
        "password for " + "x " * 50000,
        "ｐａｓｓｗｏｒｄ　" * 5000,
        base64.b64encode(bytes(range(256)) * 500).decode(),
    ],
)
def test_large_adversarial_inputs_stay_fast(text: str) -> None:
    # CPU time of this thread, not wall time: backtracking costs CPU, load elsewhere does not.
    started = time.thread_time()
    find_sensitive_text(text)
    redact_secrets(text)
    assert time.thread_time() - started < 5.0


def test_unterminated_private_key_is_redacted_to_the_end() -> None:
    text = f"oops -----BEGIN OPENSSH PRIVATE KEY-----\n{PEM_BODY}\nmore key material"
    assert find_sensitive_text(text) == Finding("private_key_block", "PEM, OpenSSH or PuTTY private key")
    assert redact_secrets(text) == "oops [REDACTED]"


# --- issue 31, item 7: what the detector let through ---------------------------


@pytest.mark.parametrize(
    ("text", "rule"),
    [
        ("the key is superSecret99", "secret_assignment"),
        ("my ATM code 4821", "one_time_code"),
        ("我的密码就是我家门牌号加生日 19880312", "zh_password_phrase"),
    ],
)
def test_the_misses_of_issue_31_are_refused_and_redacted(text: str, rule: str) -> None:
    found = find_sensitive_text(text)
    assert found is not None and found.rule == rule
    assert text.split()[-1] not in redact_secrets(text)


def test_a_bare_bip39_phrase_is_refused_only_when_its_checksum_holds() -> None:
    from mnemonic import Mnemonic

    from memjobs_client.sensitive.seeds import checksum_ok

    bip39 = Mnemonic("english")
    words = bip39.to_mnemonic(bytes(range(16))).split()
    assert find_sensitive_text(" ".join(words)) == Finding("seed_phrase", "wallet seed or recovery phrase")
    assert find_sensitive_text("okay, " + ", ".join(words) + ". thanks") is not None
    index = {w: i for i, w in enumerate(bip39.wordlist)}
    # The same twelve words but the last, chosen so that the checksum fails: words, not a phrase.
    last = next(w for w in bip39.wordlist if not checksum_ok([index[x] for x in words[:-1]] + [index[w]]))
    assert find_sensitive_text(" ".join([*words[:-1], last])) is None


@pytest.mark.parametrize(
    "document",
    [
        "- 我的银行卡密码是\n- 739164",
        "## Wi-Fi\n- my wifi password is\n  - Tiger2024!",
        "1. my PIN is\n2. 4821",
    ],
)
def test_a_secret_split_over_two_lines_of_a_document_is_found(document: str) -> None:
    assert all(find_sensitive_text(line) is None for line in document.splitlines())
    assert find_sensitive_document(document) is not None


def test_two_facts_on_two_lines_are_not_read_as_one() -> None:
    assert find_sensitive_document("- the model answered using 138591 tokens\n- max_tokens=4759") is None
    assert find_sensitive_document("- reset my password\n- 2024 trip to Japan") is None
