"""``memjobs token issue``: sign a scoped token for the HTTP API (docs/security.md).

The token goes alone to stdout (so ``TOKEN=$(memjobs token issue ...)`` works);
what it allows and when it expires go to stderr. It is signed with
``MEMJOBS_API_TOKEN_KEY``; the API verifies it with that key or, during a
rotation, ``MEMJOBS_API_TOKEN_PREVIOUS_KEY``. Nothing is stored: a token is
valid until it expires, so issue short-lived ones.
"""

from __future__ import annotations

import argparse
import re
import sys
import time

from memjobs_client.errors import ConfigurationError
from memjobs_worker.cli import exits
from memjobs_worker.settings import Settings

_DURATION = re.compile(r"^(\d+)([smhd]?)$")
_UNIT_S = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def duration_s(text: str) -> int:
    """``90``, ``90s``, ``15m``, ``12h``, ``30d`` in seconds.

    Raises:
        argparse.ArgumentTypeError: any other text.
    """
    match = _DURATION.match(text.strip())
    if match is None:
        raise argparse.ArgumentTypeError("a duration such as 3600, 15m, 12h or 30d")
    return int(match.group(1)) * _UNIT_S[match.group(2)]


def token(settings: Settings, args: argparse.Namespace) -> int:
    """Print a new scoped token."""
    from memjobs_worker.http.scoped_tokens import issue

    scopes = [s.strip() for group in args.scope for s in group.split(",") if s.strip()]
    if not scopes:
        raise ConfigurationError("name at least one --scope")
    now = time.time()
    signed = issue(
        settings.api,
        scopes=scopes,
        owners=args.owner or (),
        owner_prefix=args.owner_prefix,
        all_owners=args.all_owners,
        ttl_s=args.ttl,
        subject=args.subject,
        now=now,
    )
    who = (
        "every owner"
        if args.all_owners
        else ", ".join(
            filter(
                None,
                [
                    f"{len(args.owner or ())} named owner(s)" if args.owner else "",
                    "owners starting with the given prefix" if args.owner_prefix else "",
                ],
            )
        )
    )
    expires = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(int(now) + args.ttl))
    print(signed, flush=True)
    print(f"scopes {' '.join(sorted(set(scopes)))} for {who}; expires {expires}", file=sys.stderr)
    return exits.OK


def options(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=["issue"], help="issue: sign a new token")
    p.add_argument(
        "--scope",
        action="append",
        default=[],
        metavar="SCOPE[,SCOPE]",
        help="read, write, forget, session, knowledge, admin (repeat or comma-separate)",
    )
    p.add_argument(
        "--owner", action="append", metavar="OWNER_ID", help="an owner id the token may act for (repeat for several)"
    )
    p.add_argument(
        "--owner-prefix",
        default=None,
        metavar="PREFIX",
        help="every owner id starting with PREFIX (a tenant, e.g. acme:)",
    )
    p.add_argument("--all-owners", action="store_true", help="every owner (an operator's token)")
    p.add_argument("--ttl", type=duration_s, default=3600, help="lifetime: seconds, or 15m, 12h, 30d (default 1h)")
    p.add_argument("--subject", default="", help="whom the token is for (a label, not an owner)")
