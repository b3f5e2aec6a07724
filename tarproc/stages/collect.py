"""Collecting what a per-sample command left in its directory
(:mod:`tarproc.stages.command`): the files named ``PREFIX.FIELD``, read into
memory up to the sample budget and otherwise blobs (hard links for large
files, one packed spool file for the rest), with unchanged inputs not read
back."""

import os
import sys
import time

from ..core.pack import Packer, sample_budget


_proc_fd = None  # whether /proc/self/fd works (looked at once)


def _scan(dfd):
    """The entries (``os.DirEntry``) of a directory held open as ``dfd``:
    opened again through ``/proc/self/fd`` (which names the directory we
    hold, wherever it is now), 4 system calls instead of the 8 of
    ``scandir(dfd)`` (dup, fdopendir's checks, rewind)."""
    global _proc_fd
    if _proc_fd is None:
        _proc_fd = os.path.isdir(f"/proc/self/fd/{dfd}")
    if _proc_fd:
        try:
            with os.scandir(f"/proc/self/fd/{dfd}") as it:
                return list(it)
        except OSError:
            pass
    with os.scandir(dfd) as it:
        return list(it)


def dir_entries(dfd):
    """``(name, is_real_directory)`` of a directory given by descriptor."""
    with os.scandir(dfd) as it:
        for entry in it:
            try:
                yield entry.name, entry.is_dir(follow_symlinks=False)
            except OSError:
                continue


#: ``CLOCK_REALTIME_COARSE``: the clock the kernel stamps inode times from.
COARSE = getattr(time, "CLOCK_REALTIME_COARSE", 5 if sys.platform.startswith("linux") else None)


def settled(ctime_ns):
    """The coarse clock reading (ns) from which any change to a file gets a
    later change time than ``ctime_ns``.  A file system stamps times in steps
    of a power of ten ns (1 ns ext4, xfs, tmpfs; 1 s ext3; 2 s FAT, ...), so
    ``ctime_ns`` is a multiple of its step: two steps of the largest power
    of ten dividing it are a safe bound."""
    step = 1
    while step < 10**9 and ctime_ns % (step * 10) == 0:
        step *= 10
    return ctime_ns + 2 * step


#: Large output files hard-linked as blobs of their own; past this many,
#: they are packed too (each holds a descriptor while it waits).
ADOPT_MAX = 32


class Quota:
    """What one sample's outputs (all its subdirectories) may hold: bytes in
    memory up to the sample budget, large files as blobs of their own up to
    :data:`ADOPT_MAX`; the rest go into one shared spool file."""

    __slots__ = ("spooler", "budget", "held", "adopted", "pack")

    def __init__(self, spooler):
        self.spooler = spooler
        self.budget = sample_budget(spooler)
        self.held = self.adopted = 0
        self.pack = None

    def take(self, name, dfd, fd, size):
        """None when the file ``name`` (open as ``fd``, ``size`` bytes) fits
        in memory (the caller reads it), else its blob: a hard link, or a
        part of the pack."""
        spooler = self.spooler
        if size < spooler.threshold and self.held + size <= self.budget:
            self.held += size
            return None
        if size >= spooler.threshold and self.adopted < ADOPT_MAX:
            self.adopted += 1
            return spooler.adopt(name, dfd)
        if self.pack is None:
            self.pack = Packer(spooler)
        return self.pack.add(fd, size)


def read_files(dfd, prefix, spooler=None, names=None, written=None, quota=None):
    """``{suffix: bytes}`` of the regular files named ``prefix + suffix`` in a
    directory; ``(files, problem)``; ``names`` gets every entry's name.  Files of ``spooler.threshold`` bytes
    or more become blobs (hard-linked into a spool file when possible).  A symlink is a problem (the other files
    are still read), never followed;
    FIFOs, directories and other special files are ignored.

    ``written`` is ``({name: bytes}, started)``: the files we wrote before
    the command started, at ``started`` on the coarse real-time clock (the
    one the kernel stamps inode times with), in a directory whose entries
    the command did not change (its change time is older).  A regular file
    of that size whose change time is older than ``started`` by two stamp
    steps (:func:`settled`) still holds those bytes, since any write,
    truncation or chmod sets the change time, which no process can set back,
    so it is not read again: one ``lstat`` instead of open, fstat, read,
    close.  (This assumes the real-time clock is not stepped back while the
    command runs; :meth:`CommandRunner.finish` checks it is not behind
    ``started`` when the command has ended.)"""
    import stat

    files = {}
    problem = None
    if quota is None and spooler is not None:
        quota = Quota(spooler)
    entries = _scan(dfd)
    if names is not None:
        names.extend(e.name for e in entries)
    entries = [e for e in entries if e.name.startswith(prefix)]  # "sample." itself is the field ""
    for entry in sorted(entries, key=lambda e: e.name):
        name = entry.name
        try:
            if entry.is_symlink():
                problem = problem or f"{name} is a symbolic link: refused"
                continue
            if not entry.is_file(follow_symlinks=False):
                continue
            if written is not None:
                was = written[0].get(name)
                if was is not None:
                    st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
                    if stat.S_ISREG(st.st_mode) and st.st_size == len(was) \
                            and settled(st.st_ctime_ns) <= written[1]:
                        files[name[len(prefix):]] = was
                        continue
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dfd)
        except OSError as e:
            import errno

            if e.errno == errno.ELOOP:
                problem = problem or f"{name} is a symbolic link: refused"
            continue
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                continue
            if quota is not None:
                blob = quota.take(name, dfd, fd, st.st_size)
                if blob is not None:
                    files[name[len(prefix):]] = blob
                    continue
            b = os.read(fd, st.st_size)
            if len(b) < st.st_size:  # a short read, or it shrank since fstat: up to what fstat saw
                chunks = [b]
                got = len(b)
                while got < st.st_size:
                    b = os.read(fd, st.st_size - got)  # (never more: a file some escaped process
                    if not b:  # keeps growing is not followed into memory)
                        break
                    chunks.append(b)
                    got += len(b)
                b = b"".join(chunks)
            files[name[len(prefix):]] = b
        finally:
            os.close(fd)
    return files, problem
