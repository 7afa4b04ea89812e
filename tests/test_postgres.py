"""PostgreSQL as the study storage: driver selection, messages that never show the password, and many
workers started together on an empty database, against a real server this module starts (Debian's
``postgresql`` package; skipped when it or psycopg is not installed)."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import forked
import pytest

from nas.search.storage import _with_driver, rdb_storage, redact_url

REPO = Path(__file__).resolve().parent.parent
PASSWORD = "Zq7-never-shown"
USER = "hwnas"


# ------------------------------------------------------------------------------ without a server


@pytest.mark.parametrize("url, shown", [
    ("postgresql://u:secret@db.example.org:5432/hwnas", "postgresql://u:***@db.example.org:5432/hwnas"),
    ("postgresql+psycopg2://u:secret@h/d", "postgresql+psycopg2://u:***@h/d"),
    ("postgresql://u@h/d", "postgresql://u@h/d"),
    ("sqlite:///study.db", "sqlite:///study.db"),
    ("not a url://u:secret@h", "not a url://u:***@h"),
    ("postgresql://u@h:5432/hwnas?password=secret", "postgresql://u@h:5432/hwnas?password=***"),
    ("postgresql://u@h/d?sslmode=require&PASSWORD=secret&connect_timeout=3",
     "postgresql://u@h/d?PASSWORD=***&connect_timeout=3&sslmode=require"),  # SQLAlchemy sorts the parameters
    ("mysql+pymysql://u@h/d?passwd=secret", "mysql+pymysql://u@h/d?passwd=***"),
    ("'postgresql://u@h/d?password=secret'", "'postgresql://u@h/d?password=***'"),  # a quoted override's value
])
def test_redact_url(url, shown):
    assert redact_url(url) == shown


@pytest.mark.parametrize("storage", ["postgresql://u:secret@db.example.org/hwnas",
                                     "'postgresql://u@db.example.org/hwnas?password=secret'"])
def test_the_config_and_overrides_written_to_hydra_hide_the_password(tmp_path, monkeypatch, storage):
    """Both password forms reach ``.hydra/config.yaml`` and ``.hydra/overrides.yaml`` masked."""
    from omegaconf import OmegaConf

    from nas.cli import search as cli_search

    monkeypatch.setattr(cli_search.HydraConfig, "initialized", staticmethod(lambda: True))
    monkeypatch.setattr(cli_search.HydraConfig, "get", staticmethod(
        lambda: OmegaConf.create({"overrides": {"task": ["target=cpu", f"storage={storage}"]}})))
    cfg = OmegaConf.create({"storage": storage.strip("'"), "n_trials": 1})
    cli_search._save_config(cfg, tmp_path, cli_search._user_args())
    written = (tmp_path / ".hydra" / "config.yaml").read_text() + (tmp_path / ".hydra" / "overrides.yaml").read_text()
    assert "secret" not in written and written.count("***") == 2, written
    assert "- conf=cpu" in written


def test_an_unquoted_url_with_a_password_parameter_is_refused_without_showing_it(capsys, monkeypatch, tmp_path):
    """Hydra's grammar cannot read ``?password=`` unquoted: the line that says how to quote it hides the password."""
    import nas.cli.search as m
    from tests.test_cli_errors import _one_line

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["nas.search", "storage=postgresql://u@h/d?password=secret", "n_trials=1"])
    with pytest.raises(SystemExit) as e:
        m.main()
    line = _one_line(capsys.readouterr().err)
    assert e.value.code == 2 and "secret" not in line and "storage='postgresql://u@h/d?password=***'" in line, line


def test_bare_postgresql_url_uses_psycopg_3_and_a_short_connect_timeout():
    assert _with_driver("postgresql://u:p@h/d") == "postgresql+psycopg://u:p@h/d?connect_timeout=5"
    assert _with_driver("postgres://u:p@h/d") == "postgresql+psycopg://u:p@h/d?connect_timeout=5"
    assert _with_driver("postgresql+psycopg2://u:p@h/d") == "postgresql+psycopg2://u:p@h/d?connect_timeout=5"
    assert _with_driver("postgresql://u:p@h/d?connect_timeout=60") == "postgresql+psycopg://u:p@h/d?connect_timeout=60"
    assert _with_driver("mysql+pymysql://u:p@h/d") == "mysql+pymysql://u:p@h/d"


