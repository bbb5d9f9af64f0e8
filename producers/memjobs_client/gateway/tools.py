"""The front model's memory tools, ready to register, and their dispatcher.

What: :data:`TOOL_DEFINITIONS` (the same JSON as the TypeScript client's
``MEMORY_TOOLS``; a test keeps them equal) and :class:`MemoryTools`, which
checks a call's arguments against them, runs it on a :class:`ToolBackend` and
answers a JSON-ready dict:

- ``memory``: one atomic operation per call: ``read`` a document, ``append``
  Markdown, ``replace`` the document's unique ``old_text`` (empty ``new_text``
  deletes);
- ``recall``: session digests (topic, gist) and the tasks dispatched, each
  with its status read live;
- ``memory__recall``: the user's learned personal memories closest to a query.

Answers are ``{"ok": True, …, "trust": "user_data", "notice": …}`` or
``{"ok": False, "error", "message"}`` with ``error`` in :data:`TOOL_ERRORS`
(the seeds' ``not_found``, ``ambiguous``, ``forbidden_document``,
``sensitive_content``, and ``invalid_arguments``, ``unavailable``). What comes
from memory is labelled as the user's data, never instructions; no message
quotes the caller's input.

Why a backend: the gateway's tools call memjobs over HTTP
(:class:`HttpToolBackend`); the personal-memory MCP server runs the same
tools on the workers' own services. One set of schemas, checks and errors.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Protocol

from memjobs_client.gateway.http import ApiError, GatewayApi
from memjobs_client.gateway.provider import MemjobsMemoryProvider
from memjobs_client.gateway.schemas import (
    DOC_NAMES,
    SEED_ERRORS,
    TOOL_DEFINITIONS,
    USER_DATA_NOTICE,
)

_BY_NAME = {t["name"]: t for t in TOOL_DEFINITIONS}

SAID = {
    "not_found": "old_text occurs nowhere in the document; read it and quote it exactly",
    "ambiguous": "old_text occurs more than once; quote more of the line",
    "forbidden_document": "only USER.md and MEMORY.md can be read or changed",
    "sensitive_content": "it looks like a password, key or other secret; nothing was stored or searched",
}


class ToolRefusal(Exception):
    """What a backend raises: ``reason`` is a seed error, ``validation``, or an outage's reason."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class ToolBackend(Protocol):
    """What the tools run on; every method raises :class:`ToolRefusal` for a refusal."""

    def read(self, owner_id: str, doc: str) -> Mapping[str, Any]:
        """``{doc, content, version}``."""

    def edit(self, owner_id: str, edit: dict[str, Any], context: dict[str, Any]) -> Mapping[str, Any]:
        """One edit: ``{applied, reason, version, documents}`` (the written documents)."""

    def recall(self, owner_id: str, query: str, limit: int) -> list[Mapping[str, Any]]:
        """Learned memories: ``[{text, score}]``."""

    def sessions(self, owner_id: str, days: int, limit: int) -> list[Mapping[str, Any]]:
        """Digests: ``[{session_id, created_at, topic, gist, tasks: [{task_id, goal, status}]}]``."""


def failure(error: str, message: str, **extra: Any) -> dict[str, Any]:
    return {"ok": False, "error": error, "message": message, **extra}


def refusal(reason: str) -> dict[str, Any]:
    """A backend's refusal as the tools' error (outages as ``unavailable``, with the cause)."""
    if reason in SEED_ERRORS:
        return failure(reason, SAID[reason])
    if reason == "validation":
        return failure("invalid_arguments", "memjobs refused the arguments (empty, or over a length limit)")
    return failure("unavailable", "personal memory did not answer; try again later", cause=reason)


