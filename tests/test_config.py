"""Run configuration: defaults, TOML file, ``--set`` overrides and their error messages."""

from __future__ import annotations

import json

import attrs
import pytest

from mqttrl import PROTOCOL_VERSION
from mqttrl.config import (
    ConfigError,
    EnvConfig,
    LearnerConfig,
    RunConfig,
    TrainConfig,
    WorkerConfig,
    from_dict,
    load_config,
    parse_override,
)
from mqttrl.plugin.manager import UnknownPluginError, get_registry
from mqttrl.state.run_dir import write_resolved


@pytest.fixture(scope="module")
def params_class():
    registry = get_registry()
    return lambda name: registry.algorithm(name).params


@pytest.fixture(scope="module")
def dqn_params(params_class):
    return params_class("dqn")


def field_names(cls) -> list[str]:
    return [f.name for f in attrs.fields(cls)]


def write_toml(tmp_path, text: str):
    p = tmp_path / "run.toml"
    p.write_text(text)
    return p


# ---------------------------------------------------------------- defaults
def test_defaults(params_class, dqn_params):
    cfg = load_config(None, [], params_class)
    assert isinstance(cfg, RunConfig)
    assert cfg.run == "cartpole"
    assert cfg.env == EnvConfig() and cfg.env.id == "CartPole-v1" and cfg.env.num_envs == 4
    assert cfg.worker == WorkerConfig()
    assert cfg.learner == LearnerConfig()
    assert cfg.train == TrainConfig()
    assert cfg.algorithm.name == "dqn"
    assert cfg.algorithm.params == dqn_params()
    assert type(cfg.algorithm.params) is dqn_params


def test_defaults_without_params_class_keep_raw_hyperparameters():
    cfg = load_config(None, ["algorithm.lr=0.5"])
    assert cfg.algorithm.params == {"lr": 0.5}
    assert load_config(None).algorithm.params is None


# ---------------------------------------------------------------- TOML file
def test_toml_file_overrides_defaults(tmp_path, params_class):
    path = write_toml(
        tmp_path,
        """
run = "my-run.1"

[env]
id = "gym/CartPole-v1"
num_envs = 2
kwargs = { max_episode_steps = 100 }

[algorithm]
name = "dqn"
lr = 0.0005
hidden = [64, 32]
prioritized = true

[worker]
batch_size = 32
max_batch_delay_s = 1      # an int where a float is expected: widened

[learner]
checkpoint_every = 0
device = "cpu"

[train]
target_return = 200
""",
    )
    cfg = load_config(path, [], params_class)
    assert cfg.run == "my-run.1"
    assert cfg.env.id == "gym/CartPole-v1" and cfg.env.num_envs == 2
    assert cfg.env.kwargs == {"max_episode_steps": 100}
    assert cfg.algorithm.params.lr == 0.0005
    assert cfg.algorithm.params.hidden == [64, 32]
    assert cfg.algorithm.params.prioritized is True
    assert cfg.worker.batch_size == 32
    assert cfg.worker.max_batch_delay_s == 1.0 and isinstance(cfg.worker.max_batch_delay_s, float)
    assert cfg.learner.checkpoint_every == 0
    assert cfg.train.target_return == 200.0
    # untouched values keep their defaults
    assert cfg.worker.outbox_limit == WorkerConfig().outbox_limit
    assert cfg.algorithm.params.gamma == params_class("dqn")().gamma


