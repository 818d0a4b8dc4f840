"""`make ui`: a local Prefect server and MLflow UI in the background, no Docker.

    python -m flows.ui start    # both servers, waits until they answer, prints their URLs
    python -m flows.ui stop     # ends them

Each server runs in its own process group, its PID and log in `.ui/` (`prefect.pid`,
`prefect.log`, ...). While the Prefect server's PID lives, `.ui/prefect.api` holds its API URL:
the Makefile exports it as PREFECT_API_URL for `make run`, whose flow runs then show in the
UI instead of going to a temporary server. The MLflow UI reads the store the stages write
(`sqlite:///mlflow.db`, params.yaml's default), so their runs show there as they are logged.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

UI_DIR = Path(".ui")
HOST = "127.0.0.1"
START_TIMEOUT_S = 180  # the first start creates Prefect's database
STOP_TIMEOUT_S = 15


@dataclass(frozen=True)
class Server:
    """A background server: how to start it, where it answers, where a browser goes."""

    name: str
    command: tuple[str, ...]
    health_url: str
    url: str
    api_url: str | None = None  # written to `<name>.api` while it runs
    env: tuple[tuple[str, str], ...] = ()  # set for the server on top of this environment


def default_servers(prefect_port: int = 4200, mlflow_port: int = 5000) -> list[Server]:
    bin_dir = Path(sys.executable).parent
    prefect = f"http://{HOST}:{prefect_port}"
    mlflow = f"http://{HOST}:{mlflow_port}"
    return [
        Server(
            "prefect",
            (
                str(bin_dir / "prefect"),
                "server",
                "start",
                "--host",
                HOST,
                "--port",
                str(prefect_port),
            ),
            f"{prefect}/api/health",
            prefect,
            f"{prefect}/api",
        ),
        Server(
            "mlflow",
            (
                *(str(bin_dir / "mlflow"), "ui", "--backend-store-uri", "sqlite:///mlflow.db"),
                *("--host", HOST, "--port", str(mlflow_port)),
                *("--workers", "1"),  # one person's browser; the default 4 is for a team server
            ),
            f"{mlflow}/health",
            mlflow,
            # the job runner and its 7 queue consumers serve GenAI evaluation jobs, which
            # nothing here starts: 1.7 GB and 9 processes less on a 2-core machine
            env=(("MLFLOW_SERVER_ENABLE_JOB_EXECUTION", "false"),),
        ),
    ]


def start(servers: list[Server], folder: Path = UI_DIR, timeout_s: float = START_TIMEOUT_S) -> None:
    """Start the servers not running yet and wait until each answers HTTP.

    Raises RuntimeError when a port is taken by something else or a server does not come up
    (that one is stopped again; its log says why).
    """
    folder.mkdir(exist_ok=True)
    started = []
    for server in servers:
        if running_pid(folder, server.name):
            continue
        if answers(server.health_url):
            raise RuntimeError(
                f"{server.url} already answers, but not as a server of {folder}/: "
                "stop what listens there, or choose another port"
            )
        log = (folder / f"{server.name}.log").open("ab")
        proc = subprocess.Popen(
            server.command,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **dict(server.env)},
            start_new_session=True,  # its own process group: it outlives make, stops as one
        )
        (folder / f"{server.name}.pid").write_text(f"{proc.pid}\n")
        started.append((server, proc))
    deadline = time.monotonic() + timeout_s
    for server, proc in started:
        while not answers(server.health_url):
            if proc.poll() is not None or time.monotonic() > deadline:
                stop([s for s, _ in started], folder)
                raise RuntimeError(
                    f"{server.name} did not answer at {server.health_url}; "
                    f"see {folder / (server.name + '.log')}"
                )
            time.sleep(0.5)
    for server in servers:
        if server.api_url:
            (folder / f"{server.name}.api").write_text(server.api_url + "\n")


def stop(servers: list[Server], folder: Path = UI_DIR) -> list[str]:
    """End the servers' process groups; the names of those that were running."""
    stopped = []
    for server in servers:
        pid = running_pid(folder, server.name)
        if pid:
            _end_group(pid)
            stopped.append(server.name)
        for suffix in ("pid", "api"):
            (folder / f"{server.name}.{suffix}").unlink(missing_ok=True)
    return stopped


def running_pid(folder: Path, name: str) -> int | None:
    """The PID in `<folder>/<name>.pid` while it still leads its process group, else None.

    A server started here leads its own group; a PID reused by another process seldom does.
    """
    try:
        pid = int((folder / f"{name}.pid").read_text())
        return pid if os.getpgid(pid) == pid else None
    except (FileNotFoundError, ValueError, ProcessLookupError, PermissionError):
        return None


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def _end_group(pid: int) -> None:
    """SIGTERM the group `pid` leads, SIGKILL it if it lingers."""
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while time.monotonic() < deadline:
        _reap(pid)
        try:
            os.killpg(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    os.killpg(pid, signal.SIGKILL)
    _reap(pid)


def _reap(pid: int) -> None:
    """Collect `pid`'s exit status when it is this process's child (it started the server in
    this same process), so that no zombie keeps its group alive."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m flows.ui", description=__doc__)
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("action", choices=["start", "stop"])
    args = parser.parse_args(argv)
    servers = default_servers()
    if args.action == "stop":
        stopped = stop(servers)
        print(f"stopped: {', '.join(stopped)}" if stopped else "nothing was running")
        return
    try:
        start(servers)
    except RuntimeError as exc:
        sys.exit(f"error: {exc}")
    prefect, mlflow = servers
    print(
        f"Prefect  {prefect.url}  flow runs: `make run` reports here while this server runs\n"
        f"         (it exports PREFECT_API_URL={prefect.api_url}; elsewhere, export it yourself)\n"
        f"MLflow   {mlflow.url}  runs of sqlite:///mlflow.db, where the stages log\n"
        f"logs and PIDs in {UI_DIR}/; `make ui-stop` ends both"
    )


if __name__ == "__main__":
    main()
