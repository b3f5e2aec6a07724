"""The raw reader under every input (:class:`FdReader`: a file, stdin, or
the stdout of a :class:`~tarproc.runtime.child.Child`), the buffer sizes
of inputs, and :func:`grow_pipe`.  Used by :mod:`.open` (opening URLs) and
:mod:`.compression` (the output of a decoder program), and by the sinks for
the size of their buffers."""

import io
import os
import select

from ..errors import BadInput

BUFSIZE = 1 << 20
#: Read-ahead for plain files, whose large members are seeked over.
REGION_BUFSIZE = 32 << 10


class FdReader(io.RawIOBase):
    """Raw reader over a file descriptor, optionally the stdout of a child
    (a :class:`~tarproc.runtime.child.Child`).

    Before a read that would block on an empty pipe it calls ``stall`` (a
    :class:`~tarproc.runtime.stall.Stall`: buffered outputs flush).  At end
    of input it waits for the child and raises :class:`BadInput` naming the
    URL if it failed, so a failed download is never mistaken for a short
    archive."""

    def __init__(self, fd, url, proc=None, closefd=True, what=None, stall=None):
        self.stall = stall
        self.fd = fd
        self.url = url
        self.proc = proc
        self.closefd = closefd
        self.what = what
        try:
            import stat

            self.pollable = not stat.S_ISREG(os.fstat(fd).st_mode)
        except OSError:
            self.pollable = True
        self.eof = False

    def readable(self):
        return True

    def readinto(self, buf):
        if self.eof:
            return 0
        stall = self.stall
        if stall and self.pollable:
            try:
                ready, _, _ = select.select([self.fd], [], [], 0)
            except (OSError, ValueError):  # a closed descriptor: the read below says so
                ready = True
            if not ready:
                stall()
        try:
            n = os.readv(self.fd, [buf])
        except OSError as e:
            raise BadInput(f"{self.url}: read error: {e.strerror}") from None
        if n == 0:
            self.eof = True
            self.check_process()
        return n

    def seekable(self):
        return not self.pollable

    def seek(self, pos, whence=0):
        return os.lseek(self.fd, pos, whence)

    def tell(self):
        return os.lseek(self.fd, 0, 1)

    def check_process(self):
        """At the end of the child's output: :class:`BadInput` if it failed."""
        child = self.proc
        if child is None:
            return
        if child.wait() != 0:
            raise BadInput(f"{self.url}: {child.failed(self.what)}")

    def close(self):
        if self.closed:
            return
        try:
            if self.proc is not None and self.proc.poll() is None:
                # Stopped reading early (e.g. --count): stop the producer and
                # everything it started (its process group).
                self.proc.kill()
            if self.closefd:
                os.close(self.fd)
        finally:
            super().close()


def grow_pipe(fd):
    """A 1 MiB pipe: fewer wake-ups between the decoder and us, or between
    us and the next stage of a pipeline (Linux; anything else: unchanged)."""
    try:
        import fcntl

        if fcntl.fcntl(fd, getattr(fcntl, "F_GETPIPE_SZ", 1032)) < 1 << 20:  # never shrink it
            fcntl.fcntl(fd, getattr(fcntl, "F_SETPIPE_SZ", 1031), 1 << 20)
    except OSError:
        pass