def test_missing_and_invalid_toml_file(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.toml")
    bad = write_toml(tmp_path, "[worker\nbatch_size = 3")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(bad)


# ---------------------------------------------------------------- --set
def test_set_overrides_take_precedence_over_file(tmp_path, params_class):
    path = write_toml(tmp_path, "[worker]\nbatch_size = 32\n[algorithm]\nlr = 0.1\n")
    cfg = load_config(path, ["worker.batch_size=64", "algorithm.lr=0.002"], params_class)
    assert cfg.worker.batch_size == 64
    assert cfg.algorithm.params.lr == 0.002


@pytest.mark.parametrize(
    "item,getter,expected",
    [
        ("worker.batch_size=256", lambda c: c.worker.batch_size, 256),
        ("learner.max_payload_mb=3", lambda c: c.learner.max_payload_mb, 3.0),
        ("learner.checkpoint_replay=false", lambda c: c.learner.checkpoint_replay, False),
        ("algorithm.dueling=false", lambda c: c.algorithm.params.dueling, False),
        ("algorithm.hidden=[16, 8]", lambda c: c.algorithm.params.hidden, [16, 8]),
        ("algorithm.lr=1e-4", lambda c: c.algorithm.params.lr, 1e-4),
        (
            "env.kwargs={max_episode_steps = 50, render_mode = 'rgb_array'}",
            lambda c: c.env.kwargs,
            {"max_episode_steps": 50, "render_mode": "rgb_array"},
        ),
        ('learner.device="cuda:1"', lambda c: c.learner.device, "cuda:1"),
        ("train.target_return=12.5", lambda c: c.train.target_return, 12.5),
        ('train.target_return="none"', lambda c: c.train.target_return, None),
        ("train.target_return=none", lambda c: c.train.target_return, None),
        # bare strings (not valid TOML values) are taken as strings
        ("env.id=LunarLander-v3", lambda c: c.env.id, "LunarLander-v3"),
        ("env.id=mypkg.envs:Maze-v0", lambda c: c.env.id, "mypkg.envs:Maze-v0"),
        ("learner.device=cuda", lambda c: c.learner.device, "cuda"),
        ("run=exp_7", lambda c: c.run, "exp_7"),
        ("algorithm.name=dqn", lambda c: c.algorithm.name, "dqn"),
        (" worker.batch_size =7", lambda c: c.worker.batch_size, 7),
    ],
)
def test_set_values(item, getter, expected, params_class):
    cfg = load_config(None, [item], params_class)
    value = getter(cfg)
    assert value == expected and type(value) is type(expected)


def test_parse_override():
    assert parse_override("a.b=1") == (["a", "b"], 1)
    assert parse_override("a.b=x=y") == (["a", "b"], "x=y")  # split at the first '='
    assert parse_override("a.b='quoted'") == (["a", "b"], "quoted")
    assert parse_override("a.b=") == (["a", "b"], "")
    with pytest.raises(ConfigError, match="section.key=value"):
        parse_override("worker.batch_size")
    with pytest.raises(ConfigError, match="empty key"):
        parse_override(".=3")


# ---------------------------------------------------------------- unknown keys
@pytest.mark.parametrize(
    "section,cls", [("worker", WorkerConfig), ("learner", LearnerConfig), ("env", EnvConfig), ("train", TrainConfig)]
)
def test_unknown_key_names_key_and_allowed(section, cls, params_class):
    with pytest.raises(ConfigError) as ei:
        load_config(None, [f"{section}.bogus_key=1"], params_class)
    msg = str(ei.value)
    assert f"{section}.bogus_key" in msg
    for name in field_names(cls):
        assert name in msg


def test_unknown_key_in_toml_file(tmp_path, params_class):
    path = write_toml(tmp_path, "[learner]\npublish_evry = 5\n")
    with pytest.raises(ConfigError) as ei:
        load_config(path, [], params_class)
    assert "learner.publish_evry" in str(ei.value) and "publish_every" in str(ei.value)
    assert "(did you mean publish_every?)" in str(ei.value)  # issue 21


def test_unknown_section(params_class):
    with pytest.raises(ConfigError) as ei:
        load_config(None, ["wrker.batch_size=3"], params_class)
    msg = str(ei.value)
    assert "'wrker'" in msg
    for name in ("algorithm", "env", "learner", "run", "train", "worker"):
        assert name in msg


def test_unknown_algorithm_param_lists_allowed(params_class, dqn_params):
    with pytest.raises(ConfigError) as ei:
        load_config(None, ["algorithm.nope=1"], params_class)
    msg = str(ei.value)
    assert "algorithm.nope" in msg
    for name in field_names(dqn_params):
        assert name in msg


# ---------------------------------------------------------------- bad values
@pytest.mark.parametrize(
    "item,needles",
    [
        ("worker.batch_size=abc", ["worker.batch_size", "'abc'", "integer"]),
        ("worker.batch_size=1.5", ["worker.batch_size", "1.5", "integer"]),
        ("worker.batch_size=true", ["worker.batch_size", "True", "integer"]),
        ("worker.batch_size=0", ["worker.batch_size", "0", "> 0"]),
        ("worker.batch_size=-4", ["worker.batch_size", "-4", "> 0"]),
        ("worker.max_batch_delay_s=-0.5", ["worker.max_batch_delay_s", "-0.5", "> 0"]),
        ("learner.max_staleness=-1", ["learner.max_staleness", "-1", ">= 0"]),
        ("learner.checkpoint_replay=1", ["learner.checkpoint_replay", "1", "true or false"]),
        ("learner.checkpoint_replay=yes", ["learner.checkpoint_replay", "'yes'", "true or false"]),
        ("learner.device=3", ["learner.device", "3", "string"]),
        ("env.kwargs=[1]", ["env.kwargs", "[1]", "table"]),
        ("env.num_envs=0", ["env.num_envs", "0", "> 0"]),
        ("train.target_return=high", ["train.target_return", "'high'", "number"]),
        ("train.max_seconds=-1", ["train.max_seconds", "-1", ">= 0"]),
        ("algorithm.lr=-1", ["algorithm.lr", "-1", "> 0"]),
        ("algorithm.lr=fast", ["algorithm.lr", "'fast'", "number"]),
        ("algorithm.gamma=1.5", ["algorithm.gamma", "1.5"]),
        ("algorithm.batch_size=0", ["algorithm.batch_size", "0", "> 0"]),
        ("algorithm.hidden=[64, 0]", ["algorithm.hidden", "[64, 0]", "positive"]),
        ("algorithm.hidden=64", ["algorithm.hidden", "64", "list"]),
        ("algorithm.dueling=maybe", ["algorithm.dueling", "'maybe'", "true or false"]),
        ("run=a/b", ["a/b", "run"]),
        ("run=3", ["run=3", "string"]),
        ("algorithm=dqn", ["algorithm", "'dqn'", "table"]),
        ("algorithm=5", ["algorithm", "5", "table"]),
        ("algorithm.params=3", ["algorithm.params", "3", "table"]),
        ("algorithm.name=7", ["algorithm.name", "7", "string"]),
        ("worker=3", ["worker", "3", "table"]),
        ("run.x=1", ["run"]),
    ],
)
def test_bad_values_name_key_and_value(item, needles, params_class):
    with pytest.raises(ConfigError) as ei:
        load_config(None, [item], params_class)
    msg = str(ei.value)
    for needle in needles:
        assert needle in msg, f"{needle!r} not in {msg!r}"


def test_bad_value_in_toml_file(tmp_path, params_class):
    path = write_toml(tmp_path, "[worker]\noutbox_limit = -3\n")
    with pytest.raises(ConfigError, match=r"worker\.outbox_limit=-3"):
        load_config(path, [], params_class)


def test_config_error_is_a_value_error():
    assert issubclass(ConfigError, ValueError)


# ---------------------------------------------------------------- plugins
def test_unknown_algorithm_lists_installed(params_class):
    with pytest.raises(UnknownPluginError) as ei:
        load_config(None, ["algorithm.name=ppo_nonexistent"], params_class)
    msg = str(ei.value)
    assert "ppo_nonexistent" in msg
    installed = sorted(get_registry().algorithms)
    assert "dqn" in installed
    for name in installed:
        assert name in msg


# ---------------------------------------------------------------- round trips
def test_to_dict_from_dict_round_trip(tmp_path, params_class):
    cfg = load_config(
        None,
        [
            "run=rt",
            "algorithm.lr=0.003",
            "algorithm.hidden=[8]",
            "env.kwargs={a = 1}",
            "worker.batch_size=9",
            "train.target_return=1.25",
            "learner.checkpoint_replay=false",
        ],
        params_class,
    )
    d = cfg.to_dict()
    assert d["protocol"] == PROTOCOL_VERSION
    assert d["algorithm"]["name"] == "dqn" and d["algorithm"]["params"]["lr"] == 0.003
    again = from_dict(d, params_class)
    assert again == cfg
    # through JSON too (what the learner publishes retained and workers read)
    assert from_dict(json.loads(json.dumps(d)), params_class) == cfg
    # and through the resolved config file of a run directory
    out = tmp_path / "run" / "config.json"
    write_resolved(cfg, out)
    assert from_dict(json.loads(out.read_text()), params_class) == cfg
    assert not list(out.parent.glob("*.tmp"))


def test_round_trip_is_not_trivially_equal(params_class):
    a = load_config(None, ["algorithm.lr=0.003"], params_class)
    b = load_config(None, ["algorithm.lr=0.004"], params_class)
    assert a != b
    assert from_dict(a.to_dict(), params_class) != b


def test_flat_keys_override_nested_params(params_class):
    d = load_config(None, ["algorithm.lr=0.003"], params_class).to_dict()
    d["algorithm"]["lr"] = 0.007  # flat key beside the nested form wins
    assert from_dict(d, params_class).algorithm.params.lr == 0.007


def test_a_resolved_config_json_loads_with_overrides(tmp_path):
    params = lambda n: get_registry().algorithm(n).params  # noqa: E731
    cfg = load_config(None, ["algorithm.name=ppo", "env.num_envs=3"], params)
    path = tmp_path / "config.json"
    write_resolved(cfg, path)
    again = load_config(path, ["learner.publish_every=7"], params)
    assert again.learner.publish_every == 7
    assert again.env == cfg.env and again.algorithm.params == cfg.algorithm.params
    path.write_text("[1, 2]")
    with pytest.raises(ConfigError, match="expected a JSON object"):
        load_config(path, [], params)
    path.write_text("{not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_config(path, [], params)
