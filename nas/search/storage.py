"""Where a study lives: Optuna storages (journal file, RDB, Redis), opening a study and checking its
settings, and failing the trials that dead processes left running."""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import random
import re
import socket
import time
import warnings
from pathlib import Path
from typing import Any

import optuna
from filelock import FileLock
from optuna.storages import JournalStorage, RDBStorage
from optuna.storages.journal import JournalFileBackend, JournalRedisBackend
from optuna.trial import TrialState

from nas._io import hide_passwords, lock_path, pid_alive
from nas.search.journal import JournalFileLock, check_journal

__all__ = ["STUDY_ATTR", "SCHEMA_VERSION", "check_storage", "fail_stale_trials", "journal_file", "journal_storage",
           "lost_storage", "make_storage",
           "open_study", "rdb_storage", "redact_url", "storage_description"]

log = logging.getLogger(__name__)

STUDY_ATTR = "hwnas"  # study user attribute holding the settings that define the study
SCHEMA_VERSION = 1


def make_storage(spec: str | None, *, run_dir: str | Path) -> tuple[optuna.storages.BaseStorage, str]:
    """The Optuna storage ``spec`` names, and a description for the user.

    ``None``: a journal file ``<run_dir>/study.journal``.  A URL: ``redis://`` -> journal on Redis;
    ``postgresql://``, ``mysql://``, ``sqlite:///`` ... -> RDB storage (with a heartbeat, so a dead
    worker's trial is failed and redone).  Anything else is a journal file path (on a shared disk
    for many machines).
    """
    if not spec:
        return journal_storage(Path(run_dir) / "study.journal")
    if "://" in spec:
        if spec.startswith("redis"):
            check_storage(spec)
            with warnings.catch_warnings():  # Optuna 5.0 marks the Redis journal backend experimental
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                return JournalStorage(JournalRedisBackend(spec)), redact_url(spec)
        return rdb_storage(spec)
    p = Path(spec).expanduser()
    if p.suffix in (".db", ".sqlite", ".sqlite3"):
        raise ValueError(f"storage={spec!r} looks like a SQLite file: write sqlite:///{spec} for SQLite, or use a "
                         f"journal file (storage=<path>.journal), which is safe under parallel workers")
    if p.is_dir():
        raise ValueError(f"storage={spec!r} is a folder; give a journal file path (e.g. {p / 'study.journal'}) "
                         f"or a storage URL")
    return journal_storage(p)


def journal_file(spec: str | None, *, run_dir: str | Path) -> Path | None:
    """The journal file ``make_storage(spec)`` would open, without opening it; None for a storage URL."""
    if not spec:
        return Path(run_dir) / "study.journal"
    if "://" in spec:
        return None
    return Path(spec).expanduser()


def check_storage(spec: str | None) -> None:
    """Refuse a storage whose client library is not installed, before anything is loaded or opened:
    ``redis://`` needs redis-py.  (A database URL's driver is checked when it is opened: ``rdb_storage``.)

    Raises:
        ValueError: the storage (its password masked) and the ``pip install`` that adds the library.
    """
    if spec and spec.startswith("redis") and "://" in spec and importlib.util.find_spec("redis") is None:
        raise ValueError(f"storage={hide_passwords(spec)!r} needs the Redis client (redis-py), which is not "
                         f"installed: pip install redis")


def storage_description(spec: str | None, *, run_dir: str | Path) -> str:
    """What ``make_storage(spec)`` would describe, without opening or creating anything (a URL's
    password masked)."""
    if not spec:
        return str(Path(run_dir) / "study.journal")
    if "://" in spec:
        return redact_url(spec)
    return str(Path(spec).expanduser())


