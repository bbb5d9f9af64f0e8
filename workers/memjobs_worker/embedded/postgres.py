"""An embedded PostgreSQL with pgvector, in the data directory.

The binaries come from the ``pgserver`` wheel (PostgreSQL 16 with pgvector), or
from a ``postgres`` on PATH whose installation has pgvector. The server listens
on 127.0.0.1 at a free port and on a unix socket in the data directory. Running
as root, PostgreSQL refuses to start, so the server runs as a system user
created for it (as pgserver itself does).
"""

from __future__ import annotations

import importlib.util
import os
import pwd
import shutil
import signal
import stat
import subprocess
import time
from pathlib import Path

import psycopg

from memjobs_client.errors import ConfigurationError
from memjobs_worker.embedded.process import free_port, pid_alive, wait_until

SYSTEM_USER = "memjobs-pg"

_HOW_TO_GET_POSTGRES = (
    "no PostgreSQL with pgvector found: `pip install pgserver` (bundles PostgreSQL 16 "
    "with pgvector), or install PostgreSQL and pgvector (e.g. `apt-get install "
    "postgresql-16 postgresql-16-pgvector`), or point MEMJOBS_DATABASE_URL at a "
    "PostgreSQL that has the vector extension"
)


def find_postgres_bindir() -> Path:
    """The directory of ``initdb``/``pg_ctl``/``postgres`` with pgvector beside it.

    Raises:
        ConfigurationError: none found; the message says how to get one.
    """
    spec = importlib.util.find_spec("pgserver")
    if spec is not None and spec.submodule_search_locations:
        bindir = Path(list(spec.submodule_search_locations)[0]) / "pginstall" / "bin"
        if (bindir / "pg_ctl").exists():
            return bindir
    on_path = shutil.which("postgres")
    if on_path:
        bindir = Path(on_path).resolve().parent
        if _has_pgvector(bindir):
            return bindir
    raise ConfigurationError(_HOW_TO_GET_POSTGRES)


def _has_pgvector(bindir: Path) -> bool:
    pg_config = bindir / "pg_config"
    sharedirs = [bindir.parent / "share" / "postgresql", bindir.parent / "share"]
    if pg_config.exists():
        out = subprocess.run([str(pg_config), "--sharedir"], capture_output=True, text=True)  # noqa: S603 - fixed argv
        if out.returncode == 0:
            sharedirs.insert(0, Path(out.stdout.strip()))
    return any((d / "extension" / "vector.control").exists() for d in sharedirs)


def _system_user() -> pwd.struct_passwd:
    """The system user the server runs as, created on first use (race-safe:
    another process may create it at the same moment)."""
    try:
        return pwd.getpwnam(SYSTEM_USER)
    except KeyError:
        pass
    subprocess.run(  # noqa: S603 - fixed argv
        ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", SYSTEM_USER],  # noqa: S607 - from PATH, as root
        capture_output=True,
    )
    try:
        return pwd.getpwnam(SYSTEM_USER)
    except KeyError:
        raise ConfigurationError(
            f"running as root, PostgreSQL needs a system user {SYSTEM_USER!r}, and useradd "
            "could not create it: create it, run memjobs as another user, or set "
            "MEMJOBS_DATABASE_URL"
        ) from None


#: The server's own processes kept to what memjobs uses: no logical replication,
#: so no launcher process waiting for subscriptions (6-10 MB resident).
LAPTOP_SETTINGS = "-c max_logical_replication_workers=0"