def check_arguments(name: str, args: object) -> dict[str, Any]:
    """``{"ok": True, "value": …}``, or the ``invalid_arguments`` failure naming the field."""
    tool = _BY_NAME.get(name) if isinstance(name, str) else None
    if tool is None:
        return failure("invalid_arguments", f"no such tool: {str(name)[:64]}")
    value: object = {} if args is None else args
    if isinstance(value, str | bytes):
        try:
            value = json.loads(value) if value.strip() else {}
        except ValueError:
            return failure("invalid_arguments", "the arguments are not JSON")
    if not isinstance(value, dict):
        return failure("invalid_arguments", "the arguments must be an object")
    # A null is an argument left out (models in strict mode send one for each optional argument).
    value = {k: v for k, v in value.items() if v is not None}
    properties: dict[str, dict[str, Any]] = tool["parameters"]["properties"]
    for key in value:
        if key not in properties:
            return failure("invalid_arguments", f"unknown argument: {str(key)[:64]}")
    for key in tool["parameters"].get("required", []):
        if value.get(key) is None:
            return failure("invalid_arguments", f"{key} is required")
    for key, spec in properties.items():
        problem = _field_problem(key, spec, value.get(key))
        if problem is not None:
            return failure("invalid_arguments", problem)
    problem = _memory_op_problem(value) if name == "memory" else None
    if problem is not None:
        return failure("invalid_arguments", problem)
    return {"ok": True, "value": value}


def _field_problem(key: str, spec: dict[str, Any], v: object) -> str | None:
    """What is wrong with argument ``key``'s value ``v`` by its schema ``spec``, or None."""
    if v is None:
        return None
    if spec["type"] == "string":
        if not isinstance(v, str):
            return f"{key} must be a string"
        if "enum" in spec and v not in spec["enum"]:
            return f"{key} must be one of {', '.join(spec['enum'])}"
        if len(v.strip()) < spec.get("minLength", 0):
            return f"{key} must not be empty"
        if len(v) > spec.get("maxLength", len(v)):
            return f"{key}: at most {spec['maxLength']} characters"
    elif spec["type"] == "integer":
        if not isinstance(v, int) or isinstance(v, bool):
            return f"{key} must be an integer"
        if not spec["minimum"] <= v <= spec["maximum"]:
            return f"{key}: {spec['minimum']} to {spec['maximum']}"
    return None


def _memory_op_problem(value: dict[str, Any]) -> str | None:
    """What is wrong with the memory tool's texts for its ``op``, or None."""
    allowed = {"read": (), "append": ("text",), "replace": ("old_text", "new_text")}[value["op"]]
    wrong = next((k for k in ("text", "old_text", "new_text") if value.get(k) is not None and k not in allowed), None)
    if wrong is not None:
        return f"{wrong} does not go with op {value['op']}"
    if value["op"] == "append" and value.get("text") is None:
        return "append needs text"
    if value["op"] == "replace" and value.get("old_text") is None:
        return "replace needs old_text"
    return None


