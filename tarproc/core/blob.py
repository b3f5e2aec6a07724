"""Large field values kept in files: :class:`Blob` and the :class:`Spooler`.

A sample field is ``bytes`` or, when the member is at least the spooler's
threshold (default 4 MiB; ``TARPROC_BLOB_THRESHOLD``, ``--blob-threshold``), a
:class:`Blob`: a read-only run of bytes in a file.  Either it is a *spool
file* the reader wrote while the rest of the sample arrived (grouping needs
the next header before a sample is complete), or a *region* of a plain,
uncompressed input file, which is then never copied at all.

A blob has a length (``len(blob)``), copies itself to a file, a file
descriptor or a writer in chunks (``os.sendfile`` where the kernel allows),
hard-links or copies itself to a path (``link_or_copy_to``), reads a prefix
(``blob.read(n)``) or streams (``blob.open()``), and gives all its ``bytes``
only when asked (``bytes(blob)``, ``blob.read()``).  Writing a sample that
holds a blob never loads it.

Spool files live in the spooler's directory (``--tmpdir``, else ``TMPDIR``,
else ``/tmp``) under names :func:`is_spool_name` recognises
(``.tarproc-spool.PID.RANDOM``).  A spool file is removed when its last blob
is closed or garbage-collected, and at interpreter exit; the writer holds a
``flock`` on it while alive, so :func:`stale_spools` can tell leftovers of a
killed process from live ones.
"""

import io
import os

#: Default size from which a member is spooled to a file.
DEFAULT_THRESHOLD = 4 << 20
#: Chunk size for copies that go through user space.
CHUNK = 1 << 20
SPOOL_PREFIX = ".tarproc-spool."

# The paths of this process's spool files, removed at exit.  Private to this
# module (the one that makes and removes spool files), one per process as the
# atexit hook is; other modules end them through remove_spool_files().
_live = set()
_atexit_done = False


def _forget_live():
    """In a child made by ``os.fork``: the parent's spool files are not its
    own to remove (at its exit, or by :func:`remove_spool_files`)."""
    _live.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_live)


def remove_spool_files():
    """Remove every spool file this process still has (at exit; a worker
    process that ends with ``os._exit``, which runs no atexit hook, calls
    it first)."""
    for path in list(_live):
        try:
            os.unlink(path)
        except OSError:
            pass
    _live.clear()


def is_spool_name(name):
    """Whether a file name (no directory) is one of our spool files."""
    if not name.startswith(SPOOL_PREFIX):
        return False
    pid, _, rest = name[len(SPOOL_PREFIX):].partition(".")
    return pid.isdigit() and bool(rest)


def stale_spools(directory):
    """Paths of spool files in ``directory`` that no live process holds
    (their writer was killed).  For ``tarcat --cleanup``."""
    import fcntl

    out = []
    try:
        names = os.listdir(directory)
    except OSError:
        return out
    for name in names:
        if not is_spool_name(name):
            continue
        path = os.path.join(directory, name)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            continue  # held: alive
        finally:
            os.close(fd)
        out.append(path)
    return out


def remove_spools_of(pid, directory=None):
    """Remove the spool files a dead process ``pid`` left in ``directory``
    (default: the default spooler's) and that nobody holds any more.  For
    parents that kill their workers (tarpcat)."""
    if directory is None:
        directory = Spooler().directory()
    prefix = f"{SPOOL_PREFIX}{pid}."
    for path in stale_spools(directory):
        if os.path.basename(path).startswith(prefix):
            try:
                os.unlink(path)
            except OSError:
                pass


class SharedFile:
    """An open file shared by blobs; closed (and unlinked if owned) when the
    last blob referring to it goes away."""

    __slots__ = ("fd", "path", "owned", "pid", "__weakref__")

    def __init__(self, fd, path, owned):
        self.fd = fd
        self.path = path
        self.owned = owned
        self.pid = os.getpid()  # a copy in a child made by os.fork never removes the file

    def close(self, _unlink=os.unlink, _close=os.close, _getpid=os.getpid):
        # (also run by __del__ at interpreter shutdown, when this module's
        # globals may be None: os is bound as defaults; _live may be gone,
        # and the atexit hook has removed the spool files by then)
        fd, self.fd = self.fd, -1
        if self.owned and self.path is not None and self.pid == _getpid():
            try:
                _unlink(self.path)
            except OSError:
                pass
            live = _live
            if live is not None:
                live.discard(self.path)
            self.owned = False
        if fd >= 0:
            try:
                _close(fd)
            except OSError:
                pass

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


