"""Run isolation on a shared mosquitto through its dynamic security plugin (``mqttrl broker``).

Every run gets one role per node kind (:data:`RIGHTS`: exactly the topics of
:mod:`mqttrl.transport.topics` that kind publishes and reads, in that run only) and one
client per kind holding that role, with a generated password. The plugin is driven over
MQTT (``$CONTROL/dynamic-security/v1``) by an admin client; :func:`init_files` writes the
plugin's first JSON file (with that admin) and a mosquitto config that loads it.

Names: the role and the client of kind K in run R are both called ``R-K`` (kinds contain no
``-``, so two runs never share a name). A worker may also get an identity of its own,
``R-worker@NAME`` (``add-run --workers``, ``add-workers``): its role lets it publish only under
its own name, so workers of one run cannot speak for each other (``@`` is in no mqttrl name:
no other run or kind ends up with such a name). See broker/README.md ("Run isolation").
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import secrets
import threading
import uuid
from collections.abc import Callable
from pathlib import Path

import paho.mqtt.client as mqtt

from mqttrl.transport.client import BrokerSettings
from mqttrl.transport.connection import configure
from mqttrl.transport.topics import Kind, Topics, check_name

CONTROL = "$CONTROL/dynamic-security/v1"
RESPONSE = CONTROL + "/response"

#: the node kinds that get a role and a client per run, in the order they are printed
NODE_KINDS = ("learner", "worker", "inference", "telemetry", "operator")

K = Kind
#: node kind -> (topic kinds it publishes, topic kinds it reads), all in its own run
RIGHTS: dict[str, tuple[frozenset[Kind], frozenset[Kind]]] = {
    # reads its own retained weights on --resume (never publish an older version), and the env spec a
    # worker made when its config carries none (a learner host without the game)
    "learner": (
        frozenset({K.CONFIG, K.WEIGHTS, K.FLOW, K.LEARNER_STATE, K.LEARNER_METRICS, K.REPLY, K.ENV_SPEC}),
        frozenset({K.SAMPLES, K.HEARTBEAT, K.WORKER_STATE, K.COMMAND, K.WEIGHTS, K.ENV_SPEC}),
    ),
    # remote inference: requests to the servers, replies and server states back; the env spec of its game;
    # greedy evaluations it plays on its game (train.eval_on = "workers")
    "worker": (
        frozenset({K.SAMPLES, K.EPISODES, K.HEARTBEAT, K.WORKER_STATE, K.INFER_REQUEST, K.ENV_SPEC, K.EVAL}),
        frozenset({K.CONFIG, K.WEIGHTS, K.FLOW, K.LEARNER_STATE, K.INFER_REPLY, K.INFERENCE_STATE, K.ENV_SPEC}),
    ),
    "inference": (
        frozenset({K.INFER_REPLY, K.INFERENCE_STATE, K.INFERENCE_METRICS}),
        frozenset({K.CONFIG, K.WEIGHTS, K.INFER_REQUEST}),
    ),
    # everything of the run but the bulk data (samples, weights, inference traffic); quicksave commands
    "telemetry": (
        frozenset({K.COMMAND}),
        frozenset(
            {
                K.CONFIG,
                K.FLOW,
                K.LEARNER_STATE,
                K.LEARNER_METRICS,
                K.EPISODES,
                K.HEARTBEAT,
                K.WORKER_STATE,
                K.EVAL,
                K.INFERENCE_STATE,
                K.INFERENCE_METRICS,
            }
        ),
    ),
    # mqttrl status / quicksave / evaluate, and the monitor of `mqttrl train`: commands and
    # evaluation results out; states, metrics, episodes, the model and command replies in
    "operator": (
        frozenset({K.COMMAND, K.EVAL}),
        frozenset(
            {
                K.CONFIG,
                K.WEIGHTS,
                K.FLOW,
                K.LEARNER_STATE,
                K.LEARNER_METRICS,
                K.EPISODES,
                K.HEARTBEAT,
                K.WORKER_STATE,
                K.EVAL,
                K.REPLY,
                K.INFERENCE_STATE,
                K.INFERENCE_METRICS,
            }
        ),
    ),
}

#: the plugin's defaults for what no ACL names: deny all but unsubscribing
DEFAULT_ACL_ACCESS = {
    "publishClientSend": False,
    "publishClientReceive": False,
    "subscribe": False,
    "unsubscribe": True,
}

#: where Debian/Ubuntu, the eclipse-mosquitto image, Fedora and source installs put the plugin
PLUGIN_PATHS = (
    "/usr/lib/x86_64-linux-gnu/mosquitto_dynamic_security.so",
    "/usr/lib/aarch64-linux-gnu/mosquitto_dynamic_security.so",
    "/usr/lib/mosquitto_dynamic_security.so",
    "/usr/lib64/mosquitto_dynamic_security.so",
    "/usr/local/lib/mosquitto_dynamic_security.so",
)


class DynsecError(RuntimeError):
    """The plugin refused a command, or did not answer."""


def find_plugin() -> str | None:
    return next((p for p in PLUGIN_PATHS if os.path.exists(p)), None)


def new_password() -> str:
    """A random password (32 URL-safe characters, 192 bits)."""
    return secrets.token_urlsafe(24)


def name(run: str, kind: str) -> str:
    """The role and client name of node ``kind`` in ``run``."""
    if kind not in RIGHTS:
        raise ValueError(f"unknown node kind {kind!r}; one of {', '.join(NODE_KINDS)}")
    return f"{check_name('run', run)}-{kind}"


#: the worker topics whose ``{name}`` is the worker's own name: a worker with an identity of its
#: own publishes (its inference requests included) and reads its inference replies only under its
#: name; servers answer on the requesting topic's worker, so no worker gets another's answers
OWN_NAME_KINDS = frozenset({K.SAMPLES, K.EPISODES, K.HEARTBEAT, K.WORKER_STATE, K.INFER_REQUEST, K.INFER_REPLY, K.EVAL})


def _own_prefix(run: str) -> str:
    """What the names of ``run``'s workers' own identities start with (``run`` not checked)."""
    return f"{run}-worker@"


def worker_name(run: str, worker: str) -> str:
    """The role and client name of worker ``worker``'s own identity in ``run``."""
    return _own_prefix(check_name("run", run)) + check_name("worker", worker)


