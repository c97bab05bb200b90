"""Hub search/info/download against a real local HTTP server speaking the Hub's endpoints."""

from __future__ import annotations

import socket
import threading
import time
from collections import namedtuple

import pytest

from app.checkpoints import hub as H
from app.cli import main
from tests.fakehub import FakeHub
from tests.test_checkpoints_builders import standard_checkpoints


@pytest.fixture(scope="session")
def ckpts(tmp_path_factory):
    return standard_checkpoints(tmp_path_factory.mktemp("ckpts"))


REPO = "org/tiny-mlx"


@pytest.fixture
def fakehub(ckpts, tmp_path, monkeypatch):
    hub = FakeHub()
    extra = {
        "pytorch_model.bin": b"\x80\x04 pickle never fetched",
        "modeling_evil.py": b"import os",
        "README.md": b"# tiny",
    }
    hub.add_repo(REPO, ckpts.target, files=extra, downloads=50)
    hub.add_repo("org/tiny-draft-mlx", ckpts.draft, downloads=10)
    hub.add_repo(
        "org/plain-hf", ckpts.draft, tags=["safetensors"], library="transformers", downloads=99
    )
    hub.add_repo("org/gated", ckpts.target, gated=True)
    hub.add_repo("org/forbidden", ckpts.draft, forbidden=True)
    hub.add_repo("org/pickles", files={"config.json": b"{}", "pytorch_model.bin": b"\x80\x04"})
    hub.start()
    hub.use(monkeypatch, tmp_path)
    yield hub
    hub.stop()


def resolve_gets(hub, name):
    return hub.count("GET", name)


def test_search_and_info(fakehub):
    found = H.search("tiny")
    assert [m.repo_id for m in found] == [REPO, "org/tiny-draft-mlx"]  # MLX only, by downloads
    assert [m.repo_id for m in H.search("", mlx_only=False)][0] == "org/plain-hf"
    info = H.repo_info(REPO)
    assert info.is_mlx and info.has_safetensors and info.sha
    assert set(info.skipped) == {"pytorch_model.bin", "modeling_evil.py"}
    sizes = {f.name: f.size for f in info.files}
    assert info.download_bytes == sum(v for k, v in sizes.items() if k not in info.skipped)


def test_download_with_progress_then_store_resolve_check(fakehub):
    events = []
    path = H.download(REPO, progress=events.append)
    assert (path / "model.safetensors").is_file() and (path / "README.md").is_file()
    assert not (path / "pytorch_model.bin").exists() and not (path / "modeling_evil.py").exists()
    assert (
        resolve_gets(fakehub, "pytorch_model.bin") == 0
        and resolve_gets(fakehub, "modeling_evil.py") == 0
    )
    done = [e.done_bytes for e in events]
    assert done == sorted(done)
    last = events[-1]
    assert last.finished and last.done_bytes == last.total_bytes > 0
    assert last.files_done == last.files_total == 6 and last.fraction == 1.0
    assert any(e.rate_bps > 0 for e in events) and last.eta_s == 0.0
    # a second call fetches nothing
    before = fakehub.count("GET") - fakehub.count("GET", None) + len(fakehub.requests)
    H.download(REPO)
    new = fakehub.requests[before:]
    assert [r for r in new if "/resolve/" in r[1]] == []
    # the store and the resolver see it; the pairing check works on it
    from app.checkpoints.pairing import check
    from app.checkpoints.resolve import resolve_model
    from app.checkpoints.store import SOURCE_HF, Store

    entry = Store().get(REPO)
    assert entry is not None and entry.source == SOURCE_HF and entry.path == path
    assert resolve_model(REPO) == path
    assert check(resolve_model(REPO), kind="prompt-lookup").works


def test_cancel_then_resume_skips_finished_files(fakehub):
    cancel = threading.Event()

    def progress(p):
        if p.current_file == "model.safetensors":
            cancel.set()

    with pytest.raises(H.DownloadCancelled, match="resume"):
        H.download(REPO, progress=progress, cancel=cancel)
    assert resolve_gets(fakehub, "config.json") == 1
    assert resolve_gets(fakehub, "tokenizer.json") == 0  # stopped before later files
    from app.checkpoints.store import Store

    partial = Store().get(REPO)
    assert partial.kind == "unsupported" and "incomplete" in partial.unsupported_reason
    events = []
    path = H.download(REPO, progress=events.append)
    assert events[0].files_done == 2 and events[0].done_bytes > 0  # README.md + config.json kept
    assert resolve_gets(fakehub, "config.json") == 1  # finished files are not fetched again
    assert resolve_gets(fakehub, "README.md") == 1
    assert resolve_gets(fakehub, "tokenizer.json") == 1
    assert (path / "model.safetensors").stat().st_size > 0