def _target_fd(out):
    """A file descriptor to ``sendfile`` into, after flushing ``out``'s buffer,
    or ``None`` when ``out`` must be written through (e.g. it compresses)."""
    if isinstance(out, int):
        return out
    get = getattr(out, "blob_fd", None)
    if get is not None:
        return get()
    if type(out) is io.FileIO or (type(out) is io.BufferedWriter and type(out.raw) is io.FileIO):
        out.flush()
        return out.fileno()
    return None


class Blob:
    """``length`` bytes at ``offset`` of a file (see the module doc)."""

    __slots__ = ("_file", "offset", "length")

    def __init__(self, file, offset, length):
        self._file = file
        self.offset = offset
        self.length = length

    @classmethod
    def from_path(cls, path, owned=False):
        """A blob of a whole existing file (``owned``: removed with the blob)."""
        fd = os.open(path, os.O_RDONLY)
        f = SharedFile(fd, path, owned)
        if owned:
            _live.add(path)
        return cls(f, 0, os.fstat(fd).st_size)

    @property
    def path(self):
        """The file holding the bytes (with ``offset``), or ``None``."""
        return self._file.path

    def __reduce__(self):
        # pickled (to a --map worker, by copy): a reference that opens the
        # same bytes and owns nothing; the sender keeps its spool file
        return (_reopen, (self._ref_path(), self.offset, self.length))

    def _ref_path(self):
        f = self._file
        if f.path is not None:
            return os.path.abspath(f.path)
        return f"/proc/{os.getpid()}/fd/{self._fd()}"

    @property
    def is_spool(self):
        return self._file.owned

    def __len__(self):
        return self.length

    def __repr__(self):
        return f"Blob({self.length} bytes at {self.path!r}+{self.offset})"

    def __bytes__(self):
        return self.read()

    def __eq__(self, other):
        if isinstance(other, Blob):
            if other.length != self.length:
                return False
            other = bytes(other)
        if isinstance(other, (bytes, bytearray, memoryview)):
            return len(other) == self.length and self.read() == other
        return NotImplemented

    __hash__ = None

    def __getitem__(self, index):
        """``blob[:n]``, ``blob[a:b]``: those bytes only (read from the
        file); ``blob[i]``: one byte as an ``int``."""
        if isinstance(index, slice):
            start, stop, step = index.indices(self.length)
            if step != 1:
                return self.read()[index]
            return self._pread(max(0, stop - start), start) if stop > start else b""
        i = index + self.length if index < 0 else index
        if not 0 <= i < self.length:
            raise IndexError("blob index out of range")
        return self._pread(1, i)[0]

    def _fd(self):
        fd = self._file.fd
        if fd < 0:
            raise ValueError("blob is closed")
        return fd

    def _pread(self, n, pos):
        data = os.pread(self._fd(), n, self.offset + pos)
        if len(data) < n:
            from ..errors import BadInput

            raise BadInput(f"{self.path}: file shrank under a {self.length} byte field ({pos + len(data)} bytes left)")
        return data

    def read(self, n=-1):
        """The first ``n`` bytes (all with ``-1``: loads the whole blob)."""
        n = self.length if n is None or n < 0 or n > self.length else n
        parts = []
        pos = 0
        while pos < n:
            piece = self._pread(min(n - pos, 64 << 20), pos)
            parts.append(piece)
            pos += len(piece)
        return b"".join(parts)

    def chunks(self, size=CHUNK):
        """The bytes in pieces of at most ``size``."""
        pos = 0
        while pos < self.length:
            piece = self._pread(min(size, self.length - pos), pos)
            yield piece
            pos += len(piece)

    def open(self):
        """A readable binary stream over the bytes (for streaming reads)."""
        return io.BufferedReader(_BlobRaw(self), CHUNK)

    def copy_to(self, out):
        """Write the bytes to ``out``: a file descriptor, or an object with
        ``write`` (flushed first and bypassed with ``os.sendfile`` when it
        is a plain file or pipe).  Returns the number of bytes written."""
        hook = getattr(out, "write_blob", None)
        if hook is not None:  # the writer keeps the blob itself (e.g. to hand it to another process)
            hook(self)
            return self.length
        fd = _target_fd(out)
        if fd is not None:
            done = self._sendfile(fd)
            if done == self.length:
                return done
            pos = done
        else:
            pos = 0
        write = (lambda b: _write_all(fd, b)) if fd is not None else out.write
        while pos < self.length:
            piece = self._pread(min(CHUNK, self.length - pos), pos)
            write(piece)
            pos += len(piece)
        return self.length

    def _sendfile(self, out_fd):
        """Copy with ``os.sendfile``; returns how far it got (0 when the
        kernel refuses this pair of files: the caller copies the rest)."""
        in_fd = self._fd()
        pos = 0
        while pos < self.length:
            try:
                n = os.sendfile(out_fd, in_fd, self.offset + pos, min(self.length - pos, 1 << 30))
            except BlockingIOError:
                import select

                select.select([], [out_fd], [])
                continue
            except OSError as e:
                import errno

                if pos == 0 and e.errno in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EBADF):
                    return 0
                raise
            if n == 0:
                self._pread(self.length - pos, pos)  # raises: the file shrank
            pos += n
        return pos

    def link_or_copy_to(self, path, dir_fd=None):
        """Make ``path`` (which must not exist; relative to ``dir_fd`` if
        given) hold the bytes: a hard link when the blob is a whole spool
        file on the same file system, else a streamed copy.  A linked file
        shares the spool file's bytes: whoever changes it in place changes
        this blob too."""
        if self._file.owned and self.offset == 0 and self._file.path is not None:
            try:
                if os.fstat(self._fd()).st_size == self.length:
                    os.link(self._file.path, path, dst_dir_fd=dir_fd)
                    return
            except OSError:
                pass
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644, dir_fd=dir_fd)
        try:
            self.copy_to(fd)
        finally:
            os.close(fd)

    def persist(self, directory):
        """Hand the bytes over as a new file in ``directory`` and return its
        path: the spool file itself, renamed (the blob no longer removes it),
        when it is whole and on the same file system, else a streamed copy.
        For spilling blobs by reference (``tarsort`` run files)."""
        import secrets

        f = self._file
        path = os.path.join(directory, f"blob-{secrets.token_hex(8)}")
        if f.owned and self.offset == 0 and f.path is not None and f.fd >= 0:
            try:
                if os.fstat(f.fd).st_size == self.length:
                    os.rename(f.path, path)
                    _live.discard(f.path)
                    f.path, f.owned = path, False
                    return path
            except OSError:
                pass
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            self.copy_to(fd)
        finally:
            os.close(fd)
        return path

    def sha256(self):
        import hashlib

        h = hashlib.sha256()
        for piece in self.chunks():
            h.update(piece)
        return h

    def close(self):
        """Release the file now (a spool file is removed); later reads fail.
        Blobs sharing the file must not be used afterwards."""
        self._file.close()


