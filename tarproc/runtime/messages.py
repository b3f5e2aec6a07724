"""Byte messages between the parent and its worker processes: multiprocess
``Connection`` framing (a 4-byte big-endian length, -1 and an 8-byte length
past 2 GiB, then the bytes), written from many buffers with ``writev``
(:func:`send_pieces`) and read into a reused buffer (:class:`Receiver`), so
``Connection.send_bytes`` and ``recv_bytes`` interoperate with them."""

import os
import struct

_LEN = struct.Struct("!i")
_LEN64 = struct.Struct("!Q")
_IOV = 1000  # iovecs per writev (Linux IOV_MAX is 1024)


def send_pieces(fd, pieces):
    """Write one message made of the buffers ``pieces`` to ``fd`` (the
    ``fileno()`` of a Connection), with ``writev`` and no join."""
    n = sum(map(len, pieces))
    head = _LEN.pack(n) if n <= 0x7fffffff else _LEN.pack(-1) + _LEN64.pack(n)
    pieces = [head] + list(pieces)
    writev = os.writev
    for i in range(0, len(pieces), _IOV):
        chunk = pieces[i : i + _IOV]
        done = writev(fd, chunk)
        want = sum(map(len, chunk))
        if done < want:  # a partial write (a signal): finish the rest plainly
            rest = memoryview(b"".join(chunk))[done:]
            while rest:
                rest = rest[os.write(fd, rest):]


class Receiver:
    """Reads Connection byte messages from ``fd`` into a buffer that is reused
    while nobody holds a view of it (``reuse=True``), else a fresh one."""

    def __init__(self, fd, reuse=False, size=0):
        import sys

        self.file = open(fd, "rb", buffering=0, closefd=False)
        self.head = bytearray(_LEN.size)
        self.reuse = reuse
        self.size = size
        self.buf = None
        self.base = 0
        self._refs = sys.getrefcount

    def _fill(self, view):
        readinto = self.file.readinto
        pos = 0
        n = len(view)
        while pos < n:
            k = readinto(view[pos:])
            if not k:
                if pos == 0 and view.obj is self.head:
                    raise EOFError
                raise OSError("got end of file during message")
            pos += k

    def recv(self):
        """The next message as a memoryview (valid until the next call when
        reusing); EOFError at the end."""
        with memoryview(self.head) as h:
            self._fill(h)
        size, = _LEN.unpack(self.head)
        if size == -1:
            big = bytearray(8)
            self._fill(memoryview(big))
            size, = _LEN64.unpack(big)
        if not self.reuse:
            buf = bytearray(size)
            self._fill(memoryview(buf))
            return memoryview(buf)
        buf = self.buf
        # reuse the buffer unless a view of it is still held (a consumer kept
        # a sample): then it must stay as it is
        if buf is None or len(buf) < size or self._refs(buf) != self.base:
            self.buf = None
            buf = bytearray(max(size, self.size))
            self.buf = buf
            self.base = self._refs(buf)
        view = memoryview(buf)[:size]
        self._fill(view)
        return view

    def close(self):
        self.buf = None
        self.file.close()
