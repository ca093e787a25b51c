"""Checkpoints: atomic writes, reading back, pruning, the latest marker and named saves."""

from __future__ import annotations

import json

import numpy as np
import pytest

import mqttrl.state.checkpoint as ckpt
from mqttrl.state.checkpoint import CheckpointError, CheckpointStore, read_checkpoint, write_checkpoint


def tensors(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "net.w": rng.standard_normal((4, 3)).astype(np.float32),
        "net.b": rng.standard_normal(3).astype(np.float64),
        "replay.actions": rng.integers(0, 5, 17).astype(np.int64),
        "replay.done": rng.integers(0, 2, 17).astype(bool),
        "strided": np.arange(20, dtype=np.int32).reshape(4, 5)[:, ::2],  # not contiguous
    }


def assert_same(a: dict, b: dict) -> None:
    assert set(a) == set(b)
    for k in a:
        assert a[k].dtype == b[k].dtype, k
        np.testing.assert_array_equal(a[k], b[k])


def leftovers(parent) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.startswith((".tmp-", ".old-")))


# ---------------------------------------------------------------- write/read
def test_write_and_read_round_trip(tmp_path):
    t, meta = tensors(0), {"updates": 5, "version": 2, "nested": {"a": [1, 2.5, None]}}
    path = write_checkpoint(tmp_path / "run" / "ckpt", t, meta)  # parents are created
    assert path == tmp_path / "run" / "ckpt"
    assert sorted(p.name for p in path.iterdir()) == ["meta.json", "state.safetensors"]
    got, got_meta = read_checkpoint(path)
    assert_same(got, t)
    assert got_meta == meta
    assert leftovers(path.parent) == []


def test_overwrite_replaces_and_cleans_up(tmp_path):
    target = tmp_path / "ckpt"
    write_checkpoint(target, tensors(0), {"n": 0})
    write_checkpoint(target, {"only": np.ones(2, np.float32)}, {"n": 1})
    got, meta = read_checkpoint(target)
    assert list(got) == ["only"] and meta == {"n": 1}  # a full replacement, not a merge
    assert leftovers(tmp_path) == []


def _failing_save(calls):
    def save_file(tensors, filename, *a, **kw):
        calls.append(filename)
        # write part of the file first, as a crash half way would
        with open(filename, "wb") as fh:
            fh.write(b'\x08\x00\x00\x00\x00\x00\x00\x00{"a":')
        raise OSError("disk full")

    return save_file


def test_failed_write_keeps_previous_checkpoint(tmp_path, monkeypatch):
    target = tmp_path / "ckpt"
    before = tensors(1)
    write_checkpoint(target, before, {"version": 1})
    calls: list[str] = []
    failing = _failing_save(calls)
    monkeypatch.setattr(ckpt, "save_file", failing)
    with pytest.raises(OSError, match="disk full"):
        write_checkpoint(target, tensors(2), {"version": 2})
    assert calls and ".tmp-" in calls[0]  # it wrote into a temp dir, never into the live one
    got, meta = read_checkpoint(target)
    assert_same(got, before)
    assert meta == {"version": 1}
    assert leftovers(tmp_path) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]


def test_unsaveable_array_leaves_previous_checkpoint(tmp_path):
    """A real failure from safetensors (an array it cannot store), no monkeypatching."""
    target = tmp_path / "ckpt"
    before = tensors(1)
    write_checkpoint(target, before, {"version": 1})
    bad = dict(tensors(2), broken=np.array([object(), object()]))
    with pytest.raises(Exception):
        write_checkpoint(target, bad, {"version": 2})
    got, meta = read_checkpoint(target)
    assert_same(got, before) and meta == {"version": 1}
    assert leftovers(tmp_path) == []


def test_failed_meta_write_leaves_previous_checkpoint(tmp_path):
    target = tmp_path / "ckpt"
    write_checkpoint(target, tensors(1), {"version": 1})
    with pytest.raises(TypeError):
        write_checkpoint(target, tensors(2), {"version": object()})  # not JSON
    assert read_checkpoint(target)[1] == {"version": 1}
    assert leftovers(tmp_path) == []


def test_failed_first_write_leaves_nothing(tmp_path, monkeypatch):
    failing = _failing_save([])
    monkeypatch.setattr(ckpt, "save_file", failing)
    with pytest.raises(OSError):
        write_checkpoint(tmp_path / "ckpt", tensors(0), {})
    assert list(tmp_path.iterdir()) == []