def _write_all(fd, data):
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


class _BlobRaw(io.RawIOBase):
    def __init__(self, blob):
        self.blob = blob
        self.pos = 0

    def readable(self):
        return True

    def readinto(self, buf):
        n = min(len(buf), self.blob.length - self.pos)
        if n <= 0:
            return 0
        data = self.blob._pread(n, self.pos)
        buf[:n] = data
        self.pos += n
        return n


class Spooler:
    """Where and from what size member data goes to spool files.

    ``threshold``: members of at least this many bytes become blobs (``None``:
    4 MiB; ``0`` or less: never; the commands pass ``--blob-threshold`` or
    ``TARPROC_BLOB_THRESHOLD``).  ``tmpdir``:
    the directory for spool files (``None``: ``TMPDIR`` or ``/tmp``).
    ``region_threshold``: from this size on, a member of a plain input file
    becomes a region blob (no copy at all; default: ``threshold``).  Commands
    that only pass samples through (``tarcat``, ``tarsplit``) set it low, so
    their output is sent with ``sendfile`` from the input file.
    ``sample_memory``: bytes of one sample's fields held in memory before the
    rest are packed (``None``: 16 MiB; see
    :func:`tarproc.core.pack.sample_budget`)."""

    def __init__(self, threshold=None, tmpdir=None, region_threshold=None, sample_memory=None):
        if threshold is None:
            threshold = DEFAULT_THRESHOLD
        self.sample_memory = sample_memory
        self.threshold = threshold if threshold and threshold > 0 else float("inf")
        self.tmpdir = tmpdir
        self.region_threshold = min(self.threshold, region_threshold) if region_threshold else self.threshold

    def directory(self):
        import tempfile

        return self.tmpdir or os.environ.get("TMPDIR") or tempfile.gettempdir()

    def _name(self):
        global _atexit_done
        import secrets

        if not _atexit_done:
            import atexit

            atexit.register(remove_spool_files)
            _atexit_done = True
        return os.path.join(self.directory(), f"{SPOOL_PREFIX}{os.getpid()}.{secrets.token_hex(6)}")

    def _own(self, fd, path):
        """Register and lock a spool file (see :func:`stale_spools`)."""
        import fcntl

        _live.add(path)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            pass

    def new_file(self):
        """Create a new spool file: ``(fd open for writing, path)``; the
        caller owns it (remove it, or wrap it in a blob)."""
        while True:
            path = self._name()
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
                break
            except FileExistsError:
                continue
            except OSError as e:
                from ..errors import UsageError, is_write_error, write_failed

                if is_write_error(e):  # no room for one more file: an output not written
                    raise write_failed(path, "a spool file", e, "use --tmpdir") from None
                raise UsageError(f"cannot create a spool file in {self.directory()}: {e.strerror} "
                                 f"(use --tmpdir)") from None
        self._own(fd, path)
        return fd, path

    def adopt(self, name, dir_fd=None):
        """A spool-file blob with the bytes of the existing regular file
        ``name`` (relative to ``dir_fd``): a hard link when both are on one
        file system, else a streamed copy.  The file itself is left alone."""
        path = self._name()
        try:
            os.link(name, path, src_dir_fd=dir_fd, follow_symlinks=False)
        except OSError:
            pass
        else:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
            self._own(fd, path)
            return Blob(SharedFile(fd, path, True), 0, os.fstat(fd).st_size)
        src = SharedFile(os.open(name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=dir_fd), None, False)
        try:
            fd, path = self.new_file()
            f = SharedFile(fd, path, True)
            size = os.fstat(src.fd).st_size
            try:
                Blob(src, 0, size).copy_to(fd)
            except BaseException:
                f.close()
                raise
            return Blob(f, 0, size)
        finally:
            src.close()

    def spool(self, read_into, size, fail):
        """Copy ``size`` bytes from ``read_into(memoryview) -> n`` to a new
        spool file and return its :class:`Blob`.  When the input runs dry
        ``fail(got)`` is called (it raises); the file is removed.  Disk use
        never exceeds what was really read."""
        fd, path = self.new_file()
        f = SharedFile(fd, path, True)
        buf = bytearray(min(size, CHUNK))
        view = memoryview(buf)
        got = 0
        try:
            while got < size:
                want = min(len(buf), size - got)
                n = read_into(view[:want])
                if not n:
                    fail(got)
                try:
                    _write_all(fd, view[:n])
                except OSError as e:
                    raise spool_write_failed(path, e) from None
                got += n
        except BaseException:
            f.close()
            raise
        return Blob(f, 0, size)

    def copy(self, blob):
        """A spool-file blob holding a copy of ``blob``'s bytes."""
        return self._filled(blob.copy_to, blob.length)

    def blob_from_bytes(self, data):
        """A spool-file blob holding ``data``."""
        return self._filled(lambda fd: _write_all(fd, data), len(data))

    def _filled(self, write, length):
        """A new spool file, ``write(fd)`` into it, as a blob of ``length``
        bytes; a failed write removes the file (a full disk: one line)."""
        fd, path = self.new_file()
        f = SharedFile(fd, path, True)
        try:
            write(fd)
        except OSError as e:
            f.close()
            raise spool_write_failed(path, e) from None
        except BaseException:
            f.close()
            raise
        return Blob(f, 0, length)


