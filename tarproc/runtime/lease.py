"""Telling a live writer's temporary files from a dead one's, across PID
namespaces, containers and hosts sharing a volume.

A PID names a process only inside one PID namespace: two pods sharing a
volume both have a PID 7.  So liveness is never read from a PID.  A writer
holds an exclusive ``flock`` on the temporary file (or on a ``.lock`` file in a
temporary directory) for as long as it lives; the kernel drops the lock when
the process dies, whatever killed it.  A cleaner tries the lock:

- held: the writer is alive (in any namespace of any host whose file system
  passes locks on): keep;
- free, and the file was made under this kernel (same boot id, which every
  container on a node shares): the writer is dead: remove;
- free, made under another kernel (another node, or before a reboot): locks
  may not travel over that file system, so the file is stale only when it has
  not been modified for :data:`FOREIGN_STALE_SECONDS` (24 h; environment
  ``TARPROC_FOREIGN_STALE_SECONDS``).

The boot id goes into the temporary names (:func:`host_id`), with a random
part that keeps two writers with the same PID in different namespaces apart.
"""

import fcntl
import os
import time

#: A temporary file from another kernel whose lock is free is stale after this long.
FOREIGN_STALE_SECONDS = 24 * 3600
_host = None


def host_id():
    """8 hex digits naming this kernel (from its boot id; the host name if
    there is none).  Every container and PID namespace of a node shares it."""
    global _host
    if _host is None:
        try:
            with open("/proc/sys/kernel/random/boot_id") as f:
                text = f.read().strip().replace("-", "")
        except OSError:
            import hashlib
            import socket

            text = hashlib.sha1(socket.gethostname().encode()).hexdigest()
        _host = (text + "00000000")[:8].lower()
    return _host


def token():
    """``HOST-RANDOM``: the identity part of a temporary name."""
    return f"{host_id()}-{os.urandom(3).hex()}"


def split_token(text):
    """``(host, random)`` of a :func:`token`, or None if ``text`` is not one."""
    host, sep, rnd = text.partition("-")
    if sep and len(host) == 8 and len(rnd) == 6 and all(c in "0123456789abcdef" for c in host + rnd):
        return host, rnd
    return None


def create_locked(path, mode=0o644):
    """Create ``path`` (it must not exist) and hold an exclusive lock on it;
    returns the open file descriptor (read-write).  The lock lasts as long as
    the descriptor is open.  A cleaner that removed the file between its
    creation and the lock is noticed, and the caller gets ``FileExistsError``
    / ``FileNotFoundError`` to retry with a new name."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if os.stat(path, follow_symlinks=False).st_ino != os.fstat(fd).st_ino:
            raise FileNotFoundError(path)
    except BaseException:
        os.close(fd)
        raise
    return fd


def is_stale(path, host, now=None, stale_seconds=None):
    """Whether the temporary file ``path`` (made under kernel ``host``, or
    ``None`` if unknown) belongs to no live writer.  A symlink or anything
    that is not a regular file is never stale (never ours to remove).  A
    file of another host is stale when unmodified for ``stale_seconds``
    (default :data:`FOREIGN_STALE_SECONDS`)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        import stat

        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return False  # a live writer holds it
        except OSError:
            pass  # no locks on this file system: decide by host and age
        if host == host_id():
            return True
        age = (now or time.time()) - st.st_mtime
        limit = FOREIGN_STALE_SECONDS if stale_seconds is None else stale_seconds
        return age > limit
    finally:
        os.close(fd)
