"""Throwaway servers for tests: a PostgreSQL server and a one-node SLURM cluster on localhost.

Each lives in its own temporary folder under the system's temp dir (not pytest's tmp_path: that sits in a folder
only its owner may enter, while PostgreSQL must run as an unprivileged user when the tests run as root, and a unix
socket path is limited to 107 bytes). Each is stopped and its folder removed when the test ends; the server logs are
copied into the test's tmp_path first. A test that needs a service this machine cannot run is skipped with the
reason (what to install).

Fixtures: `postgres_server` (a `PostgresServer`), `postgres_url` (a SQLAlchemy URL to a fresh database on it),
`mlflow_server` (an `MlflowServer` on a database of that PostgreSQL server), `slurm_cluster` and
`slurm_cluster_with_accounting` (a `SlurmCluster`; SLURM_CONF points at it for the test's duration, so
sbatch/srun/submitit reach it).
The context managers behind them, `running_postgres`, `running_mlflow` and `running_slurm`, serve a script or a
session-wide fixture.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.helpers.env import child_env
from tests.helpers.net import free_port

PG_USER = "postgres"  # the account the Debian package creates; PostgreSQL refuses to run as root
SBIN_PATH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/local/sbin", "/usr/sbin", "/sbin"])
SLURM_TOOLS = ("munged", "slurmctld", "slurmd", "sinfo", "squeue", "scancel", "sbatch", "srun")
ACCOUNTING_TOOLS = ("mariadb-install-db", "mariadbd", "slurmdbd", "sacct", "sacctmgr")

# The machine's temp folder, as it was before any test gave itself its own (conftest): servers run as their own
# accounts (postgres, munge), which cannot enter a test's temp folder under pytest's private one.
SERVER_TEMP = tempfile.gettempdir()


class Unavailable(Exception):
    """This machine cannot run the service; the message says why and what to install."""


def _tail(path: Path, lines: int = 30) -> str:
    """The end of a log file, for an error message; empty when there is none."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def _keep_logs(logs: list[Path], keep_in: Path | None) -> None:
    """Copy the service's logs into the test's folder before the service's own folder is removed."""
    if keep_in is None:
        return
    for log in logs:
        if log.exists():
            shutil.copy(log, keep_in / log.name)


# ---- PostgreSQL ---------------------------------------------------------------------------------------------------


