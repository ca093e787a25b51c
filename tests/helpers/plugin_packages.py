"""Third-party plugin packages built and pip-installed on the fly, as a user would install one."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path


def install_package(root: Path, files: dict[str, str]) -> Path:
    """Write a package's files (``pyproject.toml`` and its modules) under ``root/src`` and
    pip-install it into ``root/site`` (no index, no deps); returns the site directory."""
    pkg = root / "src"
    pkg.mkdir(parents=True)
    for name, text in files.items():
        (pkg / name).write_text(textwrap.dedent(text))
    site = root / "site"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--disable-pip-version-check",
            "--quiet",
            "--target",
            str(site),
            str(pkg),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, f"pip install failed:\n{r.stdout}\n{r.stderr}"
    assert list(site.glob("*.dist-info/entry_points.txt")), "the package declares no entry points"
    return site
