"""The shape of the library's code at a commit: its size, its biggest classes, its functions near
the 60-line rule. What docs/architecture.md's "Code shape" tables are made of.

    python scripts/code_shape.py                 # the working tree
    python scripts/code_shape.py --at eba607b    # a commit (read with git show; nothing checked out)
    python scripts/code_shape.py --at A --at B   # side by side

Counts lines of ``mqttrl/`` and ``plugins/`` Python files; a class's or function's length is from
its ``class``/``def`` line to its last line (as tests/test_function_length.py and
tests/test_class_size.py count them).
"""

from __future__ import annotations

import argparse
import ast
import subprocess
import sys
from pathlib import Path

ROOTS = ("mqttrl", "plugins")
REPO = Path(__file__).resolve().parent.parent
#: a function this long or longer is "near the limit" (the rule is 60)
NEAR = 50


def sources(ref: str | None) -> dict[str, str]:
    """path -> text of every .py under the roots, at ``ref`` (None: the working tree)."""
    if ref is None:
        return {p.relative_to(REPO).as_posix(): p.read_text() for r in ROOTS for p in sorted((REPO / r).rglob("*.py"))}
    names = subprocess.run(
        ["git", "ls-tree", "-r", "--name-only", ref, *ROOTS], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    show = lambda n: subprocess.run(["git", "show", f"{ref}:{n}"], cwd=REPO, capture_output=True, text=True).stdout  # noqa: E731
    return {n: show(n) for n in names if n.endswith(".py")}


def shape(files: dict[str, str]) -> dict:
    classes, near = [], []
    lines = 0
    for path, text in files.items():
        lines += len(text.splitlines())
        for node in ast.walk(ast.parse(text)):
            length = getattr(node, "end_lineno", 0) - getattr(node, "lineno", 0) + 1
            if isinstance(node, ast.ClassDef):
                methods = sum(isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) for n in node.body)
                classes.append((length, node.name, path, methods))
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and length >= NEAR:
                near.append((length, node.name, path))
    return {
        "lines": lines,
        "files": len(files),
        "classes": sorted(classes, reverse=True),
        "near": sorted(near, reverse=True),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--at", action="append", help="a commit (repeat to compare); default: the working tree")
    p.add_argument("--top", type=int, default=8, help="the biggest classes to list")
    args = p.parse_args()
    for ref in args.at or [None]:
        s = shape(sources(ref))
        print(f"== {ref or 'working tree'}: {s['lines']:,} lines in {s['files']} files")
        print(f"  classes over 300 lines: {sum(1 for c in s['classes'] if c[0] > 300)}")
        for length, name, path, methods in s["classes"][: args.top]:
            print(f"  {length:5d} lines {methods:3d} methods  {name} ({path})")
        over = [f for f in s["near"] if f[0] > 60]
        print(
            f"  functions of {NEAR}-60 lines: {len(s['near']) - len(over)}; over 60 (with a stated reason): {len(over)}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