def own_worker_name(run: str, username: str | None) -> str | None:
    """The worker name a user ``RUN-worker@NAME`` (a worker's own identity in ``run``) stands
    for, else None."""
    prefix = _own_prefix(run)
    return username[len(prefix) :] if username and username.startswith(prefix) else None


def worker_names(spec: str) -> list[str]:
    """``--workers``: a count N (the names ``mqttrl train`` gives: w0 .. wN-1) or comma-separated
    names; ValueError with one line otherwise."""
    spec = spec.strip()
    if spec.isdigit():
        if not 1 <= int(spec) <= 10000:
            raise ValueError(f"--workers {spec}: a count from 1 to 10000, or names")
        return [f"w{i}" for i in range(int(spec))]
    names = [n.strip() for n in spec.split(",") if n.strip()]
    if not names:
        raise ValueError("--workers: give a count or comma-separated worker names")
    for n in names:
        check_name("worker", n)
    if len(set(names)) != len(names):
        raise ValueError(f"--workers {spec}: a name is given twice")
    return names


def _acl(acltype: str, topic: str) -> dict:
    return {"acltype": acltype, "topic": topic, "priority": 0, "allow": True}


def role_acls(run: str, kind: str, worker: str | None = None) -> list[dict]:
    """The ACL list of ``kind``'s role in ``run``: publish and read rights on that run's topics only.
    With ``worker`` (kind ``worker``): that worker's own role, its named topics narrowed to its name."""
    topics = Topics(run)
    publish, read = RIGHTS[kind]
    acls = []
    for k in Kind:
        f = topics.topic(k, worker) if worker is not None and k in OWN_NAME_KINDS else topics.filter(k)
        if k in publish:
            acls.append(_acl("publishClientSend", f))
        if k in read:
            acls.append(_acl("subscribePattern", f))
            acls.append(_acl("publishClientReceive", f))
            if k == Kind.INFER_REQUEST:  # the pool of servers consumes through a shared subscription
                acls.append(_acl("subscribePattern", f"$share/+/{f}"))
    return acls


