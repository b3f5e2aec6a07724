"""Child processes: waiting with a deadline, killing process groups, dying with
the parent (``PR_SET_PDEATHSIG``), and telling whether a PID is alive."""

import os



def _wait_exit(pid, timeout):
    """Wait up to ``timeout`` seconds for ``pid`` to exit (without reaping);
    True when it has exited."""
    import select

    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        import time

        deadline = time.monotonic() + timeout
        delay = 0.0005
        while time.monotonic() < deadline:
            try:
                r = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT | os.WNOHANG)
            except ChildProcessError:
                return True
            if r is not None:
                return True
            time.sleep(delay)
            delay = min(delay * 2, 0.05)
        return False
    try:
        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
        return bool(poller.poll(timeout * 1000))
    finally:
        os.close(pidfd)


def _wait_nowait(pid):
    while True:
        try:
            os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
            return
        except InterruptedError:
            continue
        except ChildProcessError:
            return


def _killpg(pgid):
    import signal

    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _pdeathsig():
    """In a child: die with the parent, so an upload is not completed with
    the partial data of a parent that was killed."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL
    except Exception:
        pass


# ---------------------------------------------------------------- reading


def pid_alive(pid):
    """Whether a process with this pid exists (on this machine)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
