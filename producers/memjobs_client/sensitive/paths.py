"""Path rules: file and directory names that hold credentials.

What: ``~/.ssh``, ``.env`` files, ``id_rsa``, ``*.pem``, ``credentials.json``,
``/etc/shadow``, names that mention a password or secret, ...  A path that
embeds a token shape (``https://user:pass@host/...``, an ``sk-`` key) is
refused by that token's content rule.

System files are refused too, by their absolute location: the account and
host databases under ``/etc`` (``passwd``, ``shadow``, ``sudoers``, ...),
``/etc/ssh`` and ``/etc/ssl/private``, and the kernel's views ``/proc``,
``/sys`` and ``/dev``: a document folder never legitimately holds them, and
they describe the machine, not the user.
"""

from __future__ import annotations

import re

from memjobs_client.sensitive.content import TEXT_RULES
from memjobs_client.sensitive.normalize import nfkc
from memjobs_client.sensitive.rules import Finding, scan_first

PATH_RULE = "credential_path"
"""The rule id of every :func:`find_sensitive_path` match on the path's shape."""

_PATH_SPLIT = re.compile(r"[\\/]+")
_CREDENTIAL_DIRS = {name: f"{name} directory" for name in (".ssh", ".gnupg", ".aws", ".kube", ".docker")}
_CREDENTIAL_DIRS[".password-store"] = "pass password store"
_CREDENTIAL_FILES = {
    ".netrc": "netrc file",
    "_netrc": "netrc file",
    ".pgpass": "PostgreSQL password file",
    ".npmrc": "npm config with tokens",
    ".pypirc": "PyPI config with tokens",
    ".git-credentials": "git credential store",
    ".htpasswd": "htpasswd file",
    ".envrc": "direnv environment file",
}
_KEY_EXTENSIONS = (
    ".pem",
    ".key",
    ".p12",
    ".pfx",
    ".p8",
    ".ppk",
    ".keystore",
    ".jks",
    ".kdbx",
    ".keychain",
    ".keychain-db",
    ".tfstate",
    ".tfstate.backup",
)
_SSH_KEY_NAME = re.compile(r"id_(?:rsa|dsa|ecdsa|ed25519)(?:_sk)?(?:[._\-].*)?")
_SECRET_NAME_PARTS = ("password", "secret", "密码", "密碼", "密钥", "私钥")
#: Files under /etc that describe accounts, privileges or the host's secrets.
_ETC_FILES = frozenset(
    {
        "passwd",
        "passwd-",
        "shadow",
        "shadow-",
        "gshadow",
        "gshadow-",
        "group",
        "group-",
        "sudoers",
        "master.passwd",
        "security",
        "krb5.keytab",
        "machine-id",
        "crypttab",
    }
)
#: Directories whose every member is a system file.
_SYSTEM_TREES = (
    ("etc", "ssh"),
    ("etc", "ssl", "private"),
    ("etc", "sudoers.d"),
    ("proc",),
    ("sys",),
    ("dev",),
    ("run", "secrets"),
)


def _path_component_finding(name: str, parent: str) -> str | None:
    """The description of why one lower-cased path component is sensitive."""
    if name in _CREDENTIAL_DIRS:
        return _CREDENTIAL_DIRS[name]
    if name in _CREDENTIAL_FILES:
        return _CREDENTIAL_FILES[name]
    if name == ".env" or name.startswith(".env.") or name.endswith(".env"):
        return "environment file"
    if _SSH_KEY_NAME.fullmatch(name) and not name.endswith(".pub"):
        return "SSH private key file"
    if name.endswith(_KEY_EXTENSIONS):
        return "key, certificate, keystore or state file"
    stem = name.split(".", 1)[0]
    if stem in {"credential", "credentials"} or stem.endswith(("_credentials", "-credentials")):
        return "credentials file"
    if name in {"shadow", "gshadow"} and parent == "etc":
        return "system password hashes"
    if any(part in name.replace("secretar", "") for part in _SECRET_NAME_PARTS):
        return "name mentions a password or secret"
    return None


def find_sensitive_path(path: str) -> Finding | None:
    """Why ``path`` (POSIX or Windows style) names a credential file, or ``None``.

    Path-shape matches have rule ``credential_path``; a path that embeds a
    token shape (``https://user:pass@host/...``, an ``sk-`` key) gets that
    token's rule.
    """
    if not path:
        return None
    normalised = nfkc(path)
    system = _system_path_finding(normalised)
    if system is not None:
        return Finding(PATH_RULE, system)
    parent = ""
    for part in _PATH_SPLIT.split(normalised):
        # Windows ignores trailing dots and spaces: "id_rsa." is "id_rsa".
        name = part.strip().rstrip(". ").lower()
        if not name:
            continue
        description = _path_component_finding(name, parent)
        if description is not None:
            return Finding(PATH_RULE, description)
        parent = name
    return scan_first(normalised, tuple(r for r in TEXT_RULES if r.shape))


def _system_path_finding(path: str) -> str | None:
    """Why an absolute POSIX ``path`` is a system file, or None (relative paths: None)."""
    if not path.startswith("/"):
        return None
    parts = [p.strip().lower() for p in _PATH_SPLIT.split(path) if p.strip() not in ("", ".")]
    if ".." in parts:
        return None  # not normalised: the caller checks the resolved path as well
    for tree in _SYSTEM_TREES:
        if tuple(parts[: len(tree)]) == tree:
            return "system directory /" + "/".join(tree)
    if len(parts) == 2 and parts[0] == "etc" and parts[1] in _ETC_FILES:
        return "system account or host file"
    return None
