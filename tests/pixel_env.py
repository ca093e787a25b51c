"""The module name of the tiny image envs' ids, ``pixel_env:PixelDot-v0`` and ``pixel_env:BoolGrid-v0``.

mqttrl makes a ``module:Env-v0`` id by importing ``module``; a node process the tests start finds
this file with the tests folder on its PYTHONPATH. Importing it registers the envs, which live in
``helpers/pixel_env.py`` (tests import them from there).
"""

from helpers.pixel_env import BOOL_GRID, PIXEL_DOT, PYTHONPATH, BoolGrid, PixelDot

__all__ = ["BOOL_GRID", "PIXEL_DOT", "PYTHONPATH", "BoolGrid", "PixelDot"]
