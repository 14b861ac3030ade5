"""A MariaDB source as one side of a verify: canonical text only (core.verify_canonical)."""
from __future__ import annotations

from tideline.core.table_shape import TableShape
from tideline.core.verify_canonical import MariaDbDialect
from tideline.core.verify_side import VerifySide


class MariaDbSide(VerifySide):
    fingerprints = ("canonical",)

    def canonical_dialect(self, shape: TableShape, schema: str) -> MariaDbDialect:
        return MariaDbDialect(shape, schema, self.conn.escape)
