"""Sources and provenance keyed by (owner, source id) (issue 21, finding 1).

Before, a source row was keyed by its id alone: a forget for an id the caller
did not have left a forgotten marker under the caller's owner, and a later
remember of that id by its real owner revived the marker, text and all,
without comparing owners (one owner's text in another's ledger and recall).
Keyed by owner, a row is only ever read or written under its owner's key.

Existing data migrates as it is (ids were unique, so they stay unique per
owner). A row that already shows the bug is repaired: a source whose id is not
the id of its owner and its text (ids are ``src_`` + sha256(owner key ``:``
sha256 of the NFC-normalised, stripped text)[:32], see
``memjobs_client.contracts.source_id_for``) holds another owner's text. It is
forgotten (text cleared), its memories are tombstoned (the next extraction
deletes them) and the sources that shared them are learned again.
"""

import hashlib
import unicodedata

import sqlalchemy as sa
from alembic import op

revision = "0006_owner_keyed_ledger"
down_revision = "0005_failed_sources"
branch_labels = None
depends_on = None


def _source_id(owner_key: str, text: str) -> str:
    """``source_id_for`` as of this revision (a migration keeps its own copy)."""
    content = hashlib.sha256(unicodedata.normalize("NFC", text).strip().encode("utf-8", "surrogatepass")).hexdigest()
    return "src_" + hashlib.sha256(f"{owner_key}:{content}".encode()).hexdigest()[:32]


def _repair_crossed_rows() -> None:
    """Forget the rows that hold another owner's text (see the module's docstring)."""
    conn = op.get_bind()
    rows = conn.execute(sa.text("SELECT source_id, owner_key, text FROM sources WHERE text IS NOT NULL")).all()
    crossed = [(r.owner_key, r.source_id) for r in rows if _source_id(r.owner_key, r.text) != r.source_id]
    for owner_key, source_id in crossed:
        keys = {"owner_key": owner_key, "source_id": source_id}
        memories = [
            r.memory_id
            for r in conn.execute(
                sa.text("SELECT memory_id FROM provenance WHERE owner_key = :owner_key AND source_id = :source_id"),
                keys,
            ).all()
        ]
        if memories:
            ids = {"owner_key": owner_key, "memories": memories}
            conn.execute(
                sa.text(
                    "UPDATE sources SET state = 'pending', learned_at = NULL, updated_at = now() "
                    "WHERE owner_key = :owner_key AND state = 'learned' AND source_id IN ("
                    "  SELECT source_id FROM provenance WHERE owner_key = :owner_key "
                    "  AND memory_id = ANY(CAST(:memories AS text[])))"
                ),
                ids,
            )
            conn.execute(
                sa.text(
                    "DELETE FROM provenance WHERE owner_key = :owner_key AND memory_id = ANY(CAST(:memories AS text[]))"
                ),
                ids,
            )
            conn.execute(
                sa.text(
                    "INSERT INTO tombstones (memory_id, owner_key, created_at) "
                    "SELECT m, :owner_key, now() FROM unnest(CAST(:memories AS text[])) AS m "
                    "ON CONFLICT DO NOTHING"
                ),
                ids,
            )
        conn.execute(
            sa.text(
                "UPDATE sources SET state = 'forgotten', text = NULL, learned_at = NULL, reason = NULL, "
                "forgotten_at = now(), updated_at = now() "
                "WHERE owner_key = :owner_key AND source_id = :source_id"
            ),
            keys,
        )


def upgrade() -> None:
    op.drop_constraint("provenance_source_id_fkey", "provenance", type_="foreignkey")
    op.drop_constraint("provenance_pkey", "provenance", type_="primary")
    op.drop_constraint("sources_pkey", "sources", type_="primary")
    op.create_primary_key("sources_pkey", "sources", ["owner_key", "source_id"])
    op.create_primary_key("provenance_pkey", "provenance", ["owner_key", "memory_id", "source_id"])
    op.create_foreign_key(
        "provenance_source_fkey", "provenance", "sources", ["owner_key", "source_id"], ["owner_key", "source_id"]
    )
    op.drop_index("provenance_source", table_name="provenance")
    op.drop_index("provenance_owner", table_name="provenance")
    op.create_index("provenance_source", "provenance", ["owner_key", "source_id"])
    _repair_crossed_rows()


def downgrade() -> None:
    # An id kept by two owners cannot be keyed by id alone: the forgotten markers
    # (no text, nothing derived from them) give way; two live rows stop the downgrade.
    op.execute("""
        DELETE FROM sources s USING sources o
        WHERE s.source_id = o.source_id AND s.owner_key <> o.owner_key
          AND s.state = 'forgotten' AND s.text IS NULL
          AND NOT EXISTS (SELECT 1 FROM provenance p
                          WHERE p.owner_key = s.owner_key AND p.source_id = s.source_id)
    """)
    op.drop_index("provenance_source", table_name="provenance")
    op.drop_constraint("provenance_source_fkey", "provenance", type_="foreignkey")
    op.drop_constraint("provenance_pkey", "provenance", type_="primary")
    op.drop_constraint("sources_pkey", "sources", type_="primary")
    op.create_primary_key("sources_pkey", "sources", ["source_id"])
    op.create_primary_key("provenance_pkey", "provenance", ["memory_id", "source_id"])
    op.create_foreign_key("provenance_source_id_fkey", "provenance", "sources", ["source_id"], ["source_id"])
    op.create_index("provenance_source", "provenance", ["source_id"])
    op.create_index("provenance_owner", "provenance", ["owner_key"])