def test_a_server_that_does_not_answer_is_one_line_after_the_connect_timeout(monkeypatch):
    """A server that accepts the connection and never answers (a hung or firewalled host): libpq waits
    ``connect_timeout``, not as long as the network does; a short password is masked, not every letter."""
    pytest.importorskip("psycopg")
    from nas.search import storage

    monkeypatch.setattr(storage, "PG_CONNECT_TIMEOUT_S", 1)
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        hang_up = threading.Timer(20, silent.close)  # without a connect_timeout: reset, not a test that hangs
        hang_up.start()
        url = f"postgresql://u:p@127.0.0.1:{silent.getsockname()[1]}/hwnas"
        try:
            with pytest.raises(ValueError) as e:
                rdb_storage(url)
        finally:
            hang_up.cancel()
    msg = str(e.value)
    assert "timeout expired" in msg and "postgresql://u:***@127.0.0.1" in msg and "\n" not in msg, msg
    assert "***ort" not in msg and e.value.__cause__ is None


def test_missing_driver_is_one_line_naming_the_package(monkeypatch):
    monkeypatch.setitem(sys.modules, "psycopg", None)  # import psycopg fails
    with pytest.raises(ValueError) as e:
        rdb_storage("postgresql://u:secret@db.example.org/hwnas")
    msg = str(e.value)
    assert "pip install 'hwnas[postgres]'" in msg and "postgresql://u:***@db.example.org/hwnas" in msg
    assert "secret" not in msg and "\n" not in msg and e.value.__cause__ is None


# ------------------------------------------------------------------------------ a real server


