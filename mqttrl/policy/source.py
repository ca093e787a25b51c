"""Which model a path names, and why: the choice :func:`mqttrl.load_policy` makes before reading.

A run directory holds two candidates: its best model (``best/``, with the score that made it
best in ``best/score.json``) and its newest checkpoint (``checkpoints/latest``). A best model is
only as good as its judge: a greedy evaluation measures the policy that will play, while
training returns are noisy and include the workers' exploration, so a later model often plays
better than the one they judged best. ``which="auto"`` therefore takes the best model when a
greedy evaluation judged it, else the newest checkpoint; ``"best"`` and ``"latest"`` choose
explicitly. Every choice carries its reason, which ``mqttrl enjoy`` and ``export`` print.

``best/score.json`` (written by the trainer and the telemetry node)::

    {"score": 500.0, "model_version": 1180, "judged_by": "greedy_eval", "episodes": 10}

``judged_by`` is ``"greedy_eval"`` or ``"training_returns"``. Runs written before it existed
keep ``best/evaluation.json`` (``mqttrl train``'s greedy evaluation) or ``checkpoints/best/best.json``
(telemetry's moving average of training returns): both are read as the same score.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import attrs

__all__ = ["EXPECTED", "WEIGHTS_FILE", "WHICH", "Choice", "ModelSource", "PolicyLoadError", "Score", "locate"]

#: the file name of exported weights in a run (``best/``) and in ``checkpoints/best/``
WEIGHTS_FILE = "weights.safetensors"
#: the ways to choose a run directory's model (``load_policy(which=...)``, ``mqttrl enjoy --which``)
WHICH = ("auto", "best", "latest")
GREEDY_EVAL = "greedy_eval"
TRAINING_RETURNS = "training_returns"
EXPECTED = (
    "a run directory (config.json, checkpoints/), its checkpoints/ folder or checkpoints/latest, a checkpoint "
    "directory (meta.json + state.safetensors) or a weights.safetensors file"
)


class PolicyLoadError(ValueError):
    """A path that holds no model that loads; the message is one line naming the path and what was expected."""


@attrs.frozen
class ModelSource:
    """What a policy was read from (a weights file or a checkpoint directory), its model version and
    why that model was chosen. ``str()`` and ``os.fspath()`` give the path."""

    path: Path
    model_version: int
    reason: str

    def __fspath__(self) -> str:
        return str(self.path)

    def __str__(self) -> str:
        return str(self.path)


@attrs.frozen
class Choice:
    """The model to read: ``kind`` "weights" (a file) or "checkpoint" (a directory), and why."""

    kind: str
    path: Path
    reason: str


@attrs.frozen
class Score:
    """Why a best model is best: its mean return, judged by a greedy evaluation or by training returns."""

    score: float
    model_version: int | None
    judged_by: str
    episodes: int | None

    @property
    def greedy(self) -> bool:
        return self.judged_by == GREEDY_EVAL

    def describe(self) -> str:
        how = "a greedy evaluation" if self.greedy else "training returns"
        over = f" over {self.episodes} episodes" if self.episodes else ""
        return f"judged best by {how}: mean return {self.score:.1f}{over}"


# ---- the best model's score ------------------------------------------------------------------------
def _json_object(file: Path) -> dict:
    data = json.loads(file.read_text())
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    return data


def _number(data: dict, key: str) -> float:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{key!r} is {value!r}, not a number")
    return float(value)


def _whole(data: dict, key: str) -> int | None:
    value = data.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _score_file(file: Path) -> Score:
    data = _json_object(file)
    judged_by = data.get("judged_by")
    if judged_by not in (GREEDY_EVAL, TRAINING_RETURNS):
        raise ValueError(f"'judged_by' is {judged_by!r}, not {GREEDY_EVAL!r} or {TRAINING_RETURNS!r}")
    return Score(_number(data, "score"), _whole(data, "model_version"), judged_by, _whole(data, "episodes"))


def read_score(best: Path) -> tuple[Score | None, str]:
    """The score of the best model in folder ``best``, or None and why there is none."""
    readers = (
        ("score.json", _score_file),
        ("evaluation.json", lambda f: _legacy(f, "mean", "episodes", GREEDY_EVAL)),  # mqttrl train, before score.json
        ("best.json", lambda f: _legacy(f, "mean_return", "window", TRAINING_RETURNS)),  # telemetry's, before it
    )
    for name, read in readers:
        file = best / name
        if file.is_file():
            try:
                return read(file), ""
            except (OSError, ValueError) as e:
                return None, f"its score file {file} does not read ({e})"
    return None, f"it has no score file ({best / 'score.json'})"


def _legacy(file: Path, score_key: str, episodes_key: str, judged_by: str) -> Score:
    data = _json_object(file)
    return Score(_number(data, score_key), _whole(data, "model_version"), judged_by, _whole(data, episodes_key))


# ---- locating the model ------------------------------------------------------------------------------
def is_checkpoint(d: Path) -> bool:
    return (d / "meta.json").is_file() and (d / "state.safetensors").is_file()


def _model_in(d: Path) -> tuple[str, Path] | None:
    """The model of a best folder: its exact weights file, else its checkpoint."""
    if (d / WEIGHTS_FILE).is_file():
        return "weights", d / WEIGHTS_FILE
    if is_checkpoint(d):
        return "checkpoint", d
    return None


def _run_layout(path: Path) -> tuple[Path | None, Path] | None:
    """(run directory or None, checkpoints folder) when ``path`` is a run directory or its checkpoints
    folder, where there is a choice to make; None for a path that names one model."""
    if path.is_file() or is_checkpoint(path):
        return None
    if path.name == "checkpoints" or (path / "latest").is_file() or any(path.glob("ckpt-*")):
        return (path.parent if path.name == "checkpoints" else None), path
    if (path / "checkpoints").is_dir() or (path / "config.json").is_file() or _model_in(path / "best"):
        return path, path / "checkpoints"
    return None


def locate(path: Path, which: str = "auto") -> Choice:
    """The model ``path`` names (see the module docstring for a run directory's), and why."""
    if which not in WHICH:
        raise PolicyLoadError(f"which={which!r}: use one of {', '.join(WHICH)}")
    note = ""
    if not path.exists():
        path, note = _newest_named(path)
    layout = _run_layout(path)
    if layout is None:
        if which != "auto":
            raise PolicyLoadError(
                f"{path} names one model; which={which!r} chooses between the best and the newest model of a run: "
                f"pass the run directory"
            )
        return _one_model(path)
    choice = _choose(path, *layout, which)
    return attrs.evolve(choice, reason=choice.reason + note) if note else choice


def newest_run_named(path: Path) -> Path:
    """``runs/cartpole-dqn`` when only ``runs/cartpole-dqn-<timestamp>`` folders exist (what
    ``mqttrl train`` makes): the newest of them that holds a model, so a run's name is enough and a
    launch that failed since does not hide the last trained model; else FileNotFoundError."""
    return _newest_named(path)[0]


def _newest_named(path: Path) -> tuple[Path, str]:
    """:func:`newest_run_named` and a note naming the newer runs it passed over ('' when none)."""
    stamped = [p for p in path.parent.glob(f"{path.name}-*") if p.is_dir() and _run_layout(p) is not None]
    if not stamped:
        raise FileNotFoundError(f"{path}: no such file or directory; expected {EXPECTED}")
    newest_first = sorted(stamped, key=lambda p: (p.stat().st_mtime, p.name), reverse=True)
    for i, run in enumerate(newest_first):
        if _holds_model(run):
            passed = ", ".join(p.name for p in newest_first[:i])
            note = (
                f"; the newest run named {path.name} with a model ({passed} {'holds' if i == 1 else 'hold'} none)"
                if i
                else ""
            )
            return run, note
    return newest_first[0], ""  # no run holds a model: the newest says so when it is read


def _holds_model(run: Path) -> bool:
    """Whether a run directory holds a best model or a checkpoint (a failed launch holds neither)."""
    if _model_in(run / "best") or _model_in(run / "checkpoints" / "best"):
        return True
    try:
        return _newest(run / "checkpoints") is not None
    except PolicyLoadError:
        return False


def _one_model(path: Path) -> Choice:
    if path.is_file():
        if path.name in ("meta.json", "state.safetensors") and is_checkpoint(path.parent):
            return _one_model(path.parent)
        if path.name == "latest":
            return _marked(path)
        if path.name == "config.json" and _run_layout(path.parent) is not None:
            return locate(path.parent)
        return Choice("weights", path, _best_reason(path.parent, "the weights file named"))
    if is_checkpoint(path):
        if (path / WEIGHTS_FILE).is_file():  # checkpoints/best/: the exact weights of the judged version
            return Choice("weights", path / WEIGHTS_FILE, _best_reason(path, "the exact weights this checkpoint keeps"))
        return Choice("checkpoint", path, "the checkpoint named")
    if (path / WEIGHTS_FILE).is_file():
        return Choice("weights", path / WEIGHTS_FILE, _best_reason(path, "the weights file in the folder named"))
    raise PolicyLoadError(f"{path} holds no mqttrl model; expected {EXPECTED}")


def _best_reason(folder: Path, otherwise: str) -> str:
    score, _ = read_score(folder)
    return f"the best model, {score.describe()}" if score is not None else otherwise


def _marked(marker: Path) -> Choice:
    """``checkpoints/latest``: a small text file naming the newest checkpoint folder beside it."""
    try:
        name = marker.read_text(errors="replace").strip()
    except OSError as e:
        raise PolicyLoadError(f"cannot read {marker}: {e}") from None
    target = marker.parent / name
    if not name or "\n" in name or len(name) > 255 or not is_checkpoint(target):
        shown = name[:60] + ("..." if len(name) > 60 else "")
        raise PolicyLoadError(
            f"{marker} names {shown!r}, which is no checkpoint in {marker.parent} (meta.json + state.safetensors); "
            f"expected the marker of a checkpoints folder"
        )
    return Choice("checkpoint", target, f"the newest checkpoint ({marker} names it)")


@attrs.frozen
class _Best:
    folder: Path
    kind: str
    path: Path
    score: Score | None
    unscored: str


def _bests(root: Path | None, ckpts: Path) -> list[_Best]:
    """The run's best models (``best/``, then ``checkpoints/best/``), those a greedy evaluation judged first."""
    found = []
    for folder in ([root / "best"] if root is not None else []) + [ckpts / "best"]:
        model = _model_in(folder)
        if model is not None:
            found.append(_Best(folder, *model, *read_score(folder)))
    return sorted(found, key=lambda b: not (b.score is not None and b.score.greedy))


def _newest(ckpts: Path) -> Path | None:
    if not ckpts.is_dir():
        return None
    from mqttrl.state.checkpoint import CheckpointStore

    try:
        latest = CheckpointStore(ckpts).latest()
    except (OSError, ValueError) as e:  # a marker that is not text
        raise PolicyLoadError(
            f"cannot read {ckpts / 'latest'}: {e}; expected the name of a checkpoint folder"
        ) from None
    return latest if latest is not None and is_checkpoint(latest) else None


def _choose(path: Path, root: Path | None, ckpts: Path, which: str) -> Choice:
    bests, newest = _bests(root, ckpts), _newest(ckpts)
    best = bests[0] if bests else None
    if which == "latest" or (
        which == "auto" and newest is not None and not (best and best.score and best.score.greedy)
    ):
        if newest is None:
            raise PolicyLoadError(f"{path}: which='latest', but {ckpts} holds no checkpoint; expected {EXPECTED}")
        why = ", asked for with which=latest" if which == "latest" else f": {_why_not_best(best)}"
        return Choice("checkpoint", newest, f"the newest checkpoint{why}")
    if best is not None:
        asked = "asked for with which=best, " if which == "best" else ""
        judged = best.score.describe() if best.score else f"not judged: {best.unscored}"
        alone = "; the run has no checkpoint" if which == "auto" and not (best.score and best.score.greedy) else ""
        return Choice(best.kind, best.path, f"the best model, {asked}{judged}{alone}")
    if which == "best":
        raise PolicyLoadError(
            f"{path}: which='best', but the run has no best model (no best/{WEIGHTS_FILE}, no checkpoints/best/); "
            f"which='latest' takes its newest checkpoint"
        )
    if (path / WEIGHTS_FILE).is_file():
        return Choice("weights", path / WEIGHTS_FILE, "the weights file in the folder named")
    raise PolicyLoadError(
        f"{path} is a run directory without a model yet: no best/{WEIGHTS_FILE} and no checkpoint in {ckpts} "
        f"(a run saves one every learner.checkpoint_every updates and when it stops)"
    )


def _why_not_best(best: _Best | None) -> str:
    if best is None:
        return "the run has no best model"
    if best.score is None:
        return f"the best model in {best.folder} is not judged ({best.unscored}); which=best plays it"
    version = f" (version {best.score.model_version})" if best.score.model_version is not None else ""
    over = f" over {best.score.episodes} episodes" if best.score.episodes else ""
    return (
        f"the best model{version} was judged by training returns only (mean {best.score.score:.1f}{over}), which are "
        f"noisy and include exploration; which=best plays it"
    )


def describe_choice(source: Any) -> str:
    """``<path> (model version N, <why>)``: the line ``mqttrl enjoy`` and ``export`` print."""
    return f"{source.path} (model version {source.model_version}, {source.reason})"
