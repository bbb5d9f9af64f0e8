"""Session-end digest: a topic and a gist of at most 50 characters, from the light model.

What: :func:`digest_session` asks the model for ``{"topic": ..., "gist": ...}``
from a session's transcript and enforces the limits on whatever comes back;
:func:`run_digest` is the whole job (idempotent per session) for the actor.

Why the limits are enforced here and not trusted to the prompt: a model asked
for "at most 50 characters" often writes 70. The users speak Chinese, so the
limit counts characters (code points after NFC), never bytes.

Secrets: the transcript passes through :func:`~memjobs_client.sensitive.redact_secrets`
before it is sent, so secrets never reach the model server; the returned topic
and gist (and the frozen task goals) are redacted again before they are stored.

Errors added here (the tree is in :mod:`memjobs_client.errors`)::

    TransientError
    └── ModelOutputInvalid   the model's reply is not the JSON asked for
                             (reason ``model_output_invalid``): a later attempt
                             may do better; after the retries Dramatiq dead-letters it
"""

from __future__ import annotations

import json
import unicodedata
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, Protocol

from memjobs_client.contracts import DigestSession, TaskRef
from memjobs_client.errors import TransientError
from memjobs_client.sensitive import redact_secrets
from memjobs_worker.sessions.store import SessionStore

#: Default caps, in characters (not bytes).
MAX_GIST_CHARS = 50
MAX_TOPIC_CHARS = 40

_SYSTEM_PROMPT = (
    "You summarise one finished conversation between a user and a voice assistant. "
    'Answer with one JSON object only: {{"topic": "...", "gist": "..."}}. '
    "topic: what the conversation was about, at most {topic} characters. "
    "gist: the one thing worth remembering about it, at most {gist} characters. "
    "Write both in the language the user spoke. Never repeat passwords, keys, codes "
    "or other secrets; the text marks removed secrets as [REDACTED]."
)

# Characters that belong to the character before them: cutting just before one
# would split what a reader sees as one character.
_JOINERS = {"\u200d", "\u20e3"}


class TextModel(Protocol):
    """What the digest needs of a model: :class:`memjobs_worker.model_client.ChatModel`'s call shape."""

    def generate_response(self, messages: list[dict[str, str]],
                          response_format: Any = None) -> str: ...


class ModelOutputInvalid(TransientError):
    """The model's reply was not the JSON object asked for; retried, then dead-lettered."""

    reason = "model_output_invalid"


@dataclass(frozen=True)
class Digest:
    """What is kept of a session: topic, gist and the goals of the tasks dispatched."""

    topic: str
    gist: str
    task_goals: list[TaskRef]


def digest_session(model: TextModel, payload: DigestSession, *,
                   max_gist_chars: int = MAX_GIST_CHARS,
                   max_topic_chars: int = MAX_TOPIC_CHARS) -> Digest:
    """Ask the model for the session's topic and gist and enforce their limits.

    The gist is cut to ``max_gist_chars`` characters and the topic to
    ``max_topic_chars`` (whitespace collapsed, cut at a character boundary).
    Task goals are copied from the payload (goals only, never a status).

    Raises:
        ModelUnavailable: the model service failed (from the model client).
        ModelOutputInvalid: the reply is not JSON with non-empty string
            ``topic`` and ``gist``.
    """
    transcript = "\n".join(f"{turn.role}: {redact_secrets(turn.text)}" for turn in payload.transcript)
    messages = [
        {"role": "system",
         "content": _SYSTEM_PROMPT.format(topic=max_topic_chars, gist=max_gist_chars)},
        {"role": "user", "content": transcript},
    ]
    reply = model.generate_response(messages, response_format={"type": "json_object"})
    topic, gist = _parse(reply)
    return Digest(
        topic=_clip(redact_secrets(topic), max_topic_chars),
        gist=_clip(redact_secrets(gist), max_gist_chars),
        task_goals=[TaskRef(task_id=t.task_id, goal=redact_secrets(t.goal)) for t in payload.tasks],
    )


def run_digest(store: SessionStore, model: TextModel, payload: DigestSession,
               now: datetime | None = None) -> Literal["duplicate", "stored"]:
    """The digest job: once per session, even when the message is delivered again.

    Returns ``"duplicate"`` (no model call) when the session's digest run already
    finished, ``"stored"`` otherwise. A run that fails leaves its record
    ``running``, so the retry runs again. ``now`` dates the digest (default: the
    store's clock).
    """
    if not store.claim_run(payload.owner_key, payload.session_id, "digest"):
        return "duplicate"
    digest = digest_session(model, payload)
    store.save_digest(payload.owner_key, payload.session_id, digest.topic, digest.gist,
                      digest.task_goals, now=now)
    store.finish_run(payload.owner_key, payload.session_id, "digest")
    return "stored"


def _parse(reply: str) -> tuple[str, str]:
    """``(topic, gist)`` from the reply; names what was wrong, never the reply text."""
    text = reply.strip()
    if text.startswith("```"):  # a fenced block despite the JSON response format
        text = text.strip("`").removeprefix("json").strip()
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ModelOutputInvalid("the digest reply is not JSON") from exc
    if not isinstance(data, dict):
        raise ModelOutputInvalid("the digest reply is not a JSON object")
    fields = []
    for name in ("topic", "gist"):
        value = data.get(name)
        if not isinstance(value, str) or not value.strip():
            raise ModelOutputInvalid(f"the digest reply has no non-empty string {name!r}")
        fields.append(value)
    return fields[0], fields[1]


def _clip(text: str, max_chars: int) -> str:
    """``text`` normalised (NFC, whitespace collapsed) and cut to ``max_chars`` characters.

    The cut never leaves a combining mark, variation selector or joiner without
    the character it belongs to.
    """
    text = " ".join(unicodedata.normalize("NFC", text).split())
    if len(text) <= max_chars:
        return text
    cut = max_chars
    while cut > 0 and (_continues(text[cut]) or text[cut - 1] in _JOINERS):
        cut -= 1
    return text[:cut].rstrip()


def _continues(char: str) -> bool:
    """Whether ``char`` attaches to the character before it."""
    return (unicodedata.combining(char) != 0 or char in _JOINERS
            or "\ufe00" <= char <= "\ufe0f" or "\U0001f3fb" <= char <= "\U0001f3ff")