def _pg_bin() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def pg_server():
    """A PostgreSQL server on 127.0.0.1 with a password-protected user; yields (host, port)."""
    pytest.importorskip("psycopg", reason="psycopg is not installed (pip install 'hwnas[postgres]')")
    pg_bin = _pg_bin()
    if pg_bin is None:
        pytest.skip("PostgreSQL is not installed (Debian: apt-get install postgresql)")
    as_user: list[str] = []
    root = tempfile.mkdtemp(prefix="hwnas-pg-")  # not under pytest's tmp: the server's user must reach it
    if os.geteuid() == 0:  # initdb refuses to run as root
        import pwd

        try:
            pw = pwd.getpwnam("postgres")
        except KeyError:
            pytest.skip("running as root and there is no 'postgres' user to run the server")
        os.chown(root, pw.pw_uid, pw.pw_gid)
        as_user = ["runuser", "-u", "postgres", "--"]
    pwfile = Path(root, "pw")
    pwfile.write_text(PASSWORD + "\n")
    if as_user:
        os.chown(pwfile, pw.pw_uid, pw.pw_gid)
    data, port = Path(root, "data"), _free_port()
    subprocess.run([*as_user, str(pg_bin / "initdb"), "-D", str(data), "-U", USER, "--auth=scram-sha-256",
                    f"--pwfile={pwfile}", "--no-sync", "-E", "UTF8"], check=True, capture_output=True)
    subprocess.run([*as_user, str(pg_bin / "pg_ctl"), "-D", str(data), "-l", f"{root}/server.log", "-w", "-o",
                    f"-c listen_addresses=127.0.0.1 -p {port} -k {root} -F", "start"], check=True, capture_output=True)
    try:
        yield "127.0.0.1", port
    finally:
        subprocess.run([*as_user, str(pg_bin / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"],
                       capture_output=True)
        shutil.rmtree(root, ignore_errors=True)


_DB_COUNT = [0]


def _fresh_database(host: str, port: int) -> str:
    """A new, empty database; its URL (bare ``postgresql://``, with the password)."""
    import psycopg

    _DB_COUNT[0] += 1
    name = f"hwnas_{_DB_COUNT[0]}"
    with psycopg.connect(host=host, port=port, user=USER, password=PASSWORD, dbname="postgres",
                         autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return f"postgresql://{USER}:{PASSWORD}@{host}:{port}/{name}"


def test_bad_password_and_unreachable_server_are_one_line(pg_server):
    host, port = pg_server
    for url, expect in [(f"postgresql://{USER}:wrong-{PASSWORD}@{host}:{port}/postgres", "password authentication"),
                        (f"postgresql://{USER}:{PASSWORD}@{host}:{_free_port()}/hwnas", "Connection refused"),
                        (f"postgresql://{USER}:{PASSWORD}@{host}:{port}/missing", 'database "missing" does not')]:
        with pytest.raises(ValueError) as e:
            rdb_storage(url)
        msg = str(e.value)
        assert expect in msg and f"{host}:" in msg and "\n" not in msg, msg
        assert PASSWORD not in msg and e.value.__cause__ is None


def test_storage_description_hides_the_password(pg_server):
    storage, desc = rdb_storage(_fresh_database(*pg_server))
    assert PASSWORD not in desc and desc.startswith(f"postgresql://{USER}:***@")
    assert storage.get_all_studies() == []


@pytest.mark.slow
def test_workers_started_together_on_an_empty_database(pg_server, tmp_path):
    import optuna

    from nas.search.study import count_trials

    url, n = _fresh_database(*pg_server), 9
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "MPLBACKEND": "Agg"}
    procs = [forked.Popen([sys.executable, "-m", "nas.search", "conf=cpu", "search_space=tiny",
                           "evaluator=zero_cost", f"n_trials={n}", "progress=false", f"seed={i}",
                           f"storage={url}", "study_name=pg", f"out={tmp_path / f'w{i}'}"], cwd=REPO, env=env)
             for i in range(3)]  # started together, each a process of its own (forked: no cold imports)
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
        assert "Traceback" not in out + err and PASSWORD not in out + err
        assert f"postgresql://{USER}:***@" in out
    for f in tmp_path.glob("w*/pareto.json"):
        assert PASSWORD not in f.read_text()

    study = optuna.load_study(study_name="pg", storage=_with_driver(url))
    trials = study.get_trials(deepcopy=False)
    counted = [t for t in trials if t.state != optuna.trial.TrialState.FAIL or t.user_attrs.get("status") == "error"]
    assert count_trials(study) == n == len(counted)
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in counted)  # nothing lost
    digests = [t.user_attrs["digest"] for t in counted]
    assert len(set(digests)) == len(digests), f"architectures evaluated twice: {sorted(digests)}"


@pytest.mark.slow
def test_a_password_given_as_a_query_parameter_is_never_shown_or_written(pg_server, tmp_path, monkeypatch, capsys):
    """``?password=`` (libpq's parameter) is masked like ``user:password@``: on the console, in run.json,
    pareto.json and ``.hydra/``."""
    import nas.cli.search as m

    url = _fresh_database(*pg_server).replace(f":{PASSWORD}@", "@") + f"?password={PASSWORD}"
    out = tmp_path / "run"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.setattr(sys, "argv", ["nas.search", "conf=cpu", "search_space=tiny", "evaluator=zero_cost",
                                      "n_trials=1", "progress=false", f"storage='{url}'", f"out={out}"])
    m.main()
    shown = capsys.readouterr()
    assert "password=***" in shown.out and PASSWORD not in shown.out + shown.err
    for f in ("run.json", "pareto.json", ".hydra/config.yaml", ".hydra/overrides.yaml"):
        text = (out / f).read_text()
        assert PASSWORD not in text and "password=***" in text, f


def test_password_from_the_environment(pg_server, monkeypatch):
    """libpq reads PGPASSWORD (or ~/.pgpass) when the URL has no password: nothing to hide then."""
    url = _fresh_database(*pg_server).replace(f":{PASSWORD}@", "@")
    monkeypatch.setenv("PGPASSWORD", PASSWORD)
    storage, desc = rdb_storage(url)
    assert desc == url and storage.get_all_studies() == []
