"""Where reference rows come from: a SQLite/D1 database file, a ``wrangler d1 export`` SQL dump, or Postgres.

A source only lists tables and columns and yields rows as dicts; which tables and columns exist tells the
reader which schema version it is looking at (older databases lack later columns and tables).
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_LEADING_COMMENTS = re.compile(r"^(\s*--[^\n]*\n)+")
_D1_INTERNAL = re.compile(
    r"^(?:CREATE\s+TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?|INSERT\s+INTO\s+|DELETE\s+FROM\s+)[\"'`\[]?_cf_",
    re.IGNORECASE,
)
_CREATE_SEQUENCE = re.compile(r"^CREATE\s+TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?[\"'`\[]?sqlite_sequence\b", re.IGNORECASE)


def _statements(text: str) -> Iterator[str]:
    """Complete SQL statements of a dump, in order (string literals may span lines)."""
    current = ""
    for line in text.splitlines(keepends=True):
        current += line
        if sqlite3.complete_statement(current):
            if current.strip():
                yield current.strip()
            current = ""
    if current.strip():
        yield current.strip()


class SourceError(Exception):
    """The source cannot be opened or read (the message never contains credentials)."""


def _ident(name: str) -> str:
    if not _IDENT.match(name):
        raise SourceError(f"unexpected identifier {name!r}")
    return f'"{name}"'


class Source(Protocol):
    label: str

    def tables(self) -> set[str]: ...

    def columns(self, table: str) -> set[str]: ...

    def rows(
        self, table: str, *, where: Mapping[str, Any] | None = None, order_by: Sequence[str] = ()
    ) -> Iterator[dict[str, Any]]: ...

    def sequence(self, table: str) -> int | None: ...

    def max_id(self, table: str) -> int: ...

    def close(self) -> None: ...


class _SqlSource:
    """Shared SELECT building for DB-API connections (``placeholder`` differs between drivers)."""

    placeholder = "?"
    label = ""

    def __init__(self) -> None:
        self._columns: dict[str, set[str]] = {}

    def _cursor(self) -> Any:
        raise NotImplementedError

    def columns(self, table: str) -> set[str]:
        raise NotImplementedError

    def max_id(self, table: str) -> int:
        cursor = self._cursor()
        try:
            cursor.execute(f"SELECT MAX(id) FROM {_ident(table)}", [])  # noqa: S608 (validated identifier)
            row = cursor.fetchone()
        finally:
            cursor.close()
        return int(row[0]) if row and row[0] is not None else 0

    def rows(
        self, table: str, *, where: Mapping[str, Any] | None = None, order_by: Sequence[str] = ()
    ) -> Iterator[dict[str, Any]]:
        sql = f"SELECT * FROM {_ident(table)}"  # noqa: S608 (identifiers are validated, values bound)
        params: list[Any] = []
        if where:
            sql += " WHERE " + " AND ".join(f"{_ident(k)} = {self.placeholder}" for k in where)
            params = list(where.values())
        present = self.columns(table)
        order = [c for c in order_by if c in present]
        if order:
            sql += " ORDER BY " + ", ".join(_ident(c) for c in order)
        cursor = self._cursor()
        try:
            cursor.execute(sql, params)
            names = [d[0] for d in cursor.description]
            while True:
                batch = cursor.fetchmany(500)
                if not batch:
                    return
                for row in batch:
                    yield dict(zip(names, row, strict=True))
        finally:
            cursor.close()


class SqliteSource(_SqlSource):
    """A D1/SQLite database file (opened read-only) or a SQL dump loaded into memory."""

    def __init__(self, connection: sqlite3.Connection, label: str) -> None:
        super().__init__()
        self.conn = connection
        self.label = label

    @classmethod
    def open(cls, path: Path) -> SqliteSource:
        if not path.is_file():
            raise SourceError(f"{path}: no such file")
        with path.open("rb") as handle:
            header = handle.read(16)
        if header.startswith(b"SQLite format 3"):
            conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
            return cls(conn, f"SQLite database {path.name}")
        return cls.from_dump(path.read_text(encoding="utf-8"), f"SQL dump {path.name}")

    @classmethod
    def from_dump(cls, text: str, label: str = "SQL dump") -> SqliteSource:
        """``wrangler d1 export --output db.sql`` (or any SQLite ``.dump``), loaded into an in-memory database.

        Tolerates what such dumps are known to contain: tables created after their INSERTs (all CREATE TABLE
        statements run first), ``BEGIN``/``COMMIT``, an explicit ``CREATE TABLE sqlite_sequence`` and D1's
        internal ``_cf_*`` tables (both skipped)."""
        conn = sqlite3.connect(":memory:")
        creates: list[str] = []
        others: list[str] = []
        for statement in _statements(text):
            head = _LEADING_COMMENTS.sub("", statement).lstrip()
            if head.upper().startswith(("BEGIN", "COMMIT", "END TRANSACTION")):
                continue
            if _D1_INTERNAL.match(head) or _CREATE_SEQUENCE.match(head):
                continue  # D1's own tables; sqlite_sequence exists as soon as an AUTOINCREMENT table does
            (creates if head.upper().startswith("CREATE TABLE") else others).append(statement)
        try:
            for statement in creates + others:
                conn.execute(statement)
            conn.commit()
        except sqlite3.Error as exc:
            conn.close()
            raise SourceError(f"{label}: not a SQLite SQL dump ({exc})") from None
        return cls(conn, label)

    def _cursor(self) -> Any:
        return self.conn.cursor()

    def tables(self) -> set[str]:
        rows = self.conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
        return {r[0] for r in rows}

    def columns(self, table: str) -> set[str]:
        if table not in self._columns:
            self._columns[table] = {r[1] for r in self.conn.execute(f"PRAGMA table_info({_ident(table)})")}
        return self._columns[table]

    def sequence(self, table: str) -> int | None:
        """The AUTOINCREMENT high-water mark: ids above every id ever handed out (deleted rows included)."""
        if "sqlite_sequence" not in self.tables():
            return None
        row = self.conn.execute("SELECT seq FROM sqlite_sequence WHERE name = ?", (table,)).fetchone()
        return int(row[0]) if row and row[0] is not None else None

    def close(self) -> None:
        self.conn.close()


class PostgresSource(_SqlSource):
    """The reference's ``pg``/``neon`` adapters' database, by connection URL (``psycopg``, an optional extra)."""

    placeholder = "%s"

    def __init__(self, connection: Any, label: str = "Postgres") -> None:
        super().__init__()
        self.conn = connection
        self.label = label
        self._cursors = 0

    @classmethod
    def connect(cls, url: str, connect: Callable[[str], Any] | None = None) -> PostgresSource:
        if connect is None:
            try:
                import psycopg  # optional: only this source needs it
            except ImportError:
                raise SourceError(
                    "reading Postgres needs the `postgres` extra: "
                    "uv sync --extra postgres (or pip install 'psycopg[binary]')"
                ) from None
            connect = psycopg.connect
        try:
            conn = connect(url)
        except Exception as exc:  # the driver's message can echo the URL (with its password): keep the type only
            raise SourceError(f"cannot connect to Postgres ({type(exc).__name__})") from None
        return cls(conn, "Postgres")

    def _cursor(self) -> Any:
        """A server-side (named) cursor: rows stream in batches instead of the whole table in memory."""
        self._cursors += 1
        return self.conn.cursor(name=f"amsg_import_{self._cursors}")

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        cursor = self.conn.cursor()
        try:
            cursor.execute(sql, list(params))
            return list(cursor.fetchall())
        finally:
            cursor.close()

    def tables(self) -> set[str]:
        rows = self._query("SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()")
        return {r[0] for r in rows}

    def columns(self, table: str) -> set[str]:
        if table not in self._columns:
            rows = self._query(
                "SELECT column_name FROM information_schema.columns "
                "WHERE table_schema = current_schema() AND table_name = %s",
                (table,),
            )
            self._columns[table] = {r[0] for r in rows}
        return self._columns[table]

    def sequence(self, table: str) -> int | None:
        """``SERIAL`` keeps its last value in ``<table>_id_seq``; ids above it were never handed out."""
        try:
            rows = self._query(f"SELECT last_value FROM {_ident(table + '_id_seq')}")  # noqa: S608
        except Exception:
            rollback = getattr(self.conn, "rollback", None)
            if callable(rollback):
                rollback()
            return None
        return int(rows[0][0]) if rows and rows[0][0] is not None else None

    def close(self) -> None:
        self.conn.close()


def open_source(spec: str) -> Source:
    """``postgres://…``/``postgresql://…`` → Postgres; a path → SQLite database file or SQL dump."""
    if spec.startswith(("postgres://", "postgresql://")):
        return PostgresSource.connect(spec)
    return SqliteSource.open(Path(spec))
