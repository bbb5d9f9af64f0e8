"""The public surface: what ``producers`` and ``workers`` export, what importing
``producers`` costs a gateway, and the error tree both sides share."""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys

import pytest

import memjobs_client
import memjobs_worker
from memjobs_client import errors
from memjobs_client.errors import MemjobsError, PermanentError, TransientError
from tests.support.harness import REPO

PRODUCERS_API = {
    "ForgetOutcome",
    "MemjobsClient",
    "SessionBlackboard",
    "SCHEMA_VERSION",
    "ExtractFacts",
    "ForgetSource",
    "RememberSource",
    "owner_key",
    "source_id_for",
    "ensure_not_sensitive",
    "find_sensitive_path",
    "find_sensitive_text",
    "BackendUnavailable",
    "ConfigurationError",
    "FeatureOff",
    "InvalidPayload",
    "KnowledgeOff",
    "LockLost",
    "MemjobsError",
    "MemoryOff",
    "ModelUnavailable",
    "RedisFull",
    "PermanentError",
    "SensitiveContent",
    "StaleFencingToken",
    "TransientError",
}
WORKERS_API = {
    "Runtime",
    "Settings",
    "load_settings",
    "ExtractionScheduler",
    "MemoryPipeline",
    "RecallHit",
    "sweep",
    "LeaseLock",
}

# As producers/errors.py's docstring draws the tree.
TRANSIENT = {"BackendUnavailable", "ModelUnavailable", "LockLost"}
PERMANENT = {"InvalidPayload", "SensitiveContent", "FeatureOff", "StaleFencingToken", "ConfigurationError"}
#: Each feature-off error is a FeatureOff; knowledge off is also a ConfigurationError.
FEATURE_OFF = {"MemoryOff": (errors.FeatureOff,), "KnowledgeOff": (errors.FeatureOff, errors.ConfigurationError)}
HEAVY = ("mem0", "openai", "sqlalchemy", "psycopg", "psycopg_pool", "alembic", "memjobs_worker")


def _error_classes() -> dict[str, type[BaseException]]:
    """Every exception class defined in memjobs_client.errors."""
    return {
        name: obj
        for name, obj in vars(errors).items()
        if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == errors.__name__
    }


def test_importing_producers_pulls_in_no_engine_model_or_database_library() -> None:
    code = "import json, sys, memjobs_client; print(json.dumps(sorted(sys.modules)))"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    loaded = json.loads(done.stdout)
    assert "memjobs_client" in loaded  # the probe did import it
    heavy = sorted(m for m in loaded if m.split(".")[0] in HEAVY)
    assert heavy == []


def test_producers_all_lists_exactly_the_public_api() -> None:
    assert len(memjobs_client.__all__) == len(set(memjobs_client.__all__))
    assert set(memjobs_client.__all__) == PRODUCERS_API


def test_every_name_in_producers_all_exists() -> None:
    missing = [name for name in memjobs_client.__all__ if not hasattr(memjobs_client, name)]
    assert missing == []


def test_workers_all_lists_exactly_the_public_api() -> None:
    assert len(memjobs_worker.__all__) == len(set(memjobs_worker.__all__))
    assert set(memjobs_worker.__all__) == WORKERS_API


def test_every_name_in_workers_all_exists() -> None:
    missing = [name for name in memjobs_worker.__all__ if not hasattr(memjobs_worker, name)]
    assert missing == []


def test_producers_exports_every_error_class() -> None:
    classes = _error_classes()
    assert {name for name in classes} <= set(memjobs_client.__all__)
    assert all(getattr(memjobs_client, name) is cls for name, cls in classes.items())


def test_error_module_defines_exactly_the_documented_tree() -> None:
    assert set(_error_classes()) == {
        "MemjobsError",
        "TransientError",
        "PermanentError",
        *TRANSIENT,
        *PERMANENT,
        *FEATURE_OFF,
        "RedisFull",
    }


def test_redis_full_is_a_backend_unavailable() -> None:
    # A gateway that retries BackendUnavailable retries a full Redis the same way.
    assert errors.RedisFull.__bases__ == (errors.BackendUnavailable,)
    assert errors.RedisFull("full").reason == "redis_full"


@pytest.mark.parametrize("name", sorted(set(_error_classes()) - {"MemjobsError"}))
def test_every_error_class_derives_from_memjobs_error(name: str) -> None:
    assert issubclass(getattr(errors, name), MemjobsError)


@pytest.mark.parametrize("name", sorted(TRANSIENT))
def test_transient_errors_derive_from_transient_error_only(name: str) -> None:
    cls = getattr(errors, name)
    assert cls.__bases__ == (TransientError,)
    assert not issubclass(cls, PermanentError)


@pytest.mark.parametrize("name", sorted(PERMANENT))
def test_permanent_errors_derive_from_permanent_error_only(name: str) -> None:
    cls = getattr(errors, name)
    assert cls.__bases__ == (PermanentError,)
    assert not issubclass(cls, TransientError)


@pytest.mark.parametrize("name", sorted(FEATURE_OFF))
def test_feature_off_errors_derive_from_feature_off_and_say_their_own_message(name: str) -> None:
    cls = getattr(errors, name)
    assert cls.__bases__ == FEATURE_OFF[name]
    assert not issubclass(cls, TransientError)
    assert str(cls()) == cls.message and "=off" in cls.message and cls().reason == cls.reason


def test_transient_and_permanent_are_the_two_branches_of_the_root() -> None:
    assert TransientError.__bases__ == (MemjobsError,)
    assert PermanentError.__bases__ == (MemjobsError,)
    assert MemjobsError.__bases__ == (Exception,)


def test_every_error_has_its_own_machine_readable_reason() -> None:
    leaves = sorted(TRANSIENT | PERMANENT | set(FEATURE_OFF))
    reasons = {name: getattr(errors, name).reason for name in leaves}
    assert all(r and r.replace("_", "").isalpha() and r.islower() for r in reasons.values()), reasons
    assert len(set(reasons.values())) == len(leaves), reasons


def test_an_error_reason_can_be_given_per_instance() -> None:
    err = errors.InvalidPayload("bad owner", reason="owner_missing")
    assert (str(err), err.reason, errors.InvalidPayload.reason) == ("bad owner", "owner_missing", "invalid_payload")
