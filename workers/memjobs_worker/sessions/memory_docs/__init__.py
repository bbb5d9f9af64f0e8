"""Markdown memory (USER.md, MEMORY.md): the memory service and its providers.

The memory service is the only writer of an owner's documents; the provider
behind it is chosen once, at the entry point, with :func:`load_provider`.
See DESIGN.md, "Markdown memory".
"""

from memjobs_worker.sessions.memory_docs.audit import AuditEntry, AuditTrail
from memjobs_worker.sessions.memory_docs.files import MarkdownFileProvider
from memjobs_worker.sessions.memory_docs.loader import check_provider, load_provider
from memjobs_worker.sessions.memory_docs.normalise import normalise_documents
from memjobs_worker.sessions.memory_docs.outcomes import Edit, EditOutcome, OpResult
from memjobs_worker.sessions.memory_docs.patches import REASONS, Reason
from memjobs_worker.sessions.memory_docs.protocol import (
    DOC_MEMORY,
    DOC_USER,
    MEMORY_PROVIDER_PROTOCOL_VERSION,
    PROTOCOL_VERSION,
    WRITABLE_DOCS,
    ApplyResult,
    Change,
    ChangeContext,
    Document,
    Health,
    ListOptions,
    MemoryProvider,
    OwnerKey,
    ProviderInfo,
    Scope,
    VersionConflict,
    storage_key,
)
from memjobs_worker.sessions.memory_docs.service import MemoryService
from memjobs_worker.sessions.memory_docs.sql import SqlMemoryProvider

__all__ = [
    # the service
    "MemoryService",
    "OpResult",
    "Edit",
    "EditOutcome",
    "REASONS",
    "Reason",
    # the provider protocol
    "PROTOCOL_VERSION",
    "MEMORY_PROVIDER_PROTOCOL_VERSION",
    "MemoryProvider",
    "ProviderInfo",
    "Document",
    "Change",
    "ChangeContext",
    "ListOptions",
    "OwnerKey",
    "storage_key",
    "ApplyResult",
    "Health",
    "Scope",
    "VersionConflict",
    "normalise_documents",
    "DOC_USER",
    "DOC_MEMORY",
    "WRITABLE_DOCS",
    # built-in providers and the choice of one
    "MarkdownFileProvider",
    "SqlMemoryProvider",
    "load_provider",
    "check_provider",
    # the audit
    "AuditTrail",
    "AuditEntry",
]