class EmbeddedPostgres:
    """A PostgreSQL cluster in ``directory``, trust auth, loopback only.

    Parameters:
        directory: the cluster's data directory (created by initdb if empty).
        port: a fixed port (restarts keep the same URL); a free one when None.
        host: the address to listen on (loopback unless a test says otherwise).
        allow_from: a CIDR whose clients may connect without a password (added
            to ``pg_hba.conf``; for tests across network namespaces).
    """

    def __init__(
        self, directory: Path, port: int | None = None, *, host: str = "127.0.0.1", allow_from: str | None = None
    ) -> None:
        self.directory = directory
        self.port = port
        self.host = host
        self.allow_from = allow_from
        self.bindir: Path | None = None
        self._user: pwd.struct_passwd | None = None

    @property
    def url(self) -> str:
        return f"postgresql://postgres@{self.host}:{self.port}/postgres"

    def start(self, timeout_s: float = 60.0) -> str:
        """initdb when needed, start the server, return its URL once it answers."""
        self.bindir = find_postgres_bindir()
        self._prepare_directory()
        if not (self.directory / "PG_VERSION").exists():
            self._run(
                "initdb",
                "-D",
                str(self.directory),
                "--auth=trust",
                "--encoding=UTF8",
                "--locale=C",
                "-U",
                "postgres",
            )
            if self.allow_from:
                with open(self.directory / "pg_hba.conf", "a") as hba:
                    hba.write(f"host all all {self.allow_from} trust\n")
        if self._running():
            self.port = self._port_from_pidfile() or self.port
            return self.url
        for _ in range(5):
            port = self.port or free_port()
            if self._start_on(port, timeout_s):
                self.port = port
                wait_until(self._answers, timeout_s=timeout_s, what="embedded PostgreSQL")
                return self.url
            self.port = None
        raise ConfigurationError(f"embedded PostgreSQL did not start; see {self.directory / 'server.log'}")

    def _start_on(self, port: int, timeout_s: float) -> bool:
        result = self._run(
            "pg_ctl",
            "-D",
            str(self.directory),
            "-w",
            "-t",
            str(int(timeout_s)),
            "-l",
            str(self.directory / "server.log"),
            "-o",
            f"-h {self.host} -p {port} -k {self.directory} -c unix_socket_permissions=0700 {LAPTOP_SETTINGS}",
            "start",
            check=False,
        )
        return result.returncode == 0

    @property
    def pid(self) -> int | None:
        """The postmaster's pid, as its ``postmaster.pid`` names it."""
        return self._postmaster_pid()

    def alive(self) -> bool:
        """Whether the postmaster runs: cheap (no subprocess), for a supervisor's
        frequent look. After kill -9 its pid file stays, naming a dead pid."""
        pid = self._postmaster_pid()
        return pid is not None and pid_alive(pid)

    def restart(self, timeout_s: float = 60.0) -> str:
        """Start the server again on the port it had (its clients keep their URL),
        after it died. PostgreSQL refuses to start while a dead postmaster's
        backends still hold its shared memory (they exit when they notice their
        parent is gone), so the start is tried again until ``timeout_s``.

        Raises:
            ConfigurationError: it did not start in time.
        """
        if self.port is None or self.bindir is None:
            return self.start(timeout_s)
        deadline = time.monotonic() + timeout_s
        while not self._start_on(self.port, max(1.0, deadline - time.monotonic())):
            if time.monotonic() > deadline:
                raise ConfigurationError(
                    f"embedded PostgreSQL did not restart on port {self.port} within "
                    f"{timeout_s:.0f} s; see {self.directory / 'server.log'}"
                )
            time.sleep(0.2)
        wait_until(self._answers, timeout_s=max(1.0, deadline - time.monotonic()), what="embedded PostgreSQL")
        return self.url

    def kill(self) -> None:
        """SIGKILL the postmaster (its backends exit when they notice), for fault tests."""
        pid = self._postmaster_pid()
        if pid is not None and pid_alive(pid):
            os.kill(pid, signal.SIGKILL)
            wait_until(lambda: not pid_alive(pid), timeout_s=10, what="the killed postmaster's exit")

    def stop(self, timeout_s: float = 60.0) -> None:
        """Fast shutdown (roll back open transactions, checkpoint, exit) and wait.

        ``pg_ctl stop`` first; should it fail (say the server's user lost access
        to a parent directory), signal the postmaster named in ``postmaster.pid``.

        Raises:
            ConfigurationError: the server is still running after ``timeout_s``.
        """
        if self.bindir is None or not self._running():
            return
        self._grant_traversal()
        result = self._run(
            "pg_ctl", "-D", str(self.directory), "-w", "-t", str(int(timeout_s)), "-m", "fast", "stop", check=False
        )
        if result.returncode == 0:
            return
        pid = self._postmaster_pid()
        if pid is not None:
            try:
                os.kill(pid, signal.SIGINT)  # PostgreSQL's "fast" shutdown
                wait_until(lambda: not pid_alive(pid), timeout_s=timeout_s, what="PostgreSQL's shutdown")
                return
            except (ProcessLookupError, TimeoutError):
                pass
        if self._running():
            raise ConfigurationError(
                f"could not stop the embedded PostgreSQL in {self.directory}: {result.stderr.strip()[-300:]}"
            )

    def _running(self) -> bool:
        """pg_ctl's answer (exit 3 is "not running"); when pg_ctl cannot tell, the pid file's."""
        if self.bindir is None:
            return False
        result = self._run("pg_ctl", "-D", str(self.directory), "status", check=False)
        if result.returncode in (0, 3):
            return result.returncode == 0
        pid = self._postmaster_pid()
        return pid is not None and pid_alive(pid)

    def _postmaster_pid(self) -> int | None:
        try:
            return int((self.directory / "postmaster.pid").read_text().splitlines()[0])
        except (OSError, IndexError, ValueError):
            return None

    def _port_from_pidfile(self) -> int | None:
        try:
            lines = (self.directory / "postmaster.pid").read_text().splitlines()
            return int(lines[3])
        except (OSError, IndexError, ValueError):
            return None

    def _answers(self) -> bool:
        try:
            with psycopg.connect(self.url, connect_timeout=2) as conn:
                conn.execute("SELECT 1")
            return True
        except psycopg.Error:
            return False

    def _prepare_directory(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.directory.chmod(0o700)
        if os.geteuid() != 0:
            return
        # PostgreSQL will not run as root: hand the cluster to a system user.
        entry = _system_user()
        self._user = entry
        for path in [self.directory, *self.directory.rglob("*")]:
            os.chown(path, entry.pw_uid, entry.pw_gid, follow_symlinks=False)
        self._grant_traversal()

    def _grant_traversal(self) -> None:
        """Let the server's user reach the data directory and the binaries (o+x on parents)."""
        if self._user is None or self.bindir is None:
            return
        for leaf in (self.directory, self.bindir.parent / "lib", self.bindir):
            for parent in leaf.parents:
                mode = parent.stat().st_mode
                if not mode & stat.S_IXOTH:
                    parent.chmod(mode | stat.S_IXOTH)

    def _run(self, tool: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        assert self.bindir is not None
        result = subprocess.run(  # noqa: S603 - a PostgreSQL binary of bindir, our arguments
            [str(self.bindir / tool), *args],
            capture_output=True,
            text=True,
            # Drop root's groups too: a directory's group bits would otherwise
            # apply to gid 0 instead of the "other" bits granted above.
            user=self._user.pw_uid if self._user else None,
            group=self._user.pw_gid if self._user else None,
            extra_groups=[] if self._user else None,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        if check and result.returncode != 0:
            raise ConfigurationError(f"{tool} failed ({result.returncode}): {result.stderr.strip()[-500:]}")
        return result
