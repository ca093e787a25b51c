"""A config that does not parse because of a character nobody can see says which one it is."""

from __future__ import annotations

import subprocess
import sys

import pytest

from mqttrl.config import ConfigError, load_config

GOOD = 'run = "x"\n[env]\nid = "CartPole-v1"\n'


def refusal(tmp_path, data: bytes) -> str:
    path = tmp_path / "c.toml"
    path.write_bytes(data)
    with pytest.raises(ConfigError) as e:
        load_config(path)
    return str(e.value)


def test_a_byte_order_mark_is_named(tmp_path):
    line = refusal(tmp_path, b"\xef\xbb\xbf" + GOOD.encode())
    assert "starts with a byte-order mark (U+FEFF)" in line and "without a BOM" in line


def test_a_no_break_space_is_named_with_its_place_and_fix(tmp_path):
    line = refusal(tmp_path, GOOD.replace('id = "', 'id =\u00a0"').encode())
    assert "U+00A0 NO-BREAK SPACE" in line and "line 3, column 5" in line
    assert "replace it with a plain space" in line


def test_a_zero_width_space_is_named_and_to_be_deleted(tmp_path):
    line = refusal(tmp_path, GOOD.replace("[env]", "[env]\u200b").encode())
    assert "U+200B ZERO WIDTH SPACE" in line and "line 2" in line and "delete it" in line


def test_a_visible_mistake_keeps_tomllib_s_message(tmp_path):
    line = refusal(tmp_path, GOOD.replace('id = "CartPole-v1"', "id = CartPole").encode())
    assert "is not valid TOML: Invalid value (at line 3, column 6)" in line and "U+" not in line


def test_the_command_prints_the_one_line(tmp_path):
    path = tmp_path / "c.toml"
    path.write_bytes(GOOD.replace('id = "', 'id =\u00a0"').encode())
    out = subprocess.run(
        [sys.executable, "-m", "mqttrl", "env-spec", str(path)], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "U+00A0 NO-BREAK SPACE" in lines[0] and "Traceback" not in out.stderr