class MemoryTools:
    """Runs the tools for an owner the caller names (the gateway's, never the model's).

    Parameters:
        backend: where the tools run (:class:`HttpToolBackend`, or the workers' services).
        source: ``context.source`` of the tool's edits when the caller names none.
    """

    definitions = TOOL_DEFINITIONS

    def __init__(self, backend: ToolBackend, *, source: str = "memory_tool") -> None:
        self.backend = backend
        self.source = source

    def dispatch(
        self, name: str, args: object, *, owner_id: str, context: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """One tool call; a refusal is an ``{"ok": False, …}`` answer, never an exception.

        Raises:
            ValueError: no ``owner_id`` (the caller's mistake, not the model's).
        """
        if not isinstance(owner_id, str) or not owner_id:
            raise ValueError("dispatch needs the gateway's owner_id")
        checked = check_arguments(name, args)
        if not checked["ok"]:
            return checked
        a: dict[str, Any] = checked["value"]
        try:
            if name == "recall":
                return self._sessions(owner_id, a)
            if name == "memory__recall":
                found = self.backend.recall(owner_id, a["query"], a.get("limit") or 5)
                return {
                    "ok": True,
                    "trust": "user_data",
                    "notice": USER_DATA_NOTICE,
                    "memories": [{"text": m["text"], "score": m.get("score")} for m in found],
                }
            if a["doc"] not in DOC_NAMES:
                return refusal("forbidden_document")
            if a["op"] == "read":
                d = self.backend.read(owner_id, a["doc"])
                return {
                    "ok": True,
                    "op": "read",
                    "doc": d["doc"],
                    "version": d["version"],
                    "content": d["content"],
                    "trust": "user_data",
                    "notice": USER_DATA_NOTICE,
                }
            return self._edit(owner_id, a, context)
        except ToolRefusal as exc:
            return refusal(exc.reason)

    def _edit(self, owner_id: str, a: dict[str, Any], context: Mapping[str, Any] | None) -> dict[str, Any]:
        edit = (
            {"op": "append", "doc": a["doc"], "text": a["text"]}
            if a["op"] == "append"
            else {"op": "replace", "doc": a["doc"], "old_text": a["old_text"], "new_text": a.get("new_text") or ""}
        )
        ctx = {**(context or {}), "source": (context or {}).get("source") or self.source}
        done = self.backend.edit(owner_id, edit, ctx)
        out: dict[str, Any] = {
            "ok": True,
            "op": a["op"],
            "doc": a["doc"],
            "applied": bool(done.get("applied")),
            "version": done.get("version"),
        }
        if done.get("reason"):
            out["reason"] = done["reason"]  # "duplicate": already there, nothing changed
        written = next((d for d in done.get("documents") or [] if d["doc"] == a["doc"]), None)
        if written is not None:
            out.update(content=written["content"], trust="user_data", notice=USER_DATA_NOTICE)
        return out

    def _sessions(self, owner_id: str, a: dict[str, Any]) -> dict[str, Any]:
        found = self.backend.sessions(owner_id, a.get("days") or 7, a.get("limit") or 10)
        return {
            "ok": True,
            "trust": "user_data",
            "notice": USER_DATA_NOTICE,
            "sessions": [
                {
                    "session_id": s["session_id"],
                    "date": str(s["created_at"]),
                    "topic": s["topic"],
                    "gist": s["gist"],
                    "tasks": [{"task_id": t["task_id"], "goal": t["goal"], "status": t["status"]} for t in s["tasks"]],
                }
                for s in found
            ],
        }


class HttpToolBackend:
    """The tools on memjobs' HTTP API; writes go through ``provider`` when given (its
    cache then lists them at once)."""

    def __init__(self, api: GatewayApi, provider: MemjobsMemoryProvider | None = None) -> None:
        self.api = api
        self.provider = provider

    def read(self, owner_id: str, doc: str) -> Mapping[str, Any]:
        with _refusals():
            return self.api.memory_document(owner_id, doc)

    def edit(self, owner_id: str, edit: dict[str, Any], context: dict[str, Any]) -> Mapping[str, Any]:
        with _refusals():
            if self.provider is not None:
                result = self.provider.apply(owner_id, [edit], context)
            else:
                result = self.api.edit_memory(owner_id, [edit], context)
        first = (result.get("edits") or [{}])[0]
        return {
            "applied": first.get("applied", True),
            "reason": first.get("reason"),
            "version": first.get("version"),
            "documents": result.get("documents") or [],
        }

    def recall(self, owner_id: str, query: str, limit: int) -> list[Mapping[str, Any]]:
        with _refusals():
            return list(self.api.recall(owner_id, query, limit)["memories"])

    def sessions(self, owner_id: str, days: int, limit: int) -> list[Mapping[str, Any]]:
        with _refusals():
            return list(self.api.sessions(owner_id, days, limit)["sessions"])


class _refusals:
    """Turn an :class:`ApiError` into a :class:`ToolRefusal` of its reason."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, exc: BaseException | None, tb: object) -> None:
        if isinstance(exc, ApiError):
            raise ToolRefusal(exc.reason) from None