def test_read_errors_are_checkpoint_errors(tmp_path):
    with pytest.raises(CheckpointError, match="cannot read checkpoint"):
        read_checkpoint(tmp_path / "missing")
    path = write_checkpoint(tmp_path / "c1", tensors(0), {"a": 1})
    (path / "meta.json").write_text("{not json")
    with pytest.raises(CheckpointError):
        read_checkpoint(path)
    path = write_checkpoint(tmp_path / "c2", tensors(0), {"a": 1})
    (path / "state.safetensors").write_bytes(b"\xff" * 8 + b"garbage")
    with pytest.raises(CheckpointError):
        read_checkpoint(path)
    path = write_checkpoint(tmp_path / "c3", tensors(0), {"a": 1})
    data = (path / "state.safetensors").read_bytes()
    (path / "state.safetensors").write_bytes(data[: len(data) // 2])  # truncated
    with pytest.raises(CheckpointError):
        read_checkpoint(path)


# ---------------------------------------------------------------- the store
def periodic(root) -> list[str]:
    return sorted(p.name for p in root.glob("ckpt-*"))


def test_store_prunes_to_keep_and_marks_latest(tmp_path):
    store = CheckpointStore(tmp_path / "checkpoints", keep=3)
    assert store.latest() is None
    for i, updates in enumerate([100, 200, 900, 1000, 5000]):  # 900 < 1000 numerically, not as text
        path = store.save_periodic(updates, {"w": np.full(2, updates, np.int64)}, {"updates": updates})
        assert path.name == f"ckpt-{updates:010d}"
        assert store.latest() == path
        assert (store.root / "latest").read_text().strip() == path.name
        assert len(periodic(store.root)) == min(i + 1, 3)
    assert periodic(store.root) == ["ckpt-0000000900", "ckpt-0000001000", "ckpt-0000005000"]
    tensors_, meta = read_checkpoint(store.latest())
    assert meta == {"updates": 5000} and tensors_["w"].tolist() == [5000, 5000]
    assert not (store.root / ".latest.tmp").exists()
    assert leftovers(store.root) == []


@pytest.mark.parametrize("keep", [1, 2, 5])
def test_store_keep_n(tmp_path, keep):
    store = CheckpointStore(tmp_path, keep=keep)
    for u in range(1, 8):
        store.save_periodic(u, {"w": np.zeros(1)}, {"u": u})
    assert periodic(tmp_path) == [f"ckpt-{u:010d}" for u in range(max(1, 8 - keep), 8)]


def test_named_saves_are_kept_and_become_latest(tmp_path):
    store = CheckpointStore(tmp_path, keep=2)
    store.save_periodic(10, {"w": np.zeros(1)}, {"u": 10})
    q = store.save_named("quicksave", {"w": np.ones(1)}, {"u": 11})
    assert store.latest() == q == tmp_path / "quicksave"
    for u in (20, 30, 40, 50):
        store.save_periodic(u, {"w": np.zeros(1)}, {"u": u})
    assert (tmp_path / "quicksave" / "meta.json").exists()  # not pruned
    assert periodic(tmp_path) == ["ckpt-0000000040", "ckpt-0000000050"]
    assert store.latest() == tmp_path / "ckpt-0000000050"
    best = store.save_named("best", {"w": np.full(1, 7.0)}, {"u": 51})
    assert store.latest() == best
    assert read_checkpoint(store.latest())[1] == {"u": 51}
    # saving a name again replaces it
    store.save_named("quicksave", {"w": np.full(1, 3.0)}, {"u": 60})
    assert read_checkpoint(tmp_path / "quicksave")[1] == {"u": 60}
    assert store.latest() == tmp_path / "quicksave"
    assert leftovers(tmp_path) == []


def test_latest_falls_back_when_marker_is_stale_or_missing(tmp_path):
    store = CheckpointStore(tmp_path, keep=5)
    store.save_periodic(1, {"w": np.zeros(1)}, {})
    store.save_periodic(2, {"w": np.zeros(1)}, {})
    (tmp_path / "latest").write_text("quicksave\n")  # names a checkpoint that is not there
    assert store.latest() == tmp_path / "ckpt-0000000002"
    (tmp_path / "latest").unlink()
    assert store.latest() == tmp_path / "ckpt-0000000002"
    # an incomplete directory (no meta.json) is never chosen
    (tmp_path / "ckpt-0000000003").mkdir()
    assert store.latest() == tmp_path / "ckpt-0000000002"


def test_failed_periodic_save_keeps_latest_and_older(tmp_path, monkeypatch):
    store = CheckpointStore(tmp_path, keep=2)
    store.save_periodic(1, {"w": np.zeros(1)}, {"u": 1})
    store.save_periodic(2, {"w": np.ones(1)}, {"u": 2})
    failing = _failing_save([])
    monkeypatch.setattr(ckpt, "save_file", failing)
    with pytest.raises(OSError):
        store.save_periodic(3, {"w": np.zeros(1)}, {"u": 3})
    # nothing was pruned and latest still names a complete checkpoint
    assert periodic(tmp_path) == ["ckpt-0000000001", "ckpt-0000000002"]
    assert store.latest() == tmp_path / "ckpt-0000000002"
    assert json.loads((store.latest() / "meta.json").read_text()) == {"u": 2}
    assert leftovers(tmp_path) == []