def journal_storage(path: Path) -> tuple[optuna.storages.BaseStorage, str]:
    """An Optuna journal file storage at ``path`` (created with its folder if missing).

    Writers hold an OS lock (released when a holder dies, so a killed worker never stalls the next
    start).  A damaged journal is refused before anything is written to it: a ``ValueError`` names
    the line and the repair command (``python -m nas.repair``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with JournalFileLock(path):  # no append is under way while the file is checked and replayed
        check_journal(path)
        try:
            storage = JournalStorage(JournalFileBackend(str(path), lock_obj=JournalFileLock(path)))
        except Exception as e:  # records Optuna cannot replay (a field missing): never a traceback
            raise ValueError(f"study journal {path} cannot be replayed by Optuna ({type(e).__name__}: {e}); nothing "
                             f"was written to it. Restore it from a backup, or start the search in a new folder "
                             f"(out=<new folder>)") from None
    return storage, str(path)


_DRIVER_PACKAGES = {"psycopg": "'hwnas[postgres]'", "psycopg2": "psycopg2-binary", "pymysql": "PyMySQL",
                     "mysqldb": "mysqlclient"}
_PG_LOCK_KEY = 0x6877_6E61_7331  # pg_advisory_lock key: one Optuna schema creation at a time
PG_CONNECT_TIMEOUT_S = 5  # libpq's connect_timeout unless the URL sets one: a server that does not answer fails fast


def redact_url(url: str) -> str:
    """``url`` with its password (if any: ``user:password@``, or a ``?password=`` query parameter) shown
    as ``***``: the form for messages, logs and reports."""
    from sqlalchemy.engine import make_url  # an RDB storage URL only: SQLAlchemy loads in a second

    try:
        return hide_passwords(make_url(url).render_as_string(hide_password=True))
    except Exception:  # not a URL SQLAlchemy parses: the text's passwords masked
        return hide_passwords(url)


def _with_driver(url: str) -> str:
    """A bare ``postgresql://`` URL (or ``postgres://``) with the driver the ``postgres`` extra installs
    (psycopg 3) named, whatever SQLAlchemy's default; a URL naming its driver is kept.  A PostgreSQL
    URL without ``connect_timeout`` gets ``PG_CONNECT_TIMEOUT_S`` (libpq's own default is to wait as
    long as the network does)."""
    from sqlalchemy.engine import make_url  # an RDB storage URL only: SQLAlchemy loads in a second

    u = make_url(url)
    if u.drivername in ("postgresql", "postgres"):
        u = u.set(drivername="postgresql+psycopg")
    if u.get_backend_name() == "postgresql" and "connect_timeout" not in u.query:
        u = u.update_query_dict({"connect_timeout": str(PG_CONNECT_TIMEOUT_S)})
    return u.render_as_string(hide_password=False)


def _db_error_line(e: BaseException) -> str:
    """The first line of a database error, without the SQL and the SQLAlchemy help link."""
    orig = getattr(e, "orig", None) or e
    return (str(orig).strip().splitlines() or [type(orig).__name__])[0]


def _open_rdb(url: str) -> optuna.storages.RDBStorage:
    """``RDBStorage(url)``; schema creation by workers started together is serialized (PostgreSQL: an
    advisory lock; SQLite: a lock file beside the database, where two workers creating a new file
    at once failed with "table studies already exists") or retried: concurrent ``CREATE TYPE`` /
    ``CREATE TABLE`` fail with IntegrityError (a unique violation in the catalog) or ProgrammingError
    ("already exists") in all but one of them."""
    import sqlalchemy  # an RDB storage URL only: SQLAlchemy loads in a second

    def create() -> RDBStorage:
        with warnings.catch_warnings():  # the heartbeat is marked experimental in Optuna 5.0
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return RDBStorage(url, heartbeat_interval=60, grace_period=180, engine_kwargs={"pool_pre_ping": True})

    db = url[len("sqlite:///"):] if url.startswith("sqlite:///") else ""
    if db not in ("", ":memory:"):
        with FileLock(str(lock_path(db))):  # workers opening a new file at once
            return create()
    attempt = 0
    while True:
        try:
            if not url.startswith("postgresql"):
                return create()
            engine = sqlalchemy.create_engine(url, poolclass=sqlalchemy.pool.NullPool)
            try:
                with engine.connect() as conn:
                    conn.execute(sqlalchemy.text("SELECT pg_advisory_lock(:k)"), {"k": _PG_LOCK_KEY})
                    return create()  # the lock goes with the connection
            finally:
                engine.dispose()
        except (sqlalchemy.exc.IntegrityError, sqlalchemy.exc.ProgrammingError) as e:
            if attempt == 4 or (isinstance(e, sqlalchemy.exc.ProgrammingError) and "already exists" not in str(e)):
                raise
            log.debug("schema creation raced another worker (%s); retrying", _db_error_line(e))
            time.sleep(random.uniform(0.1, 0.4) * 2**attempt)
            attempt += 1


def rdb_storage(spec: str) -> tuple[optuna.storages.BaseStorage, str]:
    """An Optuna RDB storage for a database URL (with a heartbeat), and its description (the URL with its
    password masked: the description is printed and written to pareto.json)."""
    import sqlalchemy  # an RDB storage URL only: SQLAlchemy loads in a second

    shown = redact_url(spec)
    if spec.startswith("sqlite"):
        log.warning("SQLite storage locks under parallel workers; prefer the default journal file or a "
                    "PostgreSQL / MySQL URL for more than one worker")
    try:
        url = _with_driver(spec)
    except sqlalchemy.exc.ArgumentError:
        raise ValueError(f"storage={shown!r} is not a database URL (dialect+driver://user:password@host:port/"
                         f"database, e.g. postgresql://user@db.example.org/hwnas)") from None
    u = sqlalchemy.engine.make_url(url)
    try:
        return _open_rdb(url), shown
    except ImportError as e:
        cause = e.__cause__ if isinstance(e.__cause__, ImportError) else e
        module = (getattr(cause, "name", None) or u.get_driver_name() or "").split(".")[0]
        package = _DRIVER_PACKAGES.get(module.lower(), module)
        raise ValueError(f"storage={shown!r} needs the database driver {module!r}, which is not installed: "
                         f"pip install {package}") from None
    except sqlalchemy.exc.OperationalError as e:
        where = f"{u.host or 'localhost'}:{u.port or 'default port'}/{u.database or ''}"
        line = _db_error_line(e)
        for pw in (u.password, *(u.query.get(k) for k in u.query if k.lower() in ("password", "passwd", "pwd"))):
            if pw and isinstance(pw, str):  # masked where it stands alone, not inside other words (a password "p")
                line = re.sub(rf"(?<![\w]){re.escape(pw)}(?![\w])", "***", line)
        raise ValueError(f"storage={shown!r}: cannot open database {where} as user {u.username!r}: {line}") from None


# a database that stopped answering: SQLAlchemy's errors for a lost or refused connection (Optuna's RDB storage
# raises StorageInternalError "... invalid data in the commit, e.g. exceeding max length" over them), Redis's
_LOST = {"sqlalchemy.exc.OperationalError", "sqlalchemy.exc.InterfaceError", "redis.exceptions.ConnectionError",
         "redis.exceptions.TimeoutError"}


def lost_storage(e: BaseException) -> str | None:
    """When ``e``, or an exception it was raised from, is the study's database failing to answer (the
    server stopped, the connection lost or refused): the driver's first line, any password masked;
    else None."""
    seen: set[int] = set()
    cur: BaseException | None = e
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if {f"{c.__module__}.{c.__name__}" for c in type(cur).__mro__} & _LOST:
            return hide_passwords(_db_error_line(cur))
        cur = cur.__cause__ or cur.__context__
    return None


# a record's keys from before the budgets took their config's names: the same settings
_RENAMED = {"budgets.latency_ms": "budgets.latency_budget_ms", "budgets.memory_kb": "budgets.memory_budget_kb"}


def _flatten(d: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(d, dict):
        out: dict[str, Any] = {}
        for k, v in d.items():
            out.update(_flatten(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: d}


def _load_or_create(storage: optuna.storages.BaseStorage, study_name: str,
                    sampler: optuna.samplers.BaseSampler) -> optuna.Study:
    """Load the study, or create it (a study that exists is only read: ``create_study(load_if_exists=True)``
    would first append a failed create record to a journal)."""
    names = {s.study_name for s in optuna.get_all_study_summaries(storage, include_best_trial=False)}
    if study_name not in names:
        try:
            return optuna.create_study(storage=storage, study_name=study_name, sampler=sampler,
                                       directions=["maximize", "minimize"])
        except optuna.exceptions.DuplicatedStudyError:  # another worker created it meanwhile
            pass
    return optuna.load_study(storage=storage, study_name=study_name, sampler=sampler)


def open_study(
    *,
    storage: optuna.storages.BaseStorage,
    study_name: str,
    sampler: optuna.samplers.BaseSampler,
    record: dict[str, Any],
    hint: str | None = None,
) -> optuna.Study:
    """Create the study, or load it and check it was made with the same ``record`` (except its seed).

    ``hint``: what to do instead, appended to the error for a study made with other settings."""
    if not study_name:
        raise ValueError("study_name must be a non-empty string")
    study = _load_or_create(storage, study_name, sampler)
    if len(study.directions) != 2 or study.directions[0] != optuna.study.StudyDirection.MAXIMIZE:
        raise ValueError(f"study {study_name!r} exists in the storage but is not an hwnas search (directions "
                         f"{[d.name for d in study.directions]}); pick another study_name")
    have = study.user_attrs.get(STUDY_ATTR)
    if have is None:
        study.set_user_attr(STUDY_ATTR, record)
        with warnings.catch_warnings():  # experimental in Optuna 5.0, stable enough for labels
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study.set_metric_names(list(record["objectives"]))
        return study
    a = {_RENAMED.get(k, k): v for k, v in _flatten(have).items() if not k.startswith("train_seed")}
    b = {k: v for k, v in _flatten(json.loads(json.dumps(record))).items() if not k.startswith("train_seed")}
    diffs = [f"{k}: {a.get(k, '<absent>')!r} in the study, {b.get(k, '<absent>')!r} now"
             for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
    if diffs:
        shown = "; ".join(diffs[:8]) + (f"; and {len(diffs) - 8} more" if len(diffs) > 8 else "")
        raise ValueError(f"study {study_name!r} was created with different settings ({shown}); nothing was changed. "
                         + (hint or "Resume it with the same settings, or start a new study: study_name=<new name> "
                                    "(or a new out= folder)"))
    return study


# --------------------------------------------------------------------------------------------
# trials left running by dead processes


def fail_stale_trials(study: optuna.Study, storage: optuna.storages.BaseStorage) -> list[int]:
    """Mark FAIL (``status=stale``) the RUNNING trials of dead processes on this host; their numbers."""
    host = socket.gethostname()
    stale = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        w = str(t.user_attrs.get("worker", ""))
        h, _, pid = w.rpartition(":")
        if h != host or not pid.isdigit() or int(pid) == os.getpid() or pid_alive(int(pid)):
            continue
        try:
            storage.set_trial_user_attr(t._trial_id, "status", "stale")
            if storage.set_trial_state_values(t._trial_id, TrialState.FAIL):
                stale.append(t.number)
        except Exception:  # another worker got there first
            log.debug("could not fail stale trial %d", t.number, exc_info=True)
    if stale:
        log.warning("marked %d trial(s) left running by dead processes as failed (stale): %s", len(stale), stale)
    return stale