def add_run_commands(run: str, passwords: dict[str, str]) -> list[dict]:
    """createRole and createClient for every node kind of ``run``."""
    cmds = []
    for kind in NODE_KINDS:
        n = name(run, kind)
        cmds.append(
            {
                "command": "createRole",
                "rolename": n,
                "textname": f"mqttrl {kind} of run {run}",
                "acls": role_acls(run, kind),
            }
        )
    for kind in NODE_KINDS:
        n = name(run, kind)
        cmds.append(
            {
                "command": "createClient",
                "username": n,
                "password": passwords[kind],
                "textname": f"mqttrl {kind} of run {run}",
                "roles": [{"rolename": n, "priority": 0}],
            }
        )
    return cmds


def add_workers_commands(run: str, passwords: dict[str, str]) -> list[dict]:
    """createRole and createClient of each worker's own identity (worker name -> password)."""
    roles, clients = [], []
    for worker, password in passwords.items():
        n = worker_name(run, worker)
        text = f"mqttrl worker {worker} of run {run}"
        roles.append(
            {"command": "createRole", "rolename": n, "textname": text, "acls": role_acls(run, "worker", worker)}
        )
        clients.append(
            {
                "command": "createClient",
                "username": n,
                "password": password,
                "textname": text,
                "roles": [{"rolename": n, "priority": 0}],
            }
        )
    return roles + clients


def remove_run_commands(run: str) -> list[dict]:
    """deleteClient (the plugin disconnects a deleted client) and deleteRole for every node kind of ``run``."""
    return [{"command": "deleteClient", "username": name(run, k)} for k in NODE_KINDS] + [
        {"command": "deleteRole", "rolename": name(run, k)} for k in NODE_KINDS
    ]