def postgres_bindir() -> Path:
    """The newest PostgreSQL server's bin dir (Debian: /usr/lib/postgresql/<major>/bin); Unavailable without one."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb", path=SBIN_PATH)
    if initdb:
        return Path(initdb).parent
    raise Unavailable("no PostgreSQL server binaries (initdb, pg_ctl): apt-get install -y postgresql")


@dataclass
class PostgresServer:
    """A running throwaway PostgreSQL server: superuser `user`, no password (trust auth), on host:port."""

    root: Path
    host: str
    port: int
    user: str
    bindir: Path

    def url(self, database: str = "test", driver: str = "psycopg") -> str:
        """A SQLAlchemy URL to `database`, created on first use. Optuna and MLflow need one database each: both keep
        their schema version in a table named alembic_version."""
        exists = subprocess.run(
            [str(self.bindir / "psql"), *self._client_args(), "-d", "postgres", "-tAc"]
            + [f"SELECT 1 FROM pg_database WHERE datname = '{database}'"],
            capture_output=True,
            text=True,
            check=True,
        )
        if exists.stdout.strip() != "1":
            subprocess.run(
                [str(self.bindir / "createdb"), *self._client_args(), database], capture_output=True, check=True
            )
        return f"postgresql+{driver}://{self.user}@{self.host}:{self.port}/{database}"

    def _client_args(self) -> list[str]:
        return ["-h", self.host, "-p", str(self.port), "-U", self.user]


def _server_account() -> tuple[str | None, int | None]:
    """Who runs the server: the current user (None, None), or PG_USER (name, group id) when this is root."""
    if os.geteuid() != 0:
        return None, None
    try:
        account = pwd.getpwnam(PG_USER)
    except KeyError:
        raise Unavailable(
            f"running as root, which PostgreSQL refuses ('initdb: error: cannot be run as root'), and there is no "
            f"'{PG_USER}' user to run it as: useradd --system --user-group {PG_USER}"
        ) from None
    return account.pw_name, account.pw_gid


@contextlib.contextmanager
def running_postgres(parent: Path | None = None, keep_logs_in: Path | None = None) -> Iterator[PostgresServer]:
    """Run initdb in a new folder under `parent` (the temp dir by default), start the server on a free loopback port
    with its unix socket in that folder, yield it, then stop it (fast shutdown) and remove the folder."""
    bindir = postgres_bindir()
    user, group = _server_account()
    root = Path(tempfile.mkdtemp(prefix="pg-", dir=parent or SERVER_TEMP))
    if user:
        shutil.chown(root, user, group)
    as_owner = {"cwd": root, "capture_output": True, "text": True}
    if user:  # the server's own account, without root's supplementary groups
        as_owner.update(user=user, group=group, extra_groups=[])
    log = root / "postgres.log"
    started = False
    try:
        init = subprocess.run(
            [str(bindir / "initdb"), "-D", str(root / "data"), "-U", "postgres", "--auth=trust", "-E", "UTF8"]
            + ["--no-locale", "--no-sync"],
            **as_owner,
        )
        if init.returncode:
            raise RuntimeError(f"initdb failed:\n{init.stdout}{init.stderr}")
        for _ in range(3):  # another process may take the free port before the server binds it
            port = free_port()
            options = f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off"
            start = subprocess.run(
                [str(bindir / "pg_ctl"), "-D", str(root / "data"), "-l", str(log), "-o", options, "-w", "-t", "60"]
                + ["start"],
                **as_owner,
            )
            if start.returncode == 0:
                started = True
                break
        if not started:
            raise RuntimeError(f"pg_ctl start failed:\n{start.stdout}{start.stderr}\n{_tail(log)}")
        yield PostgresServer(root=root, host="127.0.0.1", port=port, user="postgres", bindir=bindir)
    finally:
        if started:
            subprocess.run(
                [str(bindir / "pg_ctl"), "-D", str(root / "data"), "-m", "fast", "-w", "-t", "60", "stop"], **as_owner
            )
        _keep_logs([log], keep_logs_in)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def postgres_server(tmp_path: Path) -> Iterator[PostgresServer]:
    """A throwaway PostgreSQL server for one test (skipped, with the reason, where none can run); its log ends up
    in tmp_path."""
    try:
        postgres_bindir()
        _server_account()
    except Unavailable as why:
        pytest.skip(str(why))
    with running_postgres(keep_logs_in=tmp_path) as server:
        yield server


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> str:
    """A SQLAlchemy URL (driver psycopg 3) to a fresh database `test` on a throwaway server, for Optuna or MLflow."""
    pytest.importorskip("psycopg", reason="no PostgreSQL driver for SQLAlchemy: pip install 'psycopg[binary]'")
    return postgres_server.url("test")


# ---- MLflow tracking server ------------------------------------------------------------------------------------


@dataclass
class MlflowServer:
    """A running `mlflow server`: the tracking URI `url` (http://127.0.0.1:port) serves runs from its backend store
    and artifacts from the folder `artifacts`, so clients need nothing but the URL."""

    url: str
    backend: str
    artifacts: Path
    group: int = 0  # the process group of the server and its web worker (signal them all with os.killpg)


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


@contextlib.contextmanager
def running_mlflow(
    backend_uri: str, parent: Path | None = None, keep_logs_in: Path | None = None, timeout: float = 120
) -> Iterator[MlflowServer]:
    """Start `mlflow server` (this interpreter's MLflow) on a free loopback port, on `backend_uri`, with the
    artifacts it serves in a new folder under `parent`; one web worker and no job runner. Yield it once /health
    answers, then stop it (its own process group: the server and the web worker it starts) and remove the folder."""
    root = Path(tempfile.mkdtemp(prefix="mlflow-", dir=parent or SERVER_TEMP))
    log = root / "mlflow-server.log"
    port = free_port()
    command = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", backend_uri]
    command += ["--artifacts-destination", str(root / "artifacts"), "--host", "127.0.0.1", "--port", str(port)]
    command += ["--workers", "1"]
    env = child_env(MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false")
    with open(log, "wb") as out:
        server = subprocess.Popen(
            command, cwd=root, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + timeout
        while not _answers(f"{url}/health"):
            if server.poll() is not None or time.monotonic() > deadline:
                reason = (
                    f"exited with {server.returncode}" if server.poll() is not None else f"no answer in {timeout} s"
                )
                raise RuntimeError(f"mlflow server {reason}:\n{_tail(log)}")
            time.sleep(0.5)
        yield MlflowServer(url=url, backend=backend_uri, artifacts=root / "artifacts", group=server.pid)
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGTERM)
            try:
                server.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
                server.wait()
        _keep_logs([log], keep_logs_in)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def mlflow_server(postgres_server: PostgresServer, tmp_path: Path) -> Iterator[MlflowServer]:
    """An MLflow tracking server for one test, its runs in the database `mlflow` of a throwaway PostgreSQL server
    (skipped, with the reason, where none can run); its log ends up in tmp_path."""
    pytest.importorskip("psycopg", reason="no PostgreSQL driver for SQLAlchemy: pip install 'psycopg[binary]'")
    with running_mlflow(postgres_server.url("mlflow"), keep_logs_in=tmp_path) as server:
        yield server


# ---- SLURM --------------------------------------------------------------------------------------------------------


@dataclass
class SlurmCluster:
    """A running one-node SLURM cluster: node `localhost`, one partition; clients find it through SLURM_CONF. With
    `accounting`, slurmdbd (on a throwaway MariaDB) records finished jobs, so `sacct` answers."""

    root: Path
    conf: Path
    partition: str
    cpus: int
    memory_mib: int
    accounting: bool
    env: dict[str, str] = field(default_factory=dict)  # what a client's environment needs (SLURM_CONF)

    def run(self, *command: str, timeout: float = 60) -> subprocess.CompletedProcess:
        """Run a SLURM client command (sinfo, sbatch, srun, sacct, ...) against this cluster."""
        env = {**_without_slurm_job(os.environ), **self.env, "PATH": SBIN_PATH}
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)

    def wait_idle(self, timeout: float = 60) -> None:
        """Block until no job is left in the queue (finished ones drop out after completing)."""
        deadline = time.monotonic() + timeout
        while self.run("squeue", "-h", "-o", "%i").stdout.strip():
            if time.monotonic() > deadline:
                raise TimeoutError(f"jobs still queued after {timeout} s:\n{self.run('squeue').stdout}")
            time.sleep(0.5)


def _without_slurm_job(env: Mapping[str, str]) -> dict[str, str]:
    """The environment minus the SLURM_* variables of an enclosing job (tests run inside a SLURM job on a cluster
    would otherwise hand sbatch/srun that job's ids and resources)."""
    return {k: v for k, v in env.items() if not k.startswith("SLURM_")}


def slurm_binaries(accounting: bool = False) -> dict[str, str]:
    """Paths of munged and the SLURM daemons and clients (and, with `accounting`, slurmdbd and MariaDB's); Unavailable
    when one is missing or this is not root."""
    found = {tool: shutil.which(tool, path=SBIN_PATH) for tool in SLURM_TOOLS}
    missing = sorted(tool for tool, path in found.items() if not path)
    if missing:
        raise Unavailable(
            f"SLURM is not installed (no {', '.join(missing)}): apt-get install -y slurmctld slurmd slurm-client munge"
        )
    if accounting:
        extra = {tool: shutil.which(tool, path=SBIN_PATH) for tool in ACCOUNTING_TOOLS}
        missing = sorted(tool for tool, path in extra.items() if not path)
        if missing:
            raise Unavailable(
                f"no SLURM accounting (no {', '.join(missing)}): apt-get install -y slurmdbd mariadb-server"
            )
        found.update(extra)
    if os.geteuid() != 0:
        raise Unavailable("the one-node SLURM cluster runs slurmd as root, as a real node does; not root here")
    return {tool: str(path) for tool, path in found.items()}


def _node_line(slurmd: str) -> tuple[str, int, int]:
    """This machine's node description as slurmd detects it (`slurmd -C`), named localhost: (line, cpus, MiB)."""
    detected = subprocess.run([slurmd, "-C"], capture_output=True, text=True, check=True).stdout.splitlines()[0]
    fields = dict(item.split("=", 1) for item in detected.split())
    fields.pop("NodeName", None)
    line = "NodeName=localhost NodeAddr=127.0.0.1 " + " ".join(f"{k}={v}" for k, v in fields.items())
    return line, int(fields["CPUs"]), int(fields["RealMemory"])


def _write_conf(root: Path, node: str, partition: str, dbd_port: int | None) -> Path:
    """slurm.conf for one node: state, spool, logs and the munge socket in `root`, daemons as root, no cgroups, and
    requests beyond the node refused at submission (EnforcePartLimits) rather than left pending for ever. Without
    `dbd_port` no accounting: `sacct` answers 'Slurm accounting storage is disabled'."""
    munge = root / "munge.socket"
    if dbd_port is None:
        accounting = "AccountingStorageType=accounting_storage/none"
    else:  # the link to slurmdbd authenticates with the munge socket named in AccountingStoragePass, not AuthInfo's
        accounting = f"""AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort={dbd_port}
AccountingStoragePass={munge}"""
    conf = root / "slurm.conf"
    conf.write_text(
        f"""ClusterName=test
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={munge}
StateSaveLocation={root / "state"}
SlurmdSpoolDir={root / "spool"}
SlurmctldPidFile={root / "slurmctld.pid"}
SlurmdPidFile={root / "slurmd.pid"}
SlurmctldLogFile={root / "slurmctld.log"}
SlurmdLogFile={root / "slurmd.log"}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
{accounting}
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/builtin
MpiDefault=none
MailProg=/bin/true
ReturnToService=2
InactiveLimit=0
KillWait=5
MinJobAge=30
EnforcePartLimits=ALL
{node}
PartitionName={partition} Nodes=localhost Default=YES MaxTime=INFINITE State=UP
"""
    )
    return conf


def _write_dbd_conf(root: Path, dbd_port: int, db_port: int) -> None:
    """slurmdbd.conf next to slurm.conf (where slurmdbd looks for it), readable by its owner only (or it refuses)."""
    conf = root / "slurmdbd.conf"
    conf.write_text(
        f"""AuthType=auth/munge
AuthInfo=socket={root / "munge.socket"}
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort={dbd_port}
SlurmUser=root
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort={db_port}
StorageUser=root
StorageLoc=slurm_acct_db
PidFile={root / "slurmdbd.pid"}
LogFile={root / "slurmdbd.log"}
"""
    )
    conf.chmod(0o600)


def _port_open(port: int) -> bool:
    """Whether something accepts TCP connections on 127.0.0.1:port."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _stop(proc: subprocess.Popen, timeout: float = 20) -> None:
    """SIGTERM a daemon we started, SIGKILL it if it lingers (a slurmd that cannot reach its slurmctld ignores
    SIGTERM), and reap it."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def running_slurm(
    parent: Path | None = None, partition: str = "test", accounting: bool = False, keep_logs_in: Path | None = None
) -> Iterator[SlurmCluster]:
    """Start munged, slurmctld and slurmd (with `accounting`, first a MariaDB server and slurmdbd) in the foreground,
    as children of this process, with everything in a new folder under `parent`; wait until the node is idle, yield
    the cluster, then cancel what is left in its queue, stop the daemons and remove the folder."""
    tools = slurm_binaries(accounting)
    root = Path(tempfile.mkdtemp(prefix="slurm-", dir=parent or SERVER_TEMP))
    for sub in ("state", "spool"):
        (root / sub).mkdir()
    key = root / "munge.key"
    key.write_bytes(os.urandom(128))
    key.chmod(0o400)
    node, cpus, memory = _node_line(tools["slurmd"])
    dbd_port = free_port() if accounting else None
    conf = _write_conf(root, node, partition, dbd_port)
    cluster = SlurmCluster(root, conf, partition, cpus, memory, accounting, env={"SLURM_CONF": str(conf)})
    env = {**_without_slurm_job(os.environ), **cluster.env}
    logs = [root / name for name in ("munged.log", "mariadb.log", "slurmdbd.log", "slurmctld.log", "slurmd.log")]
    daemons: list[subprocess.Popen] = []
    quiet = {"env": env, "cwd": root, "stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    ready = False
    try:
        munged = [tools["munged"], "--foreground", "--force", f"--key-file={key}", f"--socket={root / 'munge.socket'}"]
        munged += [f"--pid-file={root / 'munged.pid'}", f"--log-file={logs[0]}", f"--seed-file={root / 'munge.seed'}"]
        daemons.append(subprocess.Popen(munged, **quiet))
        _wait_for(lambda: (root / "munge.socket").exists(), "munged's socket", daemons, logs)
        if dbd_port is not None:
            _start_accounting(root, tools, dbd_port, quiet, daemons, logs, cluster)
        daemons.append(subprocess.Popen([tools["slurmctld"], "-D"], **quiet))
        daemons.append(subprocess.Popen([tools["slurmd"], "-D", "-N", "localhost"], **quiet))
        _wait_for(
            lambda: cluster.run("sinfo", "-h", "-n", "localhost", "-o", "%T").stdout.strip() == "idle",
            "node localhost idle in sinfo",
            daemons,
            logs,
        )
        ready = True
        yield cluster
    finally:
        if ready and all(d.poll() is None for d in daemons):
            with contextlib.suppress(Exception):
                cluster.run("scancel", f"--partition={partition}")
                cluster.wait_idle(30)
        for daemon in reversed(daemons):
            _stop(daemon)
        _keep_logs(logs, keep_logs_in)
        shutil.rmtree(root, ignore_errors=True)


def _start_accounting(
    root: Path,
    tools: dict[str, str],
    dbd_port: int,
    quiet: dict,
    daemons: list[subprocess.Popen],
    logs: list[Path],
    cluster: SlurmCluster,
) -> None:
    """A MariaDB server in root/db (no grant checks, loopback only), then slurmdbd on it; slurmctld registers the
    cluster there by itself when it starts."""
    install = subprocess.run(
        [tools["mariadb-install-db"], f"--datadir={root / 'db'}", "--user=root", "--skip-test-db"]
        + ["--auth-root-authentication-method=normal"],
        capture_output=True,
        text=True,
    )
    if install.returncode:
        raise RuntimeError(f"mariadb-install-db failed:\n{install.stdout}{install.stderr}")
    db_port = free_port()
    mariadbd = [tools["mariadbd"], "--no-defaults", f"--datadir={root / 'db'}", f"--socket={root / 'mariadb.sock'}"]
    mariadbd += [f"--port={db_port}", "--bind-address=127.0.0.1", "--user=root", f"--log-error={logs[1]}"]
    mariadbd += ["--skip-grant-tables", "--innodb-flush-log-at-trx-commit=0"]
    daemons.append(subprocess.Popen(mariadbd, **quiet))
    _wait_for(lambda: _port_open(db_port), "MariaDB on its port", daemons, logs)
    _write_dbd_conf(root, dbd_port, db_port)
    daemons.append(subprocess.Popen([tools["slurmdbd"], "-D"], **quiet))

    def dbd_answers() -> bool:
        try:
            return cluster.run("sacctmgr", "-n", "list", "cluster", timeout=10).returncode == 0
        except subprocess.TimeoutExpired:
            return False

    _wait_for(dbd_answers, "slurmdbd answering sacctmgr", daemons, logs)


def _wait_for(
    ready: Callable[[], bool], what: str, daemons: list[subprocess.Popen], logs: list[Path], timeout: float = 60
) -> None:
    """Poll `ready()` until it holds; fail with the daemons' logs when one exits or time runs out."""
    deadline = time.monotonic() + timeout
    while not ready():
        dead = [d.args[0] for d in daemons if d.poll() is not None]
        if dead or time.monotonic() > deadline:
            reason = f"{', '.join(map(str, dead))} exited" if dead else f"not ready after {timeout} s"
            details = "\n".join(f"--- {log.name}\n{_tail(log)}" for log in logs if log.exists())
            raise RuntimeError(f"waiting for {what}: {reason}\n{details}")
        time.sleep(0.2)


def _slurm_fixture(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, accounting: bool) -> Iterator[SlurmCluster]:
    """The body of the SLURM fixtures: skip where SLURM cannot run, clear an enclosing job's SLURM_* variables, and
    point SLURM_CONF (and PATH, for the daemons in sbin) at the cluster while the test runs."""
    try:
        slurm_binaries(accounting)
    except Unavailable as why:
        pytest.skip(str(why))
    for key in [k for k in os.environ if k.startswith("SLURM_")]:
        monkeypatch.delenv(key)
    with running_slurm(accounting=accounting, keep_logs_in=tmp_path) as cluster:
        monkeypatch.setenv("SLURM_CONF", str(cluster.conf))
        monkeypatch.setenv("PATH", SBIN_PATH)
        yield cluster


@pytest.fixture
def slurm_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SlurmCluster]:
    """A one-node SLURM cluster without accounting for one test; sbatch, srun and submitit in this process and its
    children submit to it. submitit cannot tell that a job died without writing its result here (its state stays
    UNKNOWN, as `sacct` fails), so a test whose jobs may die needs `slurm_cluster_with_accounting`. Skipped, with the
    reason, where SLURM cannot run; the daemons' logs end up in tmp_path."""
    yield from _slurm_fixture(tmp_path, monkeypatch, accounting=False)


@pytest.fixture
def slurm_cluster_with_accounting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SlurmCluster]:
    """`slurm_cluster` with slurmdbd on a throwaway MariaDB: `sacct` reports every job's final state, so submitit
    sees a job that died (FAILED, CANCELLED, TIMEOUT) instead of waiting for its result for ever."""
    yield from _slurm_fixture(tmp_path, monkeypatch, accounting=True)
