"""How a payload is judged, the same way at both ends: text checks and the errors.

What: the field checks the contracts use (:func:`valid_text`: real text, no
NUL; :func:`refuse_sensitive`, :func:`refuse_sensitive_path`: the credential
check; :func:`redact`: blank secrets out of a field that may keep its words),
and :func:`validate`, which turns pydantic's verdict into a memjobs error:
:class:`SensitiveContent` when a field carries a credential (anywhere in the
payload, even one that fails for another reason), else
:class:`InvalidPayload`, with the first few problems and a count.

Why here: the producer (``MemjobsClient``) and the worker (``parse`` in the
actors) call the same :func:`validate` on the same models, so a payload is
refused at either end with the same words, and a message written into Redis
by hand meets every check the producer would have made.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Annotated, Any, TypeVar

from pydantic import AfterValidator, BaseModel, BeforeValidator, ValidationError
from pydantic_core import PydanticCustomError

from memjobs_client.errors import InvalidPayload, SensitiveContent
from memjobs_client.sensitive import REDACTED, find_sensitive_path, find_sensitive_text, redact_secrets
from memjobs_client.sensitive.rules import Finding

M = TypeVar("M", bound=BaseModel)

#: Problems named in an error message; the rest are counted.
MAX_PROBLEMS_SHOWN = 5
#: Characters of text walked when looking for a secret in a payload refused for
#: another reason (bounded: a huge refused payload must still fail fast; a
#: secret beyond this in a crafted message may reach the dead-letter queue).
_MAX_SCANNED_CHARS = 64 * 1024
_SHOWN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,39}")


def text_problem(value: str) -> str | None:
    """Why ``value`` is not storable text (a lone surrogate, a NUL), or None."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"not valid text: a lone surrogate at position {exc.start}"
    position = value.find("\x00")
    if position >= 0:
        return f"not valid text: a NUL character at position {position}"
    return None


def valid_text(value: str) -> str:
    """Pass real text through; refuse lone surrogates and NUL characters."""
    problem = text_problem(value)
    if problem is not None:
        raise PydanticCustomError("invalid_text", problem)
    return value


def _valid_if_text(value: Any) -> Any:
    """Before type checks: a string that is not real text gets its own message."""
    return valid_text(value) if isinstance(value, str) else value


def _sensitive(finding: Finding) -> PydanticCustomError:
    """The refusal in the caller's terms: what kind of credential, never the
    value; the detector rule travels in the error's context (``rule``)."""
    return PydanticCustomError(
        "sensitive_content",
        "refused: it looks like a credential ({description}); it was not stored or sent to a model",
        {"rule": finding.rule, "description": finding.description},
    )


def refuse_sensitive(value: str) -> str:
    """Refuse text that looks like a credential (its kind named, value never shown)."""
    finding = find_sensitive_text(value)
    if finding is not None:
        raise _sensitive(finding)
    return value


def refuse_sensitive_path(value: str) -> str:
    """Refuse a path that names a credential file or embeds a credential."""
    finding = find_sensitive_path(value) or find_sensitive_text(value)
    if finding is not None:
        raise _sensitive(finding)
    return value


def redact(value: str) -> str:
    """Blank the secrets out of text that keeps its words (a task's goal);
    text still refused after redaction is blanked whole."""
    redacted = redact_secrets(value)
    return redacted if find_sensitive_text(redacted) is None else REDACTED


#: Real text: no lone surrogate, no NUL.
Text = Annotated[str, BeforeValidator(_valid_if_text)]
#: Real text that carries no credential: ids, a remembered text, a document's text and title.
SafeText = Annotated[str, BeforeValidator(_valid_if_text), AfterValidator(refuse_sensitive)]
#: A path that names no credential file and embeds no credential.
SafePath = Annotated[str, BeforeValidator(_valid_if_text), AfterValidator(refuse_sensitive_path)]
#: Real text whose secrets are blanked out (the words stay): a task's goal.
RedactedText = Annotated[str, BeforeValidator(_valid_if_text), AfterValidator(redact)]


def refuse_large_transcript(data: Any, limit: int, max_turns: int) -> Any:
    """``data`` unchanged, unless its transcript's turns hold more than ``limit``
    UTF-8 bytes of text (a wrong type or too many turns is left to the fields)."""
    turns = data.get("transcript") if isinstance(data, Mapping) else None
    if not isinstance(turns, list | tuple) or len(turns) > max_turns:
        return data
    size = 0
    for turn in turns:
        text = turn.get("text") if isinstance(turn, Mapping) else getattr(turn, "text", None)
        if isinstance(text, str):
            size += len(text.encode("utf-8", "surrogatepass"))
    if size > limit:
        raise PydanticCustomError(
            "too_large", "transcript: {size} bytes, over the limit of {limit} bytes", {"size": size, "limit": limit}
        )
    return data


