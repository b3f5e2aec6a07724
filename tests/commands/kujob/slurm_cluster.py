"""A real single-node Slurm cluster in a temporary directory, for tests.

``Cluster(tmpdir).start()`` starts munged, slurmctld and slurmd (Debian's
``munge`` and ``slurm-wlm`` 22.05, installed by ``make sysdeps``) with a
generated ``slurm.conf``; ``cluster.env`` is the environment that points
``sbatch``/``squeue``/``scancel`` at it (``SLURM_CONF``); ``stop()`` cancels
what is left, stops the daemons and kills anything still carrying the
cluster's marker in its environment.  Nothing outside the directory is
touched: no /etc/slurm, no /run/munge, no system service.

Gotchas met on the way (Slurm 22.05, munge 0.5.15):
- munged refuses a socket whose directory or any ancestor is not executable
  by all ("Socket is inaccessible"), and pytest's temporary directories are
  0700: ``--force`` turns that into a warning.  The key must be 0600.
  ``-F`` keeps munged in the foreground so we own its pid.
- Slurm finds munged through ``AuthInfo=socket=PATH`` (and ``CredType``
  uses the same); without it every RPC goes to /run/munge and fails with
  "Unable to contact slurm controller".
- ``SlurmctldHost`` and ``NodeHostname`` must be this machine's short host
  name, or slurmctld says it is not the controller and slurmd does not find
  itself; the node gets its own name (``slurmd -N``) and 127.0.0.1.
- ``RealMemory``/``CPUs`` above what the machine has drain the node: we copy
  what ``slurmd -C`` reports.
- Ports are picked free at start (two workers of pytest-xdist each run a
  cluster); there is no accounting daemon (``accounting_storage/none``), so
  ``sacct`` knows nothing: kujob's own exit records are what tell results.
- Outputs of a job go to files that slurmd opens before the script runs: the
  log directory must exist.
- slurmd as non-root can run jobs only as its own user; tests run as root in
  CI, where SlurmUser/SlurmdUser are root.
- ``proctrack/linuxproc`` and ``task/none`` need no cgroups (containers);
  slurmd's "can not load PMIx library" errors in its log are harmless.
"""

import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import time

MARKER = "KUJOB_TEST_SLURM_CLUSTER"
# the daemons live in /usr/sbin, which a non-root PATH may lack
PATH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
TOOLS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scancel", "sinfo")


def which(tool):
    return shutil.which(tool, path=PATH)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _node_spec():
    """``CPUs=2 Boards=1 ... RealMemory=24105`` from ``slurmd -C``."""
    out = subprocess.run([which("slurmd"), "-C"], capture_output=True, text=True, check=True).stdout
    first = out.splitlines()[0].split()
    return " ".join(w for w in first if not w.startswith("NodeName="))


