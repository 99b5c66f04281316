"""A real two-node Slurm cluster on this machine, for the tests that submit parbench's sbatch
scripts: Debian's munged, slurmctld and two slurmd, each node its own ``slurmd -N NAME`` on its
own port (Debian builds slurmd with multiple-slurmd support, so no emulator is needed).

Everything runs in one private network namespace and a private mount namespace. The nodes have
addresses of their own, node1 = 10.217.0.1 and node2 = 10.217.0.2, on that namespace's ``lo``
(glibc's getaddrinfo, which slurmd binds with, needs a non-loopback address: AI_ADDRCONFIG), and
/etc/hosts names them there; so the cluster, its jobs and their rendezvous ports are unreachable
from outside, and the host's own Slurm configuration, if any, is untouched. Tests enter the
namespaces with ``nsenter`` to run sbatch, scontrol and scancel. Needs root (the namespaces,
the bind mount, slurmd's job launch).

Run as a script (by ``Cluster.start``), this file is the cluster's supervisor: it starts the
daemons, prints "ready" once both nodes are idle, and stops them when its stdin closes.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

NODES = {"node1": "10.217.0.1", "node2": "10.217.0.2"}
DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "scancel", "squeue", "sinfo", "srun")
DAEMON_NAMES = ("munged", "slurmctld", "slurmscriptd", "slurmd", "unshare")
KILL_WAIT_S = 10  # scancel's SIGTERM, then SIGKILL this much later: time for a checkpoint
READY_TIMEOUT_S = 60
WAITING = ("None", "Priority", "Resources")  # why a job may pend here before it starts


def unavailable() -> str | None:
    """Why the cluster cannot start here, or None."""
    if os.geteuid() != 0:
        return "a Slurm cluster in private namespaces needs root"
    missing = [name for name in (*DAEMONS, "unshare", "nsenter", "mount", "ip")
               if not shutil.which(name, path=f"{os.environ.get('PATH', '')}:/usr/sbin")]
    if missing:
        return (f"{', '.join(missing)} not installed (Debian's slurmctld, slurmd, slurm-client "
                "and munge; .ci/run installs them)")
    from parbench.launch.netns import private_network_unavailable
    return private_network_unavailable()


def slurm_conf(folder: Path) -> str:
    host = socket.gethostname().split(".")[0]
    ports = {"SlurmctldPort": 6817, "SlurmdPort": 6818}  # free: the namespace is empty
    nodes = [f"NodeName={name} NodeAddr={addr} NodeHostname={name} Port={6821 + i} CPUs=2 "
             "State=UNKNOWN" for i, (name, addr) in enumerate(NODES.items())]
    return "\n".join([
        # slurmctld runs only where SlurmctldHost names this host (its short name)
        "ClusterName=parbench-tests", f"SlurmctldHost={host}({NODES['node1']})",
        *(f"{key}={value}" for key, value in ports.items()),
        "SlurmUser=root", "SlurmdUser=root",
        "AuthType=auth/munge", "CredType=cred/munge", f"AuthInfo=socket={folder}/munge.socket",
        f"StateSaveLocation={folder}/state", f"SlurmdSpoolDir={folder}/spool/%n",
        f"SlurmctldPidFile={folder}/slurmctld.pid", f"SlurmdPidFile={folder}/slurmd-%n.pid",
        f"SlurmctldLogFile={folder}/slurmctld.log", f"SlurmdLogFile={folder}/slurmd-%n.log",
        # no cgroups here: a job's processes are its process groups, as on a simple cluster
        "ProctrackType=proctrack/pgid", "TaskPlugin=task/none", "MpiDefault=none",
        "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core",
        "SchedulerType=sched/backfill", "ReturnToService=2", f"KillWait={KILL_WAIT_S}",
        "JobCompType=jobcomp/none", "AccountingStorageType=accounting_storage/none",
        "MailProg=/bin/true",
        *nodes,
        f"PartitionName=main Nodes={','.join(NODES)} Default=YES MaxTime=INFINITE State=UP",
        ""])


@dataclass
class Cluster:
    folder: Path
    supervisor: subprocess.Popen

    @classmethod
    def start(cls, folder: Path) -> Cluster:
        from parbench.launch.netns import enter_private_network
        folder.mkdir(parents=True, exist_ok=True)
        supervisor = subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", sys.executable, __file__,
             str(folder)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            preexec_fn=enter_private_network, env=cls.environment(folder))
        line = supervisor.stdout.readline().strip()
        if line != "ready":
            supervisor.stdin.close()  # it stops what it started
            supervisor.wait(timeout=60)
            raise RuntimeError(f"the Slurm cluster did not start: {line or 'no word'}; "
                               f"see {folder}/*.log")
        return cls(folder, supervisor)

    @staticmethod
    def environment(folder: Path) -> dict[str, str]:
        """The clients' environment: this cluster's slurm.conf, and this Python's bin first on
        PATH, so the jobs (which inherit sbatch's environment) find this parbench."""
        path = f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}:/usr/sbin"
        return {**os.environ, "SLURM_CONF": str(folder / "slurm.conf"), "PATH": path}

    def command(self, *argv: str, cwd: Path) -> list[str]:
        """``argv`` run inside the cluster's namespaces, in ``cwd`` (entering a mount
        namespace moves a process to its root)."""
        return ["nsenter", "--target", str(self.supervisor.pid), "--net", "--mount",
                f"--wd={cwd}", "--", *argv]

    def run(self, *argv: str, cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run(self.command(*argv, cwd=cwd), capture_output=True, text=True,
                              timeout=timeout, env=self.environment(self.folder))

    def submit(self, script: Path, timeout: float = 300) -> dict[str, str]:
        """sbatch ``script`` from its folder, wait for the job to end; its final state, as
        ``scontrol show job`` gives it (JobState, ExitCode, ...). Polled every 0.2 s: sbatch
        --wait polls every 2 to 10 s (measured: 42 s for a 10 s job)."""
        done = self.run("sbatch", "--parsable", script.name, cwd=script.parent)
        assert done.returncode == 0, done.stderr
        job = done.stdout.strip().split(";")[0]
        deadline = time.monotonic() + timeout
        while True:
            state = self.job(job)
            if state["JobState"] not in ("PENDING", "RUNNING", "COMPLETING", "CONFIGURING"):
                return state
            if state["JobState"] == "PENDING" and state.get("Reason") not in WAITING:
                raise RuntimeError(f"job {job} cannot start: {state.get('Reason')} "
                                   f"(see {self.folder}/slurmctld.log)")
            if time.monotonic() > deadline:
                raise TimeoutError(f"job {job} still {state['JobState']} after {timeout} s")
            time.sleep(0.2)

    def job(self, job: str) -> dict[str, str]:
        shown = self.run("scontrol", "--oneliner", "show", "job", job, cwd=self.folder)
        assert shown.returncode == 0, shown.stderr
        return dict(field.split("=", 1) for field in shown.stdout.split() if "=" in field)

    def node_states(self) -> list[str]:
        """Each node's state as sinfo gives it (idle, allocated, drained, ...)."""
        shown = self.run("sinfo", "--noheader", "--Node", "--format=%T", cwd=self.folder)
        return shown.stdout.split()

    def job_processes(self) -> list[tuple[int, str]]:
        """(pid, command line) of every process in the cluster's network namespace that is
        not the cluster itself: what a job left behind, on any node."""
        import psutil
        own = {self.supervisor.pid, *(p.pid for p in psutil.Process(self.supervisor.pid)
                                      .parents())}
        for proc in psutil.Process(self.supervisor.pid).children(recursive=True):
            try:  # the supervisor reaps orphans: a child may end between the two calls
                if proc.name() in DAEMON_NAMES:
                    own.add(proc.pid)
            except psutil.NoSuchProcess:
                pass
        namespace = os.readlink(f"/proc/{self.supervisor.pid}/ns/net")
        found = []
        for proc in psutil.process_iter(["pid", "cmdline"]):
            try:
                inside = os.readlink(f"/proc/{proc.pid}/ns/net") == namespace
            except OSError:  # ended meanwhile
                continue
            if inside and proc.pid not in own:
                found.append((proc.pid, " ".join(proc.info["cmdline"] or [])))
        return found

    def stop(self) -> None:
        """Cancel what still runs (a failed test's job), end what Slurm left, then the
        daemons."""
        self.run("scancel", "--full", "--user=root", cwd=self.folder)
        deadline = time.monotonic() + KILL_WAIT_S + 10
        while self.job_processes() and time.monotonic() < deadline:
            time.sleep(0.2)
        for pid, _ in self.job_processes():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.supervisor.stdin.close()
        try:
            self.supervisor.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.supervisor.kill()
            self.supervisor.wait()


# --- the supervisor, inside the namespaces

def _daemons(folder: Path) -> list[list[str]]:
    conf = str(folder / "slurm.conf")
    munge = ["munged", "--foreground", "--force", f"--socket={folder}/munge.socket",
             f"--key-file={folder}/munge.key", f"--log-file={folder}/munged.log",
             f"--pid-file={folder}/munged.pid", f"--seed-file={folder}/munged.seed"]
    return [munge, ["slurmctld", "-D", "-f", conf],
            *(["slurmd", "-D", "-f", conf, "-N", name] for name in NODES)]


def _prepare(folder: Path) -> None:
    for sub in ("state", *(f"spool/{name}" for name in NODES)):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    key = folder / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o600)
    (folder / "slurm.conf").write_text(slurm_conf(folder))
    hosts = Path("/etc/hosts").read_text() + "".join(
        f"{addr} {name}\n" for name, addr in NODES.items())
    (folder / "hosts").write_text(hosts)
    for addr in NODES.values():
        subprocess.run(["ip", "address", "add", f"{addr}/32", "dev", "lo"], check=True)
    subprocess.run(["mount", "--bind", str(folder / "hosts"), "/etc/hosts"], check=True)