def test_gated_repo_gives_plain_message(fakehub):
    with pytest.raises(H.HubError) as err:
        H.download("org/gated")
    msg = str(err.value)
    assert "gated" in msg and "log in" in msg and "401" not in msg
    with pytest.raises(H.HubError, match="not found"):
        H.download("org/does-not-exist")
    with pytest.raises(H.HubError, match="token is not allowed"):
        H.download("org/forbidden")
    with pytest.raises(H.HubError, match="pickle"):
        H.download("org/pickles")


def test_server_dying_mid_file_then_resume(fakehub):
    fakehub.die_on = ("model.safetensors", 4096)
    port = fakehub.port
    with pytest.raises(H.HubError) as err:
        H.download(REPO)
    msg = str(err.value)
    assert "connection" in msg.lower() and "lost" in msg and "resume" in msg
    assert resolve_gets(fakehub, "config.json") == 1
    fakehub.start(port=port)  # the Hub is back
    path = H.download(REPO)
    assert resolve_gets(fakehub, "config.json") == 1
    assert (path / "model.safetensors").is_file()
    from app.checkpoints.safetensors_header import summarize_weights

    assert summarize_weights(path).ok


def test_offline_and_disk_space(fakehub, monkeypatch):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed_port = s.getsockname()[1]
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{closed_port}")
    t = time.perf_counter()
    with pytest.raises(H.HubError, match="cannot be reached"):
        H.search("tiny")
    assert time.perf_counter() - t < 6
    monkeypatch.setenv("HF_ENDPOINT", fakehub.url)
    Usage = namedtuple("Usage", "total used free")
    monkeypatch.setattr(H.shutil, "disk_usage", lambda p: Usage(10**6, 10**6 - 1000, 1000))
    with pytest.raises(H.HubError, match="Not enough free disk space"):
        H.download(REPO)
    assert fakehub.count("GET", "config.json") == 0


def test_cli_search_and_pull(fakehub, capsys):
    assert main(["models", "search", "tiny"]) == 0
    out = capsys.readouterr().out
    assert REPO in out and "plain-hf" not in out
    assert main(["models", "pull", REPO]) == 0
    captured = capsys.readouterr()
    assert captured.out.strip().endswith(H.repo_info(REPO).sha)
    assert "skipping 2 file(s)" in captured.err
    assert main(["models", "pull", "org/gated"]) == 1
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]
    assert last.startswith("draftpair: error:") and "gated" in last and "Traceback" not in err
    assert main(["models", "rm", REPO, "--yes"]) == 0
    assert "Freed" in capsys.readouterr().out


def test_cli_convert_from_repo_id(fakehub, capsys):
    from app.checkpoints.store import SOURCE_MODELS, Store

    assert main(["models", "convert", "org/plain-hf"]) == 0
    out = capsys.readouterr().out.strip()
    entry = Store().get("plain-hf-mlx")
    assert entry is not None and entry.source == SOURCE_MODELS and str(entry.path) == out
    assert entry.kind == "chat" and entry.param_count


def test_big_files_resume_inside_the_file(fakehub, ckpts, monkeypatch):
    """Above the size threshold a file continues from its partial bytes (HTTP Range)."""
    monkeypatch.setattr(H, "RESUMABLE_MIN_BYTES", 100_000)
    original = (ckpts.target / "model.safetensors").read_bytes()
    fakehub.die_on = ("model.safetensors", 200_000)
    port = fakehub.port
    with pytest.raises(H.HubError, match="lost while downloading model.safetensors"):
        H.download(REPO)
    fakehub.start(port=port)
    events = []
    path = H.download(REPO, progress=events.append)
    assert fakehub.ranges == [("model.safetensors", "bytes=200000-")]
    assert (path / "model.safetensors").read_bytes() == original
    assert resolve_gets(fakehub, "config.json") == 1
    assert events[-1].done_bytes == events[-1].total_bytes
    # cancel mid-file keeps the partial bytes too
    cancel = threading.Event()
    fakehub.throttle_bps = 2_000_000

    def progress(p):
        if p.current_file == "model.safetensors" and p.done_bytes > 0:
            cancel.set()

    from app.checkpoints.store import Store

    Store().remove(REPO)
    with pytest.raises(H.DownloadCancelled):
        H.download(REPO, progress=progress, cancel=cancel)
    fakehub.throttle_bps = None
    n_ranges = len(fakehub.ranges)
    path = H.download(REPO)
    assert len(fakehub.ranges) == n_ranges + 1
    assert (path / "model.safetensors").read_bytes() == original
    from app.checkpoints.pairing import check

    assert check(path, kind="prompt-lookup").works