def _shown_loc(loc: tuple[int | str, ...]) -> str:
    """A field path for a message: unknown keys are named only when short
    identifiers that carry no credential (a key can be the secret itself)."""
    parts = []
    for part in loc:
        text = str(part)
        if isinstance(part, str) and (_SHOWN_KEY.fullmatch(text) is None or find_sensitive_text(text)):
            text = "<key>"
        parts.append(text)
    return ".".join(parts) or "payload"


def _strings(value: Any, depth: int = 0) -> Iterator[str]:
    """Every string in ``value`` (keys included), to a bounded depth."""
    if depth > 12:
        return
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from _strings(key, depth + 1)
            yield from _strings(item, depth + 1)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _strings(item, depth + 1)


def carried_secret(data: Any) -> Finding | None:
    """The first credential found in any string of ``data`` (bounded work), or None."""
    budget = _MAX_SCANNED_CHARS
    for text in _strings(data):
        if budget <= 0:
            return None
        chunk = text[:budget]
        budget -= len(chunk)
        if text_problem(chunk) is None:
            finding = find_sensitive_text(chunk)
            if finding is not None:
                return finding
    return None


def payload_error(name: str, exc: ValidationError, data: Any) -> InvalidPayload | SensitiveContent:
    """The memjobs error for a refused payload: the first few problems, then a
    count, each said by its field path (the caller's terms: never the payload
    model's class, ``name``, nor a detector rule's id, which is on the error).

    A credential anywhere in the payload makes it :class:`SensitiveContent`
    (reason ``sensitive_content``), so that the worker acknowledges the
    message instead of keeping it in the dead-letter queue.
    """
    problems = exc.errors(include_input=False, include_url=False, include_context=True)
    # A list whose items failed is also "too short" once they are left out:
    # say only what is wrong with the items.
    failed_items = {p["loc"][:i] for p in problems for i in range(1, len(p["loc"]))}
    problems = [p for p in problems if not (p["type"] == "too_short" and p["loc"] in failed_items)]
    sensitive = [p for p in problems if p["type"] == "sensitive_content"]
    chosen = sensitive or problems
    shown = "; ".join(f"{_shown_loc(p['loc'])}: {p['msg']}" for p in chosen[:MAX_PROBLEMS_SHOWN])
    if len(chosen) > MAX_PROBLEMS_SHOWN:
        shown += f"; and {len(chosen) - MAX_PROBLEMS_SHOWN} more problem(s)"
    if sensitive:
        rule = (sensitive[0].get("ctx") or {}).get("rule")
        return SensitiveContent(shown, rule=rule if isinstance(rule, str) else None)
    finding = carried_secret(data)
    if finding is not None:
        return SensitiveContent(
            f"refused: a field carries what looks like a credential ({finding.description}); "
            "it was not stored or sent to a model",
            rule=finding.rule,
        )
    return InvalidPayload(shown)


def as_list(model: str, field: str, value: Any, limit: int) -> list[Any]:
    """``value`` as a list: a list or tuple of at most ``limit`` items, nothing else
    (a string would be taken for its characters, ``None`` for nothing).

    Raises:
        InvalidPayload: saying which field, and what it got.
    """
    if isinstance(value, str | bytes | bytearray | Mapping) or not isinstance(value, Sequence):
        raise InvalidPayload(f"{field}: must be a list, not {type(value).__name__}")
    if len(value) > limit:
        raise InvalidPayload(f"{field}: {len(value)} items, over the limit of {limit}")
    return list(value)


def _check_list_sizes(model: type[BaseModel], data: Mapping[Any, Any]) -> None:
    """Refuse an over-long list field before its items are validated one by one
    (a million wrong turns would otherwise cost a million complaints)."""
    for name, field in model.model_fields.items():
        value = data.get(name)
        if not isinstance(value, list | tuple):
            continue
        limit = next((m.max_length for m in field.metadata if isinstance(getattr(m, "max_length", None), int)), None)
        if limit is not None and len(value) > limit:
            raise InvalidPayload(f"{name}: {len(value)} items, over the limit of {limit}")


def validate(model: type[M], data: Any, context: Any = None) -> M:
    """``data`` validated against ``model`` under ``context`` (the source rules).

    Raises:
        SensitiveContent: a field carries a credential.
        InvalidPayload: anything else that does not fit, with the first few problems.
    """
    if not isinstance(data, Mapping):
        raise InvalidPayload(f"payload: expected an object, not {type(data).__name__}")
    _check_list_sizes(model, data)
    try:
        return model.model_validate(dict(data), context=context)
    except ValidationError as exc:
        raise payload_error(model.__name__, exc, data) from None
