"""Errors a user can cause exit 2 with one line and leave nothing behind: a folder that cannot be
written, an override Hydra cannot read (with how to quote it), a checkpoint that is not plain
tensors (never unpickled), ``n_trials=0`` into a new run dir."""

from __future__ import annotations

import collections
import errno
import os
import re

import pytest
import torch

from nas.cli import _common
from nas.fit.checkpoint import load_checkpoint
from tests import test_cli_errors
from tests.test_cli_errors import _one_line

cli = test_cli_errors.cli  # the CLI tests' fixture


def test_out_in_a_folder_that_cannot_be_written_is_refused(cli, tmp_path, monkeypatch):
    ro = tmp_path / "ro"
    ro.mkdir()
    real = os.access
    monkeypatch.setattr(_common.os, "access", lambda p, mode: False if str(p) == str(ro) else real(p, mode))
    code, err = cli("search", f"out={ro / 'run'}", "n_trials=1")
    assert code == 2 and _one_line(err) == (f"error: out={ro / 'run'}: cannot write there: {ro} is not writable "
                                            f"for this user; give a folder you can write in")
    assert not any(ro.iterdir())


@pytest.mark.parametrize("err, code", [
    (OSError(errno.EROFS, "Read-only file system", "/data/run"), 2),
    (PermissionError(errno.EACCES, "Permission denied", "/data/run"), 2),
    (OSError(errno.ENOSPC, "No space left on device", "/data/run/x"), 2),
    (OSError(errno.EIO, "Input/output error", "/data/run"), 1),  # not the user's to fix: unexpected
])
def test_an_environment_oserror_is_a_user_error(capsys, err, code):
    with pytest.raises(SystemExit) as e, _common._unexpected_errors(show=False):
        raise err
    line = capsys.readouterr().err.strip()
    assert e.value.code == code
    if code == 2:  # a full disk also says what to do
        more = "; free space there, then run the same command again: it keeps what it finished"
        assert line == f"error: {err.filename}: {err.strerror}" + (more if err.errno == errno.ENOSPC else "")


def test_an_override_hydra_cannot_read_says_how_to_quote_it(cli):
    code, err = cli("search", "out=/tmp/dír_☃", "n_trials=1")
    assert code == 2 and _one_line(err) == (
        "error: cannot read the option 'out=/tmp/dír_☃' (LexerNoViableAltException); a value with characters other "
        "than ASCII letters, digits and _-+./: must be quoted for Hydra, inside the shell's quotes: "
        "\"out='/tmp/dír_☃'\"")


def test_n_trials_0_into_a_new_run_dir_is_refused(cli, tmp_path):
    code, err = cli("search", f"out={tmp_path / 'new'}", "n_trials=0")
    assert code == 2 and _one_line(err).startswith(f"error: n_trials=0 in a new run dir ({tmp_path / 'new'}): ")
    assert not (tmp_path / "new").exists()


_RAN = []


class _Payload:
    """Unpickling it would run ``_RAN.append``: a checkpoint that must never be unpickled."""

    def __reduce__(self):
        return _RAN.append, ("ran",)


def test_a_checkpoint_that_is_not_plain_tensors_is_one_line_and_never_unpickled(tmp_path, cli):
    p = tmp_path / "model.pt"
    torch.save({"model": collections.OrderedDict(w=torch.zeros(2)), "extra": _Payload()}, p)
    with pytest.raises(ValueError) as e:
        load_checkpoint(p)
    assert re.fullmatch(rf"{re.escape(str(p))}: not a readable torch checkpoint \(it holds a [\w.]+ object beyond "
                        r"tensors and plain containers, which hwnas does not unpickle \(checkpoints load with "
                        r"weights_only=True\)\)", str(e.value)), str(e.value)
    code, err = cli("export", f"weights={p}")
    assert code == 2 and _one_line(err) == f"error: {e.value}"
    assert "weights_only=False" not in err and not _RAN
