"""Session-end digest: a topic and a gist of at most 50 characters, from the light model.

What: :func:`digest_session` asks the model for ``{"topic": ..., "gist": ...}``
from a session's transcript and enforces the limits on whatever comes back.
The run bookkeeping (once per session) is in :mod:`memjobs_worker.sessions.jobs`.

Why the limits are enforced here and not trusted to the prompt: a model asked
for "at most 50 characters" often writes 70. The users speak Chinese, so the
limit counts characters (code points after NFC), never bytes. A gist that is
too long is cut where a phrase ends (:mod:`~memjobs_worker.sessions.gist`); when
the text has no such place within the limit the model is asked once more for a
shorter one.

Secrets: the transcript is redacted before it is sent; the returned topic and
gist (and the frozen task goals) are redacted again before they are stored.
"""

from __future__ import annotations

from dataclasses import dataclass

from memjobs_client.contracts import DigestSession, TaskRef
from memjobs_client.sensitive import redact_secrets
from memjobs_worker.model_client import ChatModel
from memjobs_worker.sessions.gist import cut, normalise_spaces
from memjobs_worker.sessions.prompting import (
    ModelOutputInvalid,
    ask_json,
    parse_json_object,
    render_transcript,
)

#: Default caps, in characters (not bytes).
MAX_GIST_CHARS = 50
MAX_TOPIC_CHARS = 40

SYSTEM_PROMPT = (
    "You summarise one finished conversation between a user and a voice assistant. "
    'Answer with one JSON object only: {{"topic": "...", "gist": "..."}}. '
    "topic: what the conversation was about, at most {topic} characters. "
    "gist: the one thing worth remembering about it, at most {gist} characters. "
    "Write both in the language the user spoke. Never repeat passwords, keys, codes "
    "or other secrets; the text marks removed secrets as [REDACTED]."
)
_SHAPE = '{"topic": "...", "gist": "..."}'


@dataclass(frozen=True)
class Digest:
    """What is kept of a session: topic, gist and the goals of the tasks dispatched."""

    topic: str
    gist: str
    task_goals: list[TaskRef]


def digest_session(
    model: ChatModel,
    payload: DigestSession,
    *,
    max_gist_chars: int = MAX_GIST_CHARS,
    max_topic_chars: int = MAX_TOPIC_CHARS,
) -> Digest:
    """Ask the model for the session's topic and gist and enforce their limits.

    Task goals are copied from the payload (goals only, never a status), redacted.

    Raises:
        ModelUnavailable: the model service failed (from the model client).
        ModelOutputInvalid: two replies in a row were not JSON with non-empty
            string ``topic`` and ``gist``.
    """
    messages = [
        {"role": "system", "content": SYSTEM_PROMPT.format(topic=max_topic_chars, gist=max_gist_chars)},
        {"role": "user", "content": render_transcript(payload.transcript)},
    ]
    topic, gist = ask_json(model, messages, parse_digest, shape=_SHAPE)
    topic, gist = redact_secrets(topic), redact_secrets(gist)
    if len(normalise_spaces(gist)) > max_gist_chars and cut(gist, max_gist_chars) is None:
        gist = _shorter(model, messages, gist, max_gist_chars)
    return Digest(
        topic=_fit(topic, max_topic_chars),
        gist=_fit(gist, max_gist_chars),
        task_goals=[TaskRef(task_id=t.task_id, goal=redact_secrets(t.goal)) for t in payload.tasks],
    )


def parse_digest(reply: str) -> tuple[str, str]:
    """``(topic, gist)`` from the reply; names what was wrong, never the reply text.

    Raises:
        ModelOutputInvalid: not a JSON object with non-empty strings ``topic`` and ``gist``.
    """
    data = parse_json_object(reply)
    fields = []
    for name in ("topic", "gist"):
        value = data.get(name)
        if not isinstance(value, str) or not value.strip():
            raise ModelOutputInvalid(f"the digest reply has no non-empty string {name!r}")
        fields.append(value)
    return fields[0], fields[1]


def _shorter(model: ChatModel, messages: list[dict[str, str]], gist: str, limit: int) -> str:
    """Ask once more for a gist within ``limit`` characters; keep the first if this fails."""
    again = [
        *messages,
        {
            "role": "user",
            "content": f"The gist must be at most {limit} characters; it had "
            f"{len(normalise_spaces(gist))}. Answer again in the same JSON shape "
            f"with a shorter gist: {_SHAPE}",
        },
    ]
    try:
        _, shorter = ask_json(model, again, parse_digest, shape=_SHAPE, attempts=1)
    except ModelOutputInvalid:
        return gist
    return redact_secrets(shorter)


def _fit(text: str, limit: int) -> str:
    """Whitespace collapsed, cut at a phrase or word boundary when over ``limit``."""
    return cut(text, limit) or cut(text, limit, force=True) or ""
