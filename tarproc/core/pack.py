"""Member data held other ways than one spool file per large member.

Packed: a sample too large for memory without any large member (a clip
stored as thousands of frames): past :func:`sample_budget` bytes, its fields
are written one after another into one spool file by a :class:`Packer` and
become blobs of it (one descriptor for all of them).

Not held: readers that need only sizes (``tarcheck``, :class:`SizesOnly`)
or a prefix (previews, :func:`read_past`) read large members through a small
buffer."""

import os

from .blob import CHUNK, Blob, Spooler, SharedFile, spool_write_failed

#: Bytes of one sample's fields held in memory (see :func:`sample_budget`;
#: the default of ``Spooler(sample_memory=)``, ``TARPROC_SAMPLE_MEMORY``).
SAMPLE_MEMORY = 16 << 20


class Packer:
    """Files copied one after another into one spool file, each a blob of
    its part: many fields held for one descriptor and no memory (a command's
    thousands of outputs, :func:`tarproc.stages.collect._read_files`; a
    sample's fields past its budget, :func:`tarproc.core.grouping.group`)."""

    def __init__(self, spooler):
        self.spooler = spooler
        self.file = None  # made with the first field
        self.size = 0

    def _out(self):
        if self.file is None:
            wfd, path = self.spooler.new_file()
            self.file = SharedFile(wfd, path, True)
        return self.file.fd

    def add(self, fd, size):
        """A blob of the first ``size`` bytes of the open file ``fd`` (fewer
        if it has shrunk), copied into the pack."""
        out, start = self._out(), self.size
        got = 0
        try:
            while got < size:
                try:
                    n = os.copy_file_range(fd, out, size - got, got, start + got)
                except OSError:  # not between these file systems: through user space
                    piece = os.pread(fd, min(CHUNK, size - got), got)
                    n = len(piece) and os.pwrite(out, piece, start + got)
                if not n:
                    break
                got += n
        except OSError as e:
            raise spool_write_failed(self.file.path, e) from None
        finally:
            self.size = start + got
        return Blob(self.file, start, got)

    def add_bytes(self, data):
        """A blob holding ``data``, written into the pack."""
        out, start = self._out(), self.size
        view = memoryview(data)
        pos = 0
        try:
            while pos < len(view):
                pos += os.pwrite(out, view[pos : pos + CHUNK], start + pos)
        except OSError as e:
            raise spool_write_failed(self.file.path, e) from None
        finally:
            self.size = start + pos
        return Blob(self.file, start, len(view))


def sample_budget(spooler):
    """Bytes of one sample's fields held in memory before the rest go to a
    :class:`Packer` (a sample of thousands of members: a clip's frames);
    no limit when the spooler never spools.  The spooler's
    ``sample_memory`` (default :data:`SAMPLE_MEMORY`) bounds it."""
    if spooler is None or spooler.threshold == float("inf"):
        return float("inf")
    memory = getattr(spooler, "sample_memory", None)
    return min(SAMPLE_MEMORY if memory is None else memory, 4 * spooler.threshold)


class Skipped:
    """The stand-in for a large member's data that was read past (see
    :class:`SizesOnly`): it has a length and nothing else."""

    __slots__ = ("length",)

    def __init__(self, length):
        self.length = length

    def __len__(self):
        return self.length

    def __repr__(self):
        return f"Skipped({self.length} bytes)"


class SizesOnly(Spooler):
    """A spooler for readers that need only sizes (``tarcheck``): large
    members are read through a small buffer and dropped, never stored."""

    def spool(self, read_into, size, fail):
        read_past(read_into, size, fail)
        return Skipped(size)


def read_past(read_into, size, fail, keep=0):
    """Read a member's ``size`` bytes through a small buffer (``fail(got)`` if
    the input ends first); return only its first ``keep`` bytes."""
    kept, view, got = bytearray(), memoryview(bytearray(min(size, CHUNK))), 0
    while got < size:
        n = read_into(view[: min(len(view), size - got)])
        if not n:
            fail(got)
        if len(kept) < keep:
            kept += view[: min(n, keep - len(kept))]
        got += n
    return bytes(kept)