# ---- credentials files ------------------------------------------------------------------
def write_private(path: Path, text: str) -> None:
    """Write ``text`` to a new or existing file readable by its owner only (0600 from the start)."""
    path = Path(path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def credentials_doc(broker: str | None, clients: dict[str, tuple[str, str]], run: str | None = None) -> dict:
    """A credentials file: ``clients`` by node kind; workers' own identities (``worker@NAME``
    keys) under ``workers`` by worker name."""
    doc: dict = {"run": run} if run else {}
    if broker:
        doc["broker"] = broker
    doc["clients"] = {k: {"username": u, "password": p} for k, (u, p) in clients.items() if "@" not in k}
    workers = {k.split("@", 1)[1]: {"username": u, "password": p} for k, (u, p) in clients.items() if "@" in k}
    if workers:
        doc["workers"] = workers
    return doc


def read_credentials(path: str | Path) -> dict:
    """A credentials file of ``mqttrl broker init`` / ``add-run``; ValueError with one line if it is not one."""
    try:
        doc = json.loads(Path(path).read_text())
        entries = [("client", k, c) for k, c in doc["clients"].items()]
        entries += [("worker", k, c) for k, c in doc.get("workers", {}).items()]
        for what, key, c in entries:
            if not (isinstance(c.get("username"), str) and isinstance(c.get("password"), str)):
                raise ValueError(f"{what} {key!r} has no username/password")
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise ValueError(f"{path}: not an mqttrl credentials file ({e})") from None
    return doc


def run_credentials(path: str | Path, run: str) -> tuple[str | None, dict[str, tuple[str, str]]]:
    """The broker URL and node kind -> (user, password) of an ``add-run`` file for ``run``, with
    ``worker@NAME`` -> (user, password) for each worker with an identity of its own; ValueError
    with one line if the file is of another run or lacks a node kind."""
    doc = read_credentials(path)
    if doc.get("run") != run:
        raise ValueError(
            f"{path} is for run {doc.get('run')!r}, the config's run is {run!r} "
            f"(mqttrl broker add-run {run}, or --set run={doc.get('run')})"
        )
    missing = [k for k in NODE_KINDS if k not in doc["clients"]]
    if missing:
        raise ValueError(f"{path} has no client for {', '.join(missing)}")
    clients = {k: (doc["clients"][k]["username"], doc["clients"][k]["password"]) for k in NODE_KINDS}
    clients |= {f"worker@{w}": (c["username"], c["password"]) for w, c in doc.get("workers", {}).items()}
    return doc.get("broker"), clients


# ---- init: the plugin's first file and a mosquitto config --------------------------------------
def hash_password(password: str, salt: bytes | None = None, iterations: int = 101) -> dict:
    """The plugin's password fields: PBKDF2-HMAC-SHA512 over a 12-byte salt (as mosquitto_ctrl writes them)."""
    salt = salt if salt is not None else secrets.token_bytes(12)
    digest = hashlib.pbkdf2_hmac("sha512", password.encode(), salt, iterations, 64)
    return {
        "password": base64.b64encode(digest).decode(),
        "salt": base64.b64encode(salt).decode(),
        "iterations": iterations,
    }


def initial_config(admin: str, password: str) -> dict:
    """The plugin's JSON file: one admin client that may only use the control topic; deny by default."""
    return {
        "clients": [
            {
                "username": admin,
                "textname": "mqttrl dynsec admin",
                **hash_password(password),
                "roles": [{"rolename": "dynsec-admin"}],
            }
        ],
        "groups": [],
        "roles": [
            {
                "rolename": "dynsec-admin",
                "textname": "administers the dynamic security plugin only",
                "acls": [
                    {"acltype": t, "topic": "$CONTROL/dynamic-security/#", "allow": True}
                    for t in ("publishClientSend", "publishClientReceive", "subscribePattern")
                ],
            }
        ],
        "defaultACLAccess": DEFAULT_ACL_ACCESS,
    }


def mosquitto_conf(
    dynsec_file: Path, data_dir: Path, port: int, bind: str | None, plugin: str, run_as: str | None = None
) -> str:
    listener = f"listener {port} {bind}" if bind else f"listener {port}"
    user = (
        [
            "# started as root, mosquitto switches to this account (which owns the plugin file and data)",
            f"user {run_as}",
        ]
        if run_as
        else []
    )
    lines = [
        "# mosquitto 2.x with the dynamic security plugin, written by `mqttrl broker init`.",
        "# Users, roles and ACLs live in the plugin's file (below); change them with",
        "# `mqttrl broker add-run RUN` / `remove-run RUN` while the broker runs (broker/README.md).",
        "per_listener_settings false",
        "allow_anonymous false",
        f"plugin {plugin}",
        f"plugin_opt_config_file {dynsec_file}",
        "",
        "# retained config and weights, and the learner's queued samples, survive a restart",
        "persistence true",
        f"persistence_location {data_dir}/",
        "autosave_interval 60",
        "# no queue caps (the learner applies flow control), weights are big (see mosquitto-production.conf)",
        "max_queued_messages 0",
        "max_queued_bytes 0",
        "max_inflight_messages 0",
        "max_packet_size 100000000",  # broker/mosquitto.conf says why
        "persistent_client_expiration 7d",
        "set_tcp_nodelay true",
        "log_dest stdout",
        "log_type error",
        "log_type warning",
        "log_type notice",
        "log_type information",
        "connection_messages true",
        *user,
        "",
        "# plain MQTT: passwords in clear text on the wire; for TLS add the 8883 listener of",
        "# broker/mosquitto-production.conf",
        listener,
    ]
    return "\n".join(lines) + "\n"


def init_files(
    directory: Path,
    port: int = 1883,
    bind: str | None = None,
    plugin: str | None = None,
    admin: str = "admin",
    force: bool = False,
    run_as: str | None = None,
) -> dict[str, Path]:
    """Write ``mosquitto.conf``, ``dynamic-security.json`` (0600) and ``admin.json`` (0600, the
    admin's generated password) into ``directory``; returns their paths. Refuses to replace an
    existing plugin file unless ``force`` (it holds every run's clients).

    ``run_as``: the account a mosquitto started as root switches to (its ``user`` option). Run as
    root, the default is ``mosquitto`` where that account exists, and ``directory``, the plugin file
    and ``data/`` are given to it (the plugin rewrites its file, through a new one, on every change)."""
    run_as, owner = _run_as_owner(run_as)
    plugin = plugin or find_plugin()
    if plugin is None:
        raise FileNotFoundError(
            "mosquitto_dynamic_security.so not found in "
            + ", ".join(PLUGIN_PATHS)
            + "; install mosquitto 2.x (apt-get install mosquitto) or pass --plugin PATH"
        )
    directory = Path(directory).absolute()
    directory.mkdir(parents=True, exist_ok=True)
    paths = {
        "config": directory / "mosquitto.conf",
        "dynsec": directory / "dynamic-security.json",
        "admin": directory / "admin.json",
        "data": directory / "data",
    }
    if paths["dynsec"].exists() and not force:
        raise FileExistsError(f"{paths['dynsec']} exists (it holds every run's clients); use --force to replace it")
    paths["data"].mkdir(exist_ok=True)
    password = new_password()
    write_private(paths["dynsec"], json.dumps(initial_config(admin, password), indent=2) + "\n")
    host = "127.0.0.1" if bind in (None, "0.0.0.0", "::") else bind
    write_private(
        paths["admin"],
        json.dumps(credentials_doc(f"mqtt://{host}:{port}", {"admin": (admin, password)}), indent=2) + "\n",
    )
    paths["config"].write_text(mosquitto_conf(paths["dynsec"], paths["data"], port, bind, plugin, run_as))
    if owner is not None:
        for p in (directory, paths["dynsec"], paths["data"]):
            os.chown(p, *owner)
    return paths


def _run_as_owner(run_as: str | None) -> tuple[str | None, tuple[int, int] | None]:
    """(account, (uid, gid) to give the files to) for a mosquitto started as root; as another user,
    ``run_as`` as given and no owner (files stay that user's)."""
    if not (hasattr(os, "geteuid") and os.geteuid() == 0):
        return run_as, None
    import pwd

    if run_as is None:
        try:
            pwd.getpwnam("mosquitto")
            run_as = "mosquitto"
        except KeyError:
            run_as = "root"
    if run_as == "root":
        return run_as, None
    try:
        pw = pwd.getpwnam(run_as)
    except KeyError:
        raise ValueError(f"--run-as {run_as!r}: no such account") from None
    return run_as, (pw.pw_uid, pw.pw_gid)


# ---- talking to the plugin --------------------------------------------------------------------
class DynsecAdmin:
    """An admin client of the plugin: ``with DynsecAdmin(settings) as a: a.send([...])``."""

    def __init__(self, settings: BrokerSettings, timeout: float = 10.0):
        self.settings = settings.at(0)
        self.timeout = timeout
        self._cond = threading.Condition()
        self._responses: dict[str, dict] = {}
        self._connected: object = None
        self.progress: Callable[[int, int], None] | None = None
        self.client = mqtt.Client(
            mqtt.CallbackAPIVersion.VERSION2, client_id=f"mqttrl-dynsec-{uuid.uuid4().hex[:8]}", protocol=mqtt.MQTTv311
        )
        configure(self.client, self.settings)
        self.client.on_connect = self._on_connect
        self.client.on_message = self._on_message

    def _on_connect(self, client, userdata, flags, reason_code, properties):
        with self._cond:
            self._connected = reason_code
            self._cond.notify_all()
        if not reason_code.is_failure:
            client.subscribe(RESPONSE, qos=1)

    def _on_message(self, client, userdata, msg):
        try:
            responses = json.loads(msg.payload)["responses"]
        except (ValueError, KeyError, TypeError):
            return
        with self._cond:
            for r in responses:
                if isinstance(r, dict) and "correlationData" in r:
                    self._responses[r["correlationData"]] = r
            self._cond.notify_all()

    def __enter__(self) -> DynsecAdmin:
        s = self.settings
        try:
            self.client.connect(s.host, s.port, keepalive=30)
        except OSError as e:
            raise DynsecError(f"cannot connect to {s.shown}: {e}") from None
        self.client.loop_start()
        with self._cond:
            self._cond.wait_for(lambda: self._connected is not None, self.timeout)
        rc = self._connected
        if rc is None or rc.is_failure:
            self.close()
            raise DynsecError(f"{s.shown} refused the admin client {s.user!r}: {rc or 'no answer'}")
        try:
            # the subscription must be in place before the first command's response
            sub = self.send([{"command": "listRoles", "count": 1}], check=False, settle=True)
            if sub[0].get("error"):
                raise DynsecError(f"the dynamic security plugin refused {s.user!r}: {sub[0]['error']}")
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()

    #: commands per message: the plugin rewrites its whole file after each change, so a run with a
    #: thousand worker identities takes about a minute; each chunk is answered within ``timeout``
    CHUNK = 50

    def send(self, commands: list[dict], check: bool = True, settle: bool = False) -> list[dict]:
        """Send ``commands`` (in messages of :attr:`CHUNK`); the responses in order. ``check``: raise
        DynsecError naming the first refused command. ``settle``: resend until answered (the first
        message may go out before the response subscription is in place). ``progress(done, total)``,
        when set, hears of each chunk of a longer list."""
        out: list[dict] = []
        for start in range(0, len(commands), self.CHUNK):
            out += self._send_one(commands[start : start + self.CHUNK], settle, done=start, total=len(commands))
            if self.progress is not None and len(commands) > self.CHUNK:
                self.progress(len(out), len(commands))
        if check:
            for c, r in zip(commands, out):
                if r.get("error"):
                    what = c.get("username") or c.get("rolename") or ""
                    raise DynsecError(f"{c['command']} {what}: {r['error']}")
        return out

    def _send_one(self, commands: list[dict], settle: bool, done: int, total: int) -> list[dict]:
        ids = []
        for c in commands:
            c["correlationData"] = uuid.uuid4().hex
            ids.append(c["correlationData"])
        payload = json.dumps({"commands": commands})
        attempts = 1 + (int(self.timeout / 0.5) if settle else 0)
        for _ in range(attempts):
            self.client.publish(CONTROL, payload, qos=1)
            with self._cond:
                ok = self._cond.wait_for(
                    lambda: all(i in self._responses for i in ids), 0.5 if settle else self.timeout
                )
            if ok:
                break
        else:
            if done:
                raise DynsecError(
                    f"{self.settings.shown} stopped answering after {done} of {total} commands (no answer in "
                    f"{self.timeout:.0f}s); the plugin may still be working: give it a larger --timeout"
                )
            raise DynsecError(
                f"no answer on {RESPONSE} from {self.settings.shown}: is the dynamic security plugin loaded "
                f"(plugin line in mosquitto.conf), and is {self.settings.user!r} its admin?"
            )
        return [self._responses.pop(i) for i in ids]


def _create_all_or_nothing(admin: DynsecAdmin, cmds: list[dict], what: str, hint: str) -> None:
    """Send create commands; if the plugin refuses one (e.g. a name exists), remove what this
    call created and raise DynsecError naming the first refusal."""
    responses = admin.send(cmds, check=False)
    failed = [(c, r) for c, r in zip(cmds, responses) if r.get("error")]
    if not failed:
        return
    undo = []
    for c, r in zip(cmds, responses):
        if not r.get("error"):
            if c["command"] == "createClient":
                undo.append({"command": "deleteClient", "username": c["username"]})
            else:
                undo.append({"command": "deleteRole", "rolename": c["rolename"]})
    if undo:
        admin.send(undo[::-1], check=False)
    c, r = failed[0]
    raise DynsecError(
        f"{what} not added: {c['command']} {c.get('username') or c.get('rolename')}: {r['error']}"
        + (f" ({hint})" if "exist" in str(r["error"]).lower() else "")
    )


Progress = Callable[[int, int], None] | None


def add_run(
    settings: BrokerSettings, run: str, timeout: float = 10.0, workers: list[str] = (), progress: Progress = None
) -> dict[str, tuple[str, str]]:
    """Create ``run``'s roles and clients, and an own identity for each of ``workers``; returns
    node kind -> (username, password), and ``worker@NAME`` -> (username, password) per worker.
    All or nothing: if the plugin refuses one (e.g. the run exists), what this call created is removed."""
    check_name("run", run)
    passwords = {k: new_password() for k in NODE_KINDS}
    worker_passwords = {w: new_password() for w in workers}
    cmds = add_run_commands(run, passwords) + add_workers_commands(run, worker_passwords)
    with DynsecAdmin(settings, timeout) as admin:
        admin.progress = progress
        _create_all_or_nothing(admin, cmds, f"run {run!r}", "remove it first: mqttrl broker remove-run")
    return {k: (name(run, k), passwords[k]) for k in NODE_KINDS} | {
        f"worker@{w}": (worker_name(run, w), p) for w, p in worker_passwords.items()
    }


def add_workers(
    settings: BrokerSettings, run: str, workers: list[str], timeout: float = 10.0, progress: Progress = None
) -> dict[str, tuple[str, str]]:
    """Give each of ``workers`` of an existing ``run`` an identity of its own; returns
    ``worker@NAME`` -> (username, password). All or nothing, as :func:`add_run`."""
    check_name("run", run)
    passwords = {w: new_password() for w in workers}
    with DynsecAdmin(settings, timeout) as admin:
        admin.progress = progress
        _create_all_or_nothing(
            admin, add_workers_commands(run, passwords), f"workers of run {run!r}", "a worker of that name exists"
        )
    return {f"worker@{w}": (worker_name(run, w), p) for w, p in passwords.items()}


def _own_worker_names(admin: DynsecAdmin, run: str) -> tuple[list[str], list[str]]:
    """The clients and roles of ``run``'s workers with an identity of their own."""
    prefix = _own_prefix(run)
    clients, roles = admin.send([{"command": "listClients"}, {"command": "listRoles"}])
    return (
        [u for u in clients.get("data", {}).get("clients", []) if isinstance(u, str) and u.startswith(prefix)],
        [r for r in roles.get("data", {}).get("roles", []) if isinstance(r, str) and r.startswith(prefix)],
    )


def remove_run(
    settings: BrokerSettings, run: str, timeout: float = 10.0, progress: Progress = None
) -> tuple[list[str], list[str]]:
    """Delete ``run``'s clients (disconnecting them) and roles, its workers' own ones included;
    returns the run's kind names that were not there, and the workers' own names deleted."""
    check_name("run", run)
    with DynsecAdmin(settings, timeout) as admin:
        admin.progress = progress
        clients, roles = _own_worker_names(admin, run)
        own = [{"command": "deleteClient", "username": u} for u in clients]
        own += [{"command": "deleteRole", "rolename": r} for r in roles]
        if own:
            admin.send(own)
        cmds = remove_run_commands(run)
        responses = admin.send(cmds, check=False)
    missing = []
    for c, r in zip(cmds, responses):
        err = r.get("error")
        if err and "not found" not in str(err).lower():
            raise DynsecError(f"{c['command']} {c.get('username') or c.get('rolename')}: {err}")
        if err:
            missing.append(c.get("username") or c.get("rolename"))
    return missing, sorted(set(clients) | set(roles))


def markdown_table() -> str:
    """The rights of every node kind as broker/README.md shows them (a test keeps the doc equal to this)."""
    from mqttrl.transport.topics import TABLE

    def topics(kinds: frozenset[Kind], own: bool = False) -> str:
        def shown(s) -> str:
            return s.pattern.replace("{name}", "<name>" if own and s.kind in OWN_NAME_KINDS else "+")

        return ", ".join(f"`{shown(s)}`" for s in TABLE if s.kind in kinds)

    rows = ["| client and role | may publish | may read |", "|---|---|---|"]
    for kind in NODE_KINDS:
        publish, read = RIGHTS[kind]
        rows.append(f"| `<run>-{kind}` | {topics(publish)} | {topics(read)} |")
        if kind == "worker":
            rows.append(f"| `<run>-worker@<name>` | {topics(publish, True)} | {topics(read, True)} |")
    return "\n".join(rows)
