"""What the Python scripts share: where the references are, and small helpers.

Import it from a script in scripts/ (Python puts the script's directory on
sys.path first, so `import common` works for `python scripts/NAME.py`):

    import common
    common.LLAMA_BIN / "llama-tokenize"

The locations come from scripts/env.sh, the one place their defaults are
written, with the environment's values winning:

    ROOT         the repository
    REFENV       the reference venv (FERRITE_REFENV; scripts/setup-refenv.sh)
    REFERENCE    downloads and builds of the references (FERRITE_REFERENCE)
    LLAMA        llama.cpp's source tree (FERRITE_LLAMACPP; scripts/build-llamacpp.sh)
    LLAMA_BIN    its binaries, LLAMA/build/bin
    TRANSLATION  the local translation benchmark models (FERRITE_TRANSLATION)

Run scripts with `scripts/refenv python scripts/NAME.py`, which uses the
same settings.
"""

import hashlib
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
_ENV_SH = ROOT / "scripts" / "env.sh"
_NAMES = ("FERRITE_CACHE", "FERRITE_REFENV", "FERRITE_REFERENCE", "FERRITE_LLAMACPP",
          "FERRITE_LLAMACPP_BIN", "FERRITE_TRANSLATION", "FERRITE_LLAMACPP_PYTHON_VERSION")


def _settings():
    """The values env.sh gives its variables in this environment."""
    if all(os.environ.get(n) for n in _NAMES):  # already sourced (scripts/refenv)
        return {n: os.environ[n] for n in _NAMES}
    script = '. "$0" && printf "%s\\0" ' + " ".join('"$%s"' % n for n in _NAMES)
    out = subprocess.run(["bash", "-c", script, str(_ENV_SH)], check=True,
                         capture_output=True, text=True).stdout
    return dict(zip(_NAMES, out.split("\0")))


_S = _settings()
REFENV = pathlib.Path(_S["FERRITE_REFENV"])
REFERENCE = pathlib.Path(_S["FERRITE_REFERENCE"])
LLAMA = pathlib.Path(_S["FERRITE_LLAMACPP"])
LLAMA_BIN = pathlib.Path(_S["FERRITE_LLAMACPP_BIN"])
TRANSLATION = pathlib.Path(_S["FERRITE_TRANSLATION"])
LLAMA_CPP_PYTHON_VERSION = _S["FERRITE_LLAMACPP_PYTHON_VERSION"]


def sha256_file(path):
    """The SHA-256 of a file's bytes, as hex (read in 1 MiB pieces)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for piece in iter(lambda: f.read(1 << 20), b""):
            h.update(piece)
    return h.hexdigest()


def use_llama_gguf_py():
    """Puts llama.cpp's own gguf-py (the converter's) first on sys.path, so
    `import gguf` finds it before the venv's gguf package."""
    sys.path.insert(0, str(LLAMA / "gguf-py"))


def llama_tool(name):
    """The path of one llama.cpp binary; exits with a hint when it is missing."""
    path = LLAMA_BIN / name
    if not path.exists():
        sys.exit(f"{path} is missing: build llama.cpp with scripts/build-llamacpp.sh "
                 f"(or set FERRITE_LLAMACPP)")
    return path


def free_port():
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(port, path, proc, timeout=180):
    """Waits until GET `path` on 127.0.0.1:`port` answers 200 (ferrite's
    /ready, llama-server's /health); raises if `proc` exits first."""
    import http.client
    import time

    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", path)
            if c.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError("server not ready")
