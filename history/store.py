"""The run store of ``diagnose --record DB``: an SQLite file (standard library) that each recorded run is
appended to, and that ``diagnose history DB`` reads back.

Tables: ``runs`` (one row a run: the point's numbers, per-step times as JSON text), ``items`` (one row per op
and per finding of a run: its time per step) and ``schema_version`` (one row). A store written by an older
xladiag is migrated forward on open (``MIGRATIONS``: the SQL that takes version i to i + 1); one written by a
newer xladiag is refused, never half-read.
"""

from __future__ import annotations

import json
import sqlite3
from datetime import datetime, timezone
from pathlib import Path

from ..errors import InputError

MIGRATIONS = [
    """
    CREATE TABLE runs (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        recorded_at TEXT NOT NULL, label TEXT NOT NULL, input_kind TEXT NOT NULL, run TEXT, run_time TEXT,
        tool_version TEXT, platform TEXT, chip TEXT, step_s REAL, mfu REAL, per_step_s TEXT NOT NULL,
        headline TEXT NOT NULL);
    CREATE TABLE items (
        run_id INTEGER NOT NULL REFERENCES runs(id), kind TEXT NOT NULL CHECK (kind IN ('op', 'finding')),
        key TEXT NOT NULL, s_per_step REAL NOT NULL, title TEXT, severity TEXT);
    CREATE INDEX items_run ON items(run_id);
    """,
]
STORE_VERSION = len(MIGRATIONS)
_RUN_FIELDS = ("label", "input_kind", "run", "run_time", "tool_version", "platform", "chip", "step_s", "mfu",
               "headline")
_SQLITE_MAGIC = b"SQLite format 3\x00"


def is_store(path: Path) -> bool:
    """A file that begins as every SQLite database does."""
    try:
        with open(path, "rb") as f:
            return f.read(len(_SQLITE_MAGIC)) == _SQLITE_MAGIC
    except OSError:
        return False


def _version(db: sqlite3.Connection) -> int:
    if db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'").fetchone() is None:
        return 0 if db.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] == 0 else -1
    row = db.execute("SELECT version FROM schema_version").fetchone()
    return -1 if row is None else int(row[0])


def open_store(path: Path, *, create: bool) -> sqlite3.Connection:
    """The store at ``path``, migrated to this version (created when ``create`` and absent)."""
    path = Path(path)
    if not path.exists() and not create:
        raise InputError(f"{path}: no such file or directory")
    if path.exists() and path.stat().st_size > 0 and not is_store(path):
        raise InputError(f"{path}: not an xladiag run store (not an SQLite file)")
    try:
        db = sqlite3.connect(path)
        version = _version(db)
    except sqlite3.Error as exc:
        raise InputError(f"{path}: not an xladiag run store ({exc})") from None
    if version < 0:
        db.close()
        raise InputError(f"{path}: schema_version: not an xladiag run store (no version row)")
    if version > STORE_VERSION:
        db.close()
        raise InputError(f"{path}: schema_version: store version {version} is newer than this xladiag's "
                         f"({STORE_VERSION}): upgrade xladiag")
    for step in range(version, STORE_VERSION):  # each step whole or not at all
        first = "CREATE TABLE schema_version (version INTEGER NOT NULL); INSERT INTO schema_version VALUES (0);" \
            if step == 0 else ""
        try:
            db.executescript(f"BEGIN; {first} {MIGRATIONS[step]} UPDATE schema_version SET version = {step + 1}; "
                             "COMMIT;")
        except sqlite3.Error as exc:
            db.rollback()
            db.close()
            raise InputError(f"{path}: schema_version: migrating the store to version {step + 1} failed ({exc})") \
                from None
    return db


def check_store(path: Path) -> None:
    """Refuse, before any work, a file at ``path`` that is not a store this xladiag can append to."""
    if Path(path).exists():
        open_store(path, create=False).close()


def record(path: Path, point: dict, *, recorded_at: str | None = None) -> int:
    """Append ``point`` (series.point_of) to the store at ``path``; returns its run id."""
    recorded_at = recorded_at or datetime.now(timezone.utc).isoformat(timespec="seconds")
    db = open_store(path, create=True)
    try:
        with db:
            cur = db.execute(f"INSERT INTO runs (recorded_at, per_step_s, {', '.join(_RUN_FIELDS)}) "
                             f"VALUES (?, ?, {', '.join('?' * len(_RUN_FIELDS))})",
                             (recorded_at, json.dumps(point["per_step_s"]), *(point[f] for f in _RUN_FIELDS)))
            run_id = cur.lastrowid
            db.executemany("INSERT INTO items (run_id, kind, key, s_per_step) VALUES (?, 'op', ?, ?)",
                           [(run_id, key, s) for key, s in point["ops"].items()])
            db.executemany("INSERT INTO items VALUES (?, 'finding', ?, ?, ?, ?)",
                           [(run_id, key, f["s_per_step"], f["title"], f["severity"])
                            for key, f in point["findings"].items()])
    except sqlite3.Error as exc:  # a damaged file, tables changed by hand, a full disk: nothing appended
        raise InputError(f"{path}: runs: cannot append to this run store ({exc})") from None
    finally:
        db.close()
    return run_id


def load(path: Path) -> list[dict]:
    """Every recorded run's point, in the order recorded (``recorded_at`` and ``input_kind`` as recorded)."""
    db = open_store(path, create=False)
    try:
        runs = db.execute(f"SELECT id, recorded_at, per_step_s, {', '.join(_RUN_FIELDS)} FROM runs "
                          "ORDER BY id").fetchall()
        items = db.execute("SELECT run_id, kind, key, s_per_step, title, severity FROM items ORDER BY rowid").fetchall()
    except sqlite3.Error as exc:  # a damaged file, or tables changed by hand
        raise InputError(f"{path}: runs: not readable as an xladiag run store ({exc})") from None
    finally:
        db.close()
    points = {}
    for run_id, recorded_at, per_step, *fields in runs:
        points[run_id] = {**dict(zip(_RUN_FIELDS, fields)), "recorded_at": recorded_at,
                          "per_step_s": [float(s) for s in json.loads(per_step)], "ops": {}, "findings": {}}
    for run_id, kind, key, seconds, title, severity in items:
        if kind == "op":
            points[run_id]["ops"][key] = seconds
        else:
            points[run_id]["findings"][key] = {"title": title, "severity": severity, "s_per_step": seconds}
    return list(points.values())