def _wait_until_idle(procs: list[subprocess.Popen]) -> str | None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        ended = [p.args[0] for p in procs if p.poll() is not None]
        if ended:
            return f"{', '.join(ended)} ended at start"
        states = subprocess.run(["sinfo", "--noheader", "--Node", "--format=%N %T"],
                                capture_output=True, text=True).stdout.split("\n")
        if sorted(line.split()[1] for line in states if line.strip()) == ["idle"] * len(NODES):
            return None
        time.sleep(0.5)
    return f"the nodes were not idle within {READY_TIMEOUT_S} s"


def _reap_orphans_until_stdin_closes(daemons: set[int]) -> None:
    """As the cluster's subreaper, reap every orphan its jobs leave (a batch script's srun
    helper whose parent ended first). Unreaped, a zombie keeps its process group alive;
    slurmstepd, which tracks a job by process group here, then fails to end the job ("Unable to
    destroy container ... in pgid plugin") and drains the node, and every later job waits for
    ever. Seen when the orphan climbed to the tests' own process, itself a subreaper after an
    in-process run (parbench.launch.lifetime), which never reaps it."""
    closed = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), closed.set()), daemon=True).start()
    while not closed.wait(0.2):
        while True:
            try:
                ended = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                break
            if ended is None or ended.si_pid in daemons:
                break  # a daemon's end is its Popen's to collect (the cluster is broken)
            os.waitpid(ended.si_pid, 0)


def supervise(folder: Path) -> None:
    from parbench.launch.lifetime import become_subreaper

    become_subreaper()
    _prepare(folder)
    procs = []
    try:
        for argv in _daemons(folder):
            procs.append(subprocess.Popen(argv, stdout=subprocess.DEVNULL,
                                          stderr=(folder / f"{argv[0]}.err").open("w")))
            if argv[0] == "munged":
                time.sleep(0.5)  # its socket before slurmctld authenticates anything
        problem = _wait_until_idle(procs)
        print(problem or "ready", flush=True)
        if problem is None:
            _reap_orphans_until_stdin_closes({proc.pid for proc in procs})
    finally:
        for proc in reversed(procs):
            proc.send_signal(signal.SIGTERM)
        for proc in reversed(procs):
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


if __name__ == "__main__":
    supervise(Path(sys.argv[1]))
