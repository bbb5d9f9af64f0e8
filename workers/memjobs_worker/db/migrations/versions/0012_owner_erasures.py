"""What an owner's erasure leaves behind: counts, never an owner (issue 35, item 1).

One row per ``memjobs erase`` run (or ``DELETE /v1/owners``): when it started
and finished, and how many records each store dropped, as JSON. No owner id,
no owner key, no text: the row proves that an erasure happened and how large
it was, and cannot say whose.
"""

import sqlalchemy as sa
from alembic import op

revision = "0012_owner_erasures"
down_revision = "0011_session_blackboard"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "owner_erasures",
        sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True)),
        sa.Column("counts", sa.JSON, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("owner_erasures")
