"""What the tests share, in one place: real servers, node processes, run configs, observers.

Test modules import from here (``from helpers.procs import Proc``), never from another test
module or from ``conftest`` (which keeps only fixtures and hooks). pytest puts ``tests/`` on
``sys.path`` (the rootdir conftest's folder, in its default "prepend" import mode), which makes
this package importable as ``helpers``.
"""