def spool_write_failed(path, e):
    """The error for a spool file that could not be written (a full disk):
    names the file and where spool files go, exit 1."""
    from ..errors import write_failed

    return write_failed(path, "a spool file", e, "large members and large samples are kept there; choose "
                        "the place with --tmpdir or TMPDIR")


def region(fd, path, offset, length, shared=None):
    """A blob of ``length`` bytes at ``offset`` of an open file that we do not
    own (``fd`` is duplicated once per ``shared`` holder, a dict the caller
    keeps, so many blobs share one descriptor)."""
    f = shared.get("file") if shared is not None else None
    if f is None or f.fd < 0:
        f = SharedFile(os.dup(fd), path, False)
        if shared is not None:
            shared["file"] = f
    return Blob(f, offset, length)


def _reopen(path, offset, length):
    return Blob(SharedFile(os.open(path, os.O_RDONLY), path, False), offset, length)


def handover(blob, spooler=None):
    """A picklable reference that gives ``blob`` to another process (see
    :func:`take`).  A spool file is no longer removed by this process: the
    receiver owns it.  A region of an input with no name (stdin, a file):
    only this process's descriptor reaches it, which its reader closes, so
    its bytes are copied to a spool file of ``spooler`` first."""
    if blob._file.path is None:
        blob = (spooler or Spooler()).copy(blob)
    f = blob._file
    owned = f.owned
    if owned:
        _live.discard(f.path)
        f.owned = False
    return ("blob", blob._ref_path(), blob.offset, blob.length, owned)


def take(ref):
    """The :class:`Blob` of a :func:`handover` reference."""
    _, path, offset, length, owned = ref
    # a spool file is ours and never a link; a region of an input is named
    # as the sender opened it (a symlinked shard, /proc/PID/fd/N for stdin)
    fd = os.open(path, os.O_RDONLY | (os.O_NOFOLLOW if owned else 0))
    if owned:
        Spooler._own(None, fd, path)
    return Blob(SharedFile(fd, path, owned), offset, length)


def is_blob(value):
    return type(value) is Blob


def as_bytes(value):
    """``bytes`` of a field value (a blob is loaded)."""
    if type(value) is Blob:
        return value.read()
    return value
