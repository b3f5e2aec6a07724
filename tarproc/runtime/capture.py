"""A per-sample command's captured output (stdout and stderr together).

Normally a pipe: the parent reads it while the command runs, keeps up to
:data:`SPILL_BYTES` (or ``spill_bytes``) in memory and moves anything larger to an unnamed file
(``spill()``), so memory stays bounded however much a command prints, and no
file is made for the usual few lines.  When the command has exited, what is
in the pipe is read and the pipe is closed: a process that escaped the
command's process group writes into nothing (it gets ``EPIPE``), never into
another sample's output.  With a ``file`` descriptor instead (kept working
directories), the command writes to that file directly.

Error messages take its :meth:`tail` (at most
:data:`~tarproc.core.limits.TAIL_BYTES`); the echo of a successful command
copies it in chunks (:meth:`copy_to`)."""

import os
from fcntl import F_SETFL, fcntl

#: Output kept in memory per command; more goes to a file (the default of
#: ``spill_bytes``; ``TARPROC_CAPTURE_SPILL`` for the commands).
SPILL_BYTES = 256 << 10


class Capture:
    def __init__(self, file=None, spill=None, spill_bytes=None, tail_bytes=None):
        self.spill_bytes = SPILL_BYTES if spill_bytes is None else spill_bytes
        self.tail_bytes = tail_bytes  # None: limits.TAIL_BYTES
        self.fd = file  # a file holding the output (or None: all in buf)
        self.buf = bytearray()
        self.spill = spill  # () -> a new file descriptor (read/write)
        self.rfd = self.wfd = None
        self.eof = False
        if file is None:
            self.rfd, self.wfd = os.pipe2(os.O_CLOEXEC)
            fcntl(self.rfd, F_SETFL, os.O_NONBLOCK)  # the read end only (the command's stdout blocks)

    def child_fd(self):
        """What the command's stdout and stderr are."""
        return self.wfd if self.rfd is not None else self.fd

    def started(self):
        """The command has started: drop our copy of the pipe's write end."""
        if self.wfd is not None:
            os.close(self.wfd)
            self.wfd = None

    def pump(self):
        """Read what the pipe holds now; False once it is at its end (then
        :meth:`finish` closes it)."""
        while self.rfd is not None and not self.eof:
            try:
                b = os.read(self.rfd, 1 << 16)
            except BlockingIOError:
                return True
            if not b:  # at its end: nothing more to read (the caller unregisters it, then closes it)
                self.eof = True
                return False
            if self.fd is not None:
                _write_all(self.fd, b)
            else:
                self.buf += b
                if len(self.buf) > self.spill_bytes:
                    self.fd = self.spill()
                    _write_all(self.fd, self.buf)
                    self.buf = bytearray()
        return False

    def finish(self):
        """The command has exited: take what is in the pipe and close it."""
        self.started()
        self.pump()
        self._close_pipe()

    def _close_pipe(self):
        if self.rfd is not None:
            os.close(self.rfd)
            self.rfd = None

    def size(self):
        return len(self.buf) + (os.fstat(self.fd).st_size if self.fd is not None else 0)

    __len__ = size

    def __bool__(self):
        return self.size() > 0

    def tail(self):
        from ..core.limits import TAIL_BYTES, tail_of_fd

        limit = TAIL_BYTES if self.tail_bytes is None else self.tail_bytes
        if self.fd is None:
            return bytes(self.buf[-limit:])
        return tail_of_fd(self.fd, limit)[0]

    def read(self):
        chunks = []
        self.copy_to(chunks.append, close=False)
        return b"".join(chunks)

    def take(self, threshold):
        """The output as ``bytes``, or, when it has gone to a file and is at
        least ``threshold`` bytes, as a :class:`~tarproc.core.blob.Blob` of
        that file (which it then owns): a long log stored in a field is not
        loaded into memory."""
        if self.fd is not None and not self.buf and self.size() >= threshold:
            from ..core.blob import Blob, SharedFile

            self.started()
            self._close_pipe()
            fd, self.fd = self.fd, None
            return Blob(SharedFile(fd, None, False), 0, os.fstat(fd).st_size)
        return self.read()

    def copy_to(self, write, close=True):
        """Pass the output to ``write(bytes)`` in chunks (then close)."""
        try:
            if self.fd is None:
                if self.buf:
                    write(bytes(self.buf))
                return
            pos = 0
            while True:
                b = os.pread(self.fd, 1 << 16, pos)
                if not b:
                    break
                write(b)
                pos += len(b)
        finally:
            if close:
                self.close()

    def close(self):
        self.started()
        self._close_pipe()
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        self.buf = bytearray()

    def __del__(self, _close=os.close):
        # may run at interpreter shutdown, after this module's globals are
        # set to None: only attributes and the bound default are used
        for name in ("wfd", "rfd", "fd"):
            fd = getattr(self, name, None)
            if fd is not None:
                setattr(self, name, None)
                try:
                    _close(fd)
                except OSError:
                    pass


def _write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