class Cluster:
    def __init__(self, root):
        self.root = os.path.abspath(str(root))
        self.procs = {}
        self.host = socket.gethostname().split(".")[0]
        self.node = "kujob1"
        self.conf = os.path.join(self.root, "slurm.conf")
        self.env = dict(os.environ, SLURM_CONF=self.conf, PATH=PATH)
        self.env[MARKER] = self.root
        for name in ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID"):
            self.env.pop(name, None)

    def path(self, *parts):
        return os.path.join(self.root, *parts)

    def write_conf(self):
        user = pwd.getpwuid(os.getuid()).pw_name
        ctld_port, slurmd_port = _free_port(), _free_port()
        lines = f"""\
ClusterName=kujobtest
SlurmctldHost={self.host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser={user}
SlurmdUser={user}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={self.path('munge', 'munge.socket')}
StateSaveLocation={self.path('state')}
SlurmdSpoolDir={self.path('spool')}
SlurmctldPidFile={self.path('slurmctld.pid')}
SlurmdPidFile={self.path('slurmd.pid')}
SlurmctldLogFile={self.path('log', 'slurmctld.log')}
SlurmdLogFile={self.path('log', 'slurmd.log')}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
SchedulerType=sched/builtin
MpiDefault=none
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
SchedulerParameters=sched_interval=1
MinJobAge=300
KillWait=2
MaxArraySize=10001
NodeName={self.node} NodeHostname={self.host} NodeAddr=127.0.0.1 {_node_spec()} State=UNKNOWN
PartitionName=debug Nodes={self.node} Default=YES MaxTime=INFINITE State=UP
"""
        with open(self.conf, "w") as f:
            f.write(lines)

    def reconfigure(self, name, value):
        """Set ``name=value`` in slurm.conf and ``scontrol reconfigure`` (the
        daemons reread it; about 10 ms); returns the old value."""
        with open(self.conf) as f:
            lines = f.read().splitlines()
        old = next(line.split("=", 1)[1] for line in lines if line.startswith(name + "="))
        with open(self.conf, "w") as f:
            f.write("\n".join(f"{name}={value}" if line.startswith(name + "=") else line for line in lines) + "\n")
        subprocess.run(["scontrol", "reconfigure"], env=self.env, check=True, capture_output=True, timeout=60)
        self._wait_for(lambda: f"{name}={value}" in subprocess.run(
            ["scontrol", "show", "config"], env=self.env, capture_output=True, text=True,
            timeout=30).stdout.replace(" ", "").splitlines(), 30, f"{name}={value}")
        return old

    def _spawn(self, name, argv):
        log = open(self.path("log", f"{name}.out"), "wb")
        self.procs[name] = subprocess.Popen([which(argv[0])] + argv[1:], stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                            env=self.env, start_new_session=True)
        log.close()

    def start(self, timeout=60):
        for d in ("state", "spool", "log"):
            os.makedirs(self.path(d), exist_ok=True)
        os.chmod(self.root, 0o755)
        munge = self.path("munge")
        os.makedirs(munge, mode=0o755, exist_ok=True)
        os.chmod(munge, 0o755)
        key = os.path.join(munge, "munge.key")
        fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.write(fd, secrets.token_bytes(1024))
        os.close(fd)
        self.write_conf()
        try:
            self._spawn("munged", ["munged", "-F", "--force", "--socket", os.path.join(munge, "munge.socket"),
                                   "--key-file", key, "--pid-file", os.path.join(munge, "munged.pid"),
                                   "--log-file", os.path.join(munge, "munged.log"),
                                   "--seed-file", os.path.join(munge, "munged.seed")])
            self._wait_for(lambda: os.path.exists(os.path.join(munge, "munge.socket")), timeout, "munged")
            self._spawn("slurmctld", ["slurmctld", "-D", "-i"])
            self._spawn("slurmd", ["slurmd", "-D", "-N", self.node])
            self._wait_for(self._idle, timeout, "the node to be idle")
        except BaseException:
            self.stop()
            raise
        return self

    def _idle(self):
        p = subprocess.run(["sinfo", "-h", "-n", self.node, "-o", "%t"], capture_output=True, text=True,
                           env=self.env, timeout=30)
        return p.returncode == 0 and p.stdout.strip() == "idle"

    def _wait_for(self, check, timeout, what):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} exited {proc.returncode} while waiting for {what}: "
                                       f"{self.logs()}")
            if check():
                return
            time.sleep(0.2)
        raise RuntimeError(f"timed out waiting for {what}: {self.logs()}")

    def logs(self):
        out = []
        for name in ("munged.out", "slurmctld.out", "slurmd.out", "slurmctld.log", "slurmd.log"):
            try:
                with open(self.path("log", name), errors="replace") as f:
                    out.append(f"--- {name}\n" + "".join(f.readlines()[-15:]))
            except OSError:
                pass
        return "\n".join(out)

    def stop(self):
        """Cancel every job, stop slurmd, slurmctld and munged, then kill any
        process that still carries this cluster's marker (job steps
        orphaned by slurmd): by pid, never by name."""
        if "slurmctld" in self.procs and self.procs["slurmctld"].poll() is None:
            subprocess.run(["scancel", "--full", "-u", pwd.getpwuid(os.getuid()).pw_name], env=self.env,
                           capture_output=True, timeout=30)
        for name in ("slurmd", "slurmctld", "munged"):
            proc = self.procs.get(name)
            if proc is None or proc.poll() is not None:
                continue
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)
        for pid in self.leftovers():
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass

    def leftovers(self):
        """Pids of live processes whose environment has our marker."""
        mark = f"{MARKER}={self.root}".encode()
        pids = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == os.getpid():
                continue
            try:
                with open(f"/proc/{entry}/environ", "rb") as f:
                    env = f.read().split(b"\0")
                with open(f"/proc/{entry}/stat", "rb") as f:
                    state = f.read().rsplit(b")", 1)[1].split()[0]
            except OSError:
                continue
            if mark in env and state != b"Z":
                pids.append(int(entry))
        return pids
