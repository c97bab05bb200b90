"""Download faults against the local fake Hub: the server dies, the disk fills up, the
download is cancelled or its process killed with SIGKILL. After each: no partial file is
ever taken as complete, and resuming re-downloads no file that had finished."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from app.checkpoints import hub as H
from tests.fakehub import FakeHub
from tests.test_checkpoints_builders import standard_checkpoints

REPO = "org/tiny-mlx"
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    return standard_checkpoints(tmp_path_factory.mktemp("ckpts")).target


@pytest.fixture
def hub(source, tmp_path, monkeypatch):
    fake = FakeHub()
    fake.add_repo(REPO, source)
    fake.start()
    fake.use(monkeypatch, tmp_path)
    yield fake
    fake.stop()


def snapshot_is_sound(source: Path, cache: Path) -> list[str]:
    """Every file a snapshot shows is byte-identical to the Hub's; returns the names shown."""
    shown = []
    for snap in cache.glob("models--*/snapshots/*"):
        for f in snap.iterdir():
            if f.exists():  # a dangling link is not a file anyone reads
                assert f.read_bytes() == (source / f.name).read_bytes(), f"{f.name} is partial"
                shown.append(f.name)
    return shown


def gets(fake: FakeHub) -> dict[str, int]:
    out: dict[str, int] = {}
    with fake.lock:
        for method, path in fake.requests:
            if method == "GET" and "/resolve/" in path:
                name = path.rsplit("/", 1)[-1]
                out[name] = out.get(name, 0) + 1
    return out


def finish_and_compare(fake, source, cache, done_before: list[str]) -> None:
    before = gets(fake)
    path = H.download(REPO, cache_dir=cache)
    after = gets(fake)
    for name in done_before:
        assert after.get(name, 0) == before.get(name, 0), f"{name} was downloaded again"
    for f in source.iterdir():
        assert (path / f.name).read_bytes() == f.read_bytes()
    from app.checkpoints.pairing.load_check import load_check, would_load

    assert would_load(load_check(path))


def test_server_drops_mid_file(hub, source, tmp_path):
    cache = tmp_path / "hf" / "hub"
    hub.die_on = ("model.safetensors", 5000)
    port = hub.port
    with pytest.raises(H.HubError, match="lost"):
        H.download(REPO, cache_dir=cache)
    done = snapshot_is_sound(source, cache)
    assert "model.safetensors" not in done and "config.json" in done
    hub.start(port=port)
    finish_and_compare(hub, source, cache, done)


@pytest.fixture
def small_disk(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    mnt = tmp_path / "small-disk"
    mnt.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=320k", "tmpfs", str(mnt)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def test_disk_full_before_and_during(hub, source, small_disk, monkeypatch):
    cache = small_disk / "hub"
    # before: the free-space check refuses at once, nothing is fetched
    with pytest.raises(H.HubError, match="Not enough free disk space"):
        H.download(REPO, cache_dir=cache)
    assert gets(hub) == {}
    # during: the check passes (margin off) but the weights do not fit: the kernel says ENOSPC
    monkeypatch.setattr(H, "DISK_MARGIN", 0)
    real_usage = H.shutil.disk_usage
    monkeypatch.setattr(H.shutil, "disk_usage",
                        lambda p: real_usage(p)._replace(free=10 * 2**20))
    with pytest.raises(H.HubError) as err:
        H.download(REPO, cache_dir=cache)
    assert "disk" in str(err.value).lower() and "Errno" not in str(err.value)
    done = snapshot_is_sound(source, cache)
    assert "model.safetensors" not in done
    subprocess.run(["mount", "-o", "remount,size=4m", str(small_disk)], check=True)
    finish_and_compare(hub, source, cache, done)


def test_cancel_mid_file_keeps_finished_files(hub, source, tmp_path, monkeypatch):
    monkeypatch.setattr(H, "RESUMABLE_MIN_BYTES", 100_000)
    cache = tmp_path / "hf" / "hub"
    hub.throttle_bps = 400_000
    cancel = threading.Event()

    def progress(p):
        if p.current_file == "model.safetensors" and p.fraction > 0.3:
            cancel.set()

    with pytest.raises(H.DownloadCancelled):
        H.download(REPO, cache_dir=cache, progress=progress, cancel=cancel)
    hub.throttle_bps = None
    done = snapshot_is_sound(source, cache)
    assert "model.safetensors" not in done
    partial = list(cache.glob("models--*/blobs/*.incomplete"))
    assert partial and 0 < partial[0].stat().st_size < (source / "model.safetensors").stat().st_size
    finish_and_compare(hub, source, cache, done)
    assert hub.ranges, "the big file continued from its partial bytes"


def test_damaged_partial_is_never_taken_as_complete(hub, source, tmp_path, monkeypatch):
    """Bytes kept from an earlier attempt that were altered on disk: the resumed file fails
    the Hub's checksum, is discarded, and the next run fetches it whole."""
    monkeypatch.setattr(H, "RESUMABLE_MIN_BYTES", 100_000)
    cache = tmp_path / "hf" / "hub"
    hub.throttle_bps = 400_000
    cancel = threading.Event()
    with pytest.raises(H.DownloadCancelled):
        H.download(REPO, cache_dir=cache, cancel=cancel, progress=lambda p: (
            p.current_file == "model.safetensors" and p.fraction > 0.3 and cancel.set()))
    hub.throttle_bps = None
    (partial,) = cache.glob("models--*/blobs/*.incomplete")
    with partial.open("r+b") as f:
        f.seek(100)
        f.write(b"\xde\xad\xbe\xef")
    with pytest.raises(H.HubError, match="checksum"):
        H.download(REPO, cache_dir=cache)
    done = snapshot_is_sound(source, cache)
    assert not partial.exists() and "model.safetensors" not in done and "config.json" in done
    finish_and_compare(hub, source, cache, done)


CHILD = """
import sys
from pathlib import Path
from app.checkpoints import hub as H
H.RESUMABLE_MIN_BYTES = int(sys.argv[2])
H.download("org/tiny-mlx", cache_dir=Path(sys.argv[1]))
print("finished")
"""


@pytest.mark.parametrize("resumable", [True, False], ids=["ranged-file", "small-file"])
def test_kill_9_mid_download(hub, source, tmp_path, resumable):
    cache = tmp_path / "hf" / "hub"
    hub.throttle_bps = 150_000
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    threshold = 100_000 if resumable else 10**12
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(cache), str(threshold)], env=env,
                            cwd=str(ROOT), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    weights_gets, seen = 0, None
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            weights_gets = gets(hub).get("model.safetensors", 0)
            partial = list(cache.glob("models--*/blobs/*.incomplete"))
            if weights_gets and seen is None:
                seen = time.monotonic()
            if resumable and weights_gets and partial and partial[0].stat().st_size > 64 * 1024:
                break  # bytes of the big file are on disk
            if not resumable and seen and time.monotonic() - seen > 0.6:
                break  # huggingface_hub buffers a small file: kill while it streams
            time.sleep(0.02)
        assert proc.poll() is None, proc.communicate()
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.stdout.close()
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL and weights_gets == 1
    hub.throttle_bps = None
    done = snapshot_is_sound(source, cache)
    assert "model.safetensors" not in done and "config.json" in done
    from app.checkpoints.store import Store

    entry = Store(hf_cache=cache).get(REPO)
    assert entry is not None and "incomplete" in (entry.unsupported_reason or "")
    finish_and_compare(hub, source, cache, done)
