"""The public surface: what ``producers`` and ``workers`` export, what importing
``producers`` costs a gateway, and the error tree both sides share."""

from __future__ import annotations

import inspect
from types import ModuleType

import pytest

import memjobs_client
import memjobs_worker
from memjobs_client import errors
from memjobs_client.errors import MemjobsError, PermanentError, TransientError
from tests.support.public_api import assert_exported_from_homes, modules_loaded_by_importing, names_of

#: The public names by the module each comes from, but the error classes: all that errors.py defines.
PRODUCERS_HOMES = {
    "blackboard": "SessionBlackboard",
    "client": "ForgetOutcome MemjobsClient",
    "contracts": "SCHEMA_VERSION ExtractFacts ForgetSource RememberSource owner_key source_id_for",
    "sensitive": "ensure_not_sensitive find_sensitive_path find_sensitive_text",
}
WORKERS_HOMES = {
    "runtime": "Runtime",
    "settings": "Settings load_settings",
    "memory.intake": "ExtractionScheduler sweep",
    "memory.pipeline": "MemoryPipeline RecallHit",
    "lease": "LeaseLock",
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


PRODUCERS_API = names_of(PRODUCERS_HOMES) | set(_error_classes())
WORKERS_API = names_of(WORKERS_HOMES)


def test_importing_producers_pulls_in_no_engine_model_or_database_library() -> None:
    loaded = modules_loaded_by_importing("memjobs_client")
    assert "memjobs_client" in loaded  # the probe did import it
    heavy = sorted(m for m in loaded if m.split(".")[0] in HEAVY)
    assert heavy == []


@pytest.mark.parametrize(
    ("package", "api"), [(memjobs_client, PRODUCERS_API), (memjobs_worker, WORKERS_API)], ids=["producers", "workers"]
)
def test_all_lists_exactly_the_public_api(package: ModuleType, api: set[str]) -> None:
    assert len(package.__all__) == len(set(package.__all__))
    assert set(package.__all__) == api


@pytest.mark.parametrize("package", [memjobs_client, memjobs_worker], ids=["producers", "workers"])
def test_every_name_in_all_exists(package: ModuleType) -> None:
    missing = [name for name in package.__all__ if not hasattr(package, name)]
    assert missing == []


@pytest.mark.parametrize(
    ("package", "homes"),
    [(memjobs_client, PRODUCERS_HOMES), (memjobs_worker, WORKERS_HOMES)],
    ids=["producers", "workers"],
)
def test_each_public_name_is_the_object_of_its_home_module(package: ModuleType, homes: dict[str, str]) -> None:
    assert_exported_from_homes(package, homes)


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
