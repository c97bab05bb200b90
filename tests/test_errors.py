"""The one place exceptions become sentences: real exceptions from the real libraries."""

from __future__ import annotations

import errno
import json
import re
from pathlib import Path

import pytest

from app.checkpoints.load_errors import explain_load_failure
from app.errors import DraftPairError, technical_detail, user_message


@pytest.fixture(autouse=True)
def _no_reexec(monkeypatch):
    """``main`` may re-execute itself for the BLAS fix; never the test process."""
    monkeypatch.setenv("DRAFTPAIR_NO_BLAS_FIX", "1")


INTERNALS = re.compile(r"__init__|Error\b|positional|NoneType|\[read\]|Traceback")


def test_missing_constructor_arguments_name_the_keys():
    from mlx_lm.models import llama

    with pytest.raises(TypeError) as err:
        llama.ModelArgs.from_dict({"model_type": "llama", "vocab_size": 10})
    msg = user_message(err.value, folder="/m", model_type="llama")
    assert msg.startswith("config.json in /m lacks ") and "hidden_size" in msg
    assert "that a llama model needs" in msg and not INTERNALS.search(msg)


def test_mlx_read_errors_name_the_file(tmp_path):
    import mlx.core as mx

    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    bad = tmp_path / "model.safetensors"
    bad.write_bytes(b"")
    with pytest.raises(RuntimeError) as err:
        mx.load(str(bad))
    assert "[read] Unable to read 8 bytes" in str(err.value)
    e = explain_load_failure(err.value, tmp_path)
    assert str(e) == f"{bad} is truncated or not a safetensors file (an interrupted download?)."
    assert "[read]" in e.detail


def test_type_errors_and_os_errors_are_plain(tmp_path):
    with pytest.raises(TypeError) as err:
        _ = [0] * None  # what a null hidden_size does deep inside a model
    msg = user_message(err.value, folder=tmp_path)
    assert "config.json" in msg and "wrong type" in msg and not INTERNALS.search(msg)
    for exc, words in [
        (FileNotFoundError(errno.ENOENT, "No such file", str(tmp_path / "x")), "does not exist"),
        (PermissionError(errno.EACCES, "Permission denied", "/root/x"), "permission denied"),
        (OSError(errno.ENOSPC, "No space left on device", "/data"), "disk holding /data is full"),
        (OSError(errno.ENOSPC, "No space left on device"), "The disk is full; free some space"),
        (RuntimeError("[write] Unable to write 64347 bytes to file."),
         "The disk is full or cannot be written; free some space"),
        (OSError(errno.ELOOP, "Too many levels of symbolic links", "/l"), "link loop"),
    ]:
        msg = user_message(exc)
        assert words in msg and not INTERNALS.search(msg) and "Errno" not in msg, msg
    with pytest.raises(json.JSONDecodeError) as err:
        json.loads("{oops")
    msg = user_message(err.value, file=Path("/m/config.json"))
    assert msg == "/m/config.json is not valid JSON (line 1, column 2)."


def test_bare_and_unknown_exceptions():
    assert user_message(ValueError()) == "DraftPair hit an unexpected problem (details with -v)."
    assert user_message(ValueError("the thing broke")) == "The thing broke."
    assert user_message(DraftPairError("Plain already.", detail="x")) == "Plain already."
    try:
        try:
            raise KeyError("inner")
        except KeyError as inner:
            raise DraftPairError("outer") from inner
    except DraftPairError as exc:
        detail = technical_detail(exc)
    assert "DraftPairError: outer" in detail and "KeyError" in detail


def test_cli_verbose_shows_details(tmp_path, capsys):
    from app.cli import main

    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "llama"}')
    (folder / "model.safetensors").write_bytes(b"")
    assert main(["generate", "--model", str(folder), "--prompt", "hi"]) == 1
    err = capsys.readouterr().err
    assert "truncated or not a safetensors file" in err and "draftpair: details:" not in err
    assert main(["generate", "--model", str(folder), "--prompt", "hi", "-v"]) == 1
    err = capsys.readouterr().err
    assert "draftpair: details:" in err and "Unable to read 8 bytes" in err
