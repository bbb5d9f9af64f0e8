"""Settings for tests, named as the environment names them.

Tests say ``make_settings(api_port=0, knowledge="on")``: each keyword is a
setting's environment variable without ``MEMJOBS_``, lower-cased (the names
inherited from the voice assistant by the short names below), so a test reads
like the environment it stands for, and overrides pass through fixtures
(``api_factory(**overrides)``) without knowing the sections. :func:`build`
sorts them into :class:`~memjobs_worker.settings.Settings`' sections.
"""

from __future__ import annotations

from typing import Any

from memjobs_worker.settings import Settings, setting_keys

#: The inherited names, by the short names the tests use.
INHERITED = {
    "memory_provider": "NOVA_AUDIO_AGENT_MEMORY_PROVIDER",
    "memory_base_url": "QWEN_AUDIO_MEMORY_BASE_URL",
    "memory_model": "QWEN_AUDIO_MEMORY_MODEL",
    "memory_api_key": "QWEN_AUDIO_MEMORY_API_KEY",
    "dashscope_api_key": "DASHSCOPE_API_KEY",
    "memory_auto": "QWEN_AUDIO_MEMORY_AUTO",
    "session_digest": "QWEN_AUDIO_SESSION_DIGEST",
    "blackboard_path": "NOVA_AUDIO_AGENT_BLACKBOARD_PATH",
    "blackboard_owner_id": "NOVA_AUDIO_AGENT_BLACKBOARD_OWNER_ID",
}


def key_of(name: str) -> str:
    """The setting (``section.field``) a test's keyword names.

    Raises:
        KeyError: no setting has that name (a typo in a test fails loudly).
    """
    env = INHERITED.get(name, f"MEMJOBS_{name.upper()}")
    by_env = {variable: key for key, variable in setting_keys().items()}
    return by_env[env]


def sections(**flat: Any) -> dict[str, Any]:
    """``flat`` keywords as :class:`Settings` keywords: ``data_dir`` and a mapping per section."""
    out: dict[str, Any] = {}
    for name, value in flat.items():
        key = key_of(name)
        if key == "data_dir":
            out["data_dir"] = value
            continue
        section, _, field = key.partition(".")
        out.setdefault(section, {})[field] = value
    return out


def build(**flat: Any) -> Settings:
    """Settings from the environment with ``flat`` in place (each section reads the rest)."""
    return Settings(**sections(**flat))
