"""Damaged or unreadable shards, skipped on request: :class:`BadShards` and
:class:`Hold`.

A *bad shard* is an input that cannot be opened (missing file, failed
download, unknown compression) or whose bytes break part way (a truncated
member, garbage in the middle, a damaged gzip stream): anything that makes
reading it raise :class:`~tarproc.errors.BadInput`.  What happens then is
the policy:

``"fail"`` (the default)
    the error ends the reading, as it always did (exit 2 in a command).
``"skip"``
    the shard is left out whole: the samples read from it before the damage
    are dropped too, so the output is exactly that of the good shards.  To
    drop them after they were read, each shard's samples are *held* until
    the shard ends (:class:`Hold`: up to :data:`HOLD_MEMORY` bytes in memory,
    the rest in an anonymous temporary file), so a shard's samples come out
    when it ends, not while it is read.
``"partial"``
    the samples read before the damage are kept (they stream as they are
    read, nothing is held) and the rest of the shard is skipped.

Every bad shard is reported in one line (which shard, where, what, how
many samples were read from it and whether they were kept) and recorded in
:class:`BadShards`; when the reading ends, more of them than ``max_bad``
raises :class:`~tarproc.errors.TooManyBadShards` (exit 1 in a command).
"""

import io
import os
import struct

from ..errors import BadArchive, BadInput, TooManyBadShards, UsageError

POLICIES = ("fail", "skip", "partial")

#: Bytes of one held shard's samples kept in memory (their fields, the raw
#: bytes they carry, and :data:`SAMPLE_OVERHEAD` each); the rest goes to a file.
HOLD_MEMORY = 32 << 20
#: What a sample costs in memory beside its bytes (the dict, its keys), about.
SAMPLE_OVERHEAD = 512
#: Large fields in spool files (one open file each) a hold keeps as they
#: are; further ones are copied into the hold's file (open files stay
#: bounded).  Regions of a plain input file share its one descriptor and
#: are always kept as they are.
HOLD_BLOBS = 256
#: Bad shards named one by one in the summary (the rest are counted).
NAMED_IN_SUMMARY = 10


class BadShard:
    """One bad shard: ``url``, ``offset`` (in the uncompressed stream, or
    ``None``), ``message`` (what is wrong, naming the shard), ``read``
    (samples read from it before the damage) and ``kept`` (whether those
    went on)."""

    __slots__ = ("url", "offset", "message", "read", "kept")

    def __init__(self, url, offset, message, read, kept):
        self.url, self.offset, self.message, self.read, self.kept = url, offset, message, read, kept

    def line(self):
        n = self.read
        samples = f"{n} sample{'' if n == 1 else 's'}"
        if not n:
            return f"bad shard skipped: {self.message} (no sample read from it)"
        if self.kept:
            return f"bad shard cut short: {self.message} (the {samples} read before the damage kept, the rest skipped)"
        return f"bad shard skipped: {self.message} ({samples} read from it dropped)"

    def __repr__(self):
        return f"BadShard({self.url!r}, offset={self.offset}, read={self.read}, kept={self.kept})"


def describe(url, error):
    """``(offset, message)`` of an error met while reading shard ``url``;
    the message names the shard."""
    from ..core.limits import shorten

    text = str(error)
    offset = getattr(error, "offset", None) if isinstance(error, BadArchive) else None
    name = "stdin" if url == "-" else url
    if not (text.startswith(shorten(name)) or text.startswith(name)):
        text = f"{shorten(name)}: {text}"
    return offset, text


class BadShards:
    """The policy for bad shards and the record of those met.

    ``policy``: ``"fail"``, ``"skip"`` or ``"partial"`` (see the module
    doc).  ``max_bad``: bad shards allowed (``None``: any number);
    :meth:`check` raises :class:`~tarproc.errors.TooManyBadShards` past it.
    ``report(line)`` is told of each bad shard as it is met.  ``spooler``
    (a :class:`~tarproc.core.blob.Spooler`) says where a held shard's file
    goes.  ``shards`` lists the first bad shards (:data:`NAMED_IN_SUMMARY` of
    them), ``count`` counts them all, ``dropped`` and ``kept`` count the
    samples read from them."""

    def __init__(self, policy="fail", max_bad=None, report=None, spooler=None):
        if policy not in POLICIES:
            raise UsageError(f"on_bad_shard: {policy!r} is not one of {', '.join(POLICIES)}")
        if max_bad is not None and (not isinstance(max_bad, int) or max_bad < 0):
            raise UsageError(f"max_bad_shards: {max_bad!r} must be a whole number >= 0")
        self.policy = policy
        self.max_bad = max_bad
        self.report = report
        self.spooler = spooler
        self.shards = []
        self.count = 0
        self.dropped = 0
        self.kept = 0

    @property
    def skipping(self):
        return self.policy != "fail"

    def add(self, url, error, read, kept=None):
        """Record bad shard ``url`` (``error``: the exception or its
        message), from which ``read`` samples were read; report it."""
        kept = self.policy == "partial" if kept is None else kept
        offset, message = describe(url, error)
        shard = BadShard(url, offset, message, read, kept)
        self.count += 1
        if kept:
            self.kept += read
        else:
            self.dropped += read
        if len(self.shards) < NAMED_IN_SUMMARY:
            self.shards.append(shard)
        if self.report is not None:
            self.report(shard.line())
        return shard

    def exceeded(self):
        return self.max_bad is not None and self.count > self.max_bad

    def summary(self, inputs=None):
        """One line: how many shards were bad, the samples read from them,
        and the first of their names."""
        from ..core.limits import shorten

        of = f" of {inputs}" if inputs else ""
        names = ", ".join(shorten("stdin" if s.url == "-" else s.url) for s in self.shards)
        more = " ..." if self.count > len(self.shards) else ""
        allowed = "" if self.max_bad is None else f", {self.max_bad} allowed by --max-bad-shards"
        plural = "" if (inputs or self.count) == 1 else "s"
        what = "cut short" if self.policy == "partial" else "skipped"
        return (f"{self.count}{of} shard{plural} bad and {what} (samples read from "
                f"them: {self.dropped} dropped, {self.kept} kept{allowed}): {names}{more}")

    def check(self, inputs=None):
        """Raise :class:`~tarproc.errors.TooManyBadShards` (the summary) when
        more shards were bad than ``max_bad`` allows."""
        if self.exceeded():
            raise TooManyBadShards(self.summary(inputs))

    def nothing_read(self, inputs):
        """Whether all ``inputs`` shards were bad and none gave a sample (the
        commands fail then: an empty result is not a success with nothing in it)."""
        return bool(inputs) and self.count >= inputs and not self.kept

    def guard(self, url, samples):
        """The samples of shard ``url`` (the iterator ``samples``) under the
        policy: a :class:`~tarproc.errors.BadInput` from it is recorded and
        ends the shard quietly (``"partial"``: the samples before it were
        given; ``"skip"``: they were held and are dropped)."""
        if self.policy == "fail":
            yield from samples
            return
        read = 0
        if self.policy == "partial":
            try:
                for sample in samples:
                    read += 1
                    yield sample
            except BadInput as e:
                self.add(url, e, read)
            finally:
                _close(samples)
            return
        hold = Hold(self.spooler)
        try:
            for sample in samples:
                hold.add(sample)
        except BadInput as e:
            n = hold.count
            hold.discard()
            self.add(url, e, n)
            return
        except BaseException:
            hold.discard()
            raise
        finally:
            _close(samples)
        yield from hold.drain()


def _close(it):
    close = getattr(it, "close", None)
    if close is not None:
        close()


def as_bad_shards(on_bad_shard, warn=None):
    """A :class:`BadShards` for ``on_bad_shard`` (a policy name, or a
    :class:`BadShards` as it is), or ``None`` for ``"fail"``.  A new one
    reports to ``warn`` and allows any number of bad shards."""
    if on_bad_shard is None or isinstance(on_bad_shard, BadShards):
        return on_bad_shard if on_bad_shard is None or on_bad_shard.skipping else None
    if on_bad_shard == "fail":
        return None
    return BadShards(on_bad_shard, None, warn)


def held(samples, spooler=None):
    """The samples of one shard, given only once all of them were read
    (:class:`Hold`); an error drops them and goes on up."""
    hold = Hold(spooler)
    try:
        for sample in samples:
            hold.add(sample)
    except BaseException:
        hold.discard()
        raise
    finally:
        _close(samples)
    yield from hold.drain()


_LEN = struct.Struct("<Q")


class Hold:
    """The samples of one shard, held until it ends (policy ``"skip"``).

    Up to :data:`HOLD_MEMORY` bytes of samples stay in memory as they came;
    from there on each sample is pickled into an anonymous temporary file
    (in the spooler's directory), so memory stays flat however long the
    shard.  Large fields (:class:`~tarproc.core.blob.Blob`) stay in their
    spool files; past :data:`HOLD_BLOBS` of them, their bytes are copied into
    the temporary file and come back as new spool files.  :meth:`drain`
    gives the samples back in order; :meth:`discard` drops them."""

    def __init__(self, spooler=None, memory=HOLD_MEMORY, blobs=None):
        self.spooler = spooler
        self.memory = memory
        self.max_blobs = HOLD_BLOBS if blobs is None else blobs
        self.samples = []
        self.size = 0
        self.count = 0
        self.mem_blobs = 0
        self.spooled = 0  # spool-file blobs among self.blobs
        self.blobs = []  # blobs of spilled samples, kept as they are
        self.file = None
        self.pos = 0

    def add(self, sample):
        from ..core.blob import Blob

        self.count += 1
        if self.file is None:
            n = SAMPLE_OVERHEAD
            nb = 0
            for v in sample.values():
                t = type(v)
                if t is bytes or t is bytearray:
                    n += len(v)
                elif t is Blob and v.is_spool:
                    nb += 1
            raw = getattr(sample, "raw", None)
            if raw:
                n += sum(len(p) for p in raw[0])
            if self.size + n <= self.memory and self.mem_blobs + nb <= self.max_blobs:
                self.samples.append(sample)
                self.size += n
                self.mem_blobs += nb
                return
            self.file = self._new_file()
        try:
            self._spill(sample)
        except OSError as e:  # a full disk: exit 1 (output not written), naming where it went
            from ..errors import OutputError

            where = self.spooler.directory() if self.spooler is not None else "TMPDIR"
            raise OutputError(f"cannot keep a held shard's samples in {where}: {e.strerror or e} (choose the "
                              f"place with --tmpdir or TMPDIR)") from None

    def _new_file(self):
        import tempfile

        directory = self.spooler.directory() if self.spooler is not None else None
        try:
            return tempfile.TemporaryFile(dir=directory, prefix=".tarproc-hold.")
        except OSError as e:
            raise UsageError(f"cannot make a file for a held shard in {directory or 'TMPDIR'}: "
                             f"{e.strerror or e} (use --tmpdir)") from None

    def _spill(self, sample):
        """One record: its lengths (pickle, copied blobs), the pickled
        sample, then the bytes of the blobs copied with it."""
        import pickle

        from ..core.blob import Blob

        refs = []
        fields = {}
        copies = []
        area = 0
        for k, v in sample.items():
            if type(v) is Blob:
                if not v.is_spool or self.spooled + self.mem_blobs < self.max_blobs:
                    self.spooled += v.is_spool
                    self.blobs.append(v)
                    v = ("ref", len(self.blobs) - 1)
                else:
                    copies.append(v)
                    v = ("copy", area, len(v))
                    area += v[2]
                refs.append(k)
            fields[k] = v
        raw = getattr(sample, "raw", None)
        raw = ([bytes(p) for p in raw[0]], raw[1]) if raw else None
        record = pickle.dumps((fields, refs, raw, hasattr(sample, "raw")), protocol=5)
        f = self.file
        f.seek(self.pos)
        f.write(_LEN.pack(len(record)) + _LEN.pack(area))
        f.write(record)
        for blob in copies:
            blob.copy_to(f)
        f.flush()
        self.pos += 2 * _LEN.size + len(record) + area

    def drain(self):
        """Yield the held samples in order (each given up as it goes)."""
        import pickle

        samples, self.samples = self.samples, []
        samples.reverse()
        while samples:
            yield samples.pop()
        if self.file is None:
            return
        f = self.file
        f.flush()
        end = self.pos
        pos = 0
        try:
            while pos < end:
                f.seek(pos)
                head = f.read(2 * _LEN.size)
                if len(head) < 2 * _LEN.size:
                    break
                n, area = _LEN.unpack_from(head)[0], _LEN.unpack_from(head, _LEN.size)[0]
                body = f.read(n)
                if len(body) < n:
                    break
                blobs_at = pos + 2 * _LEN.size + n
                pos = blobs_at + area
                fields, refs, raw, is_raw = pickle.loads(body)
                if is_raw and not refs:
                    from ..core.passthru import RawSample

                    sample = RawSample(fields)
                    sample.raw = raw
                else:
                    sample = fields
                for k in refs:
                    kind, a, b = fields[k] if len(fields[k]) == 3 else (*fields[k], None)
                    if kind == "ref":
                        dict.__setitem__(sample, k, self.blobs[a])
                        self.blobs[a] = None
                    else:
                        dict.__setitem__(sample, k, self._respool(f, blobs_at + a, b))
                yield sample
        finally:
            self.discard()

    def _respool(self, f, start, length):
        from ..core.blob import Spooler

        spooler = self.spooler if self.spooler is not None else Spooler()
        fd = f.fileno()
        pos = [start]

        def read_into(view):
            n = os.preadv(fd, [view], pos[0])
            pos[0] += n
            return n

        def fail(got):
            raise BadInput(f"held shard file shrank ({got} of {length} bytes)")

        return spooler.spool(read_into, length, fail)

    def discard(self):
        self.samples = []
        self.blobs = []
        if self.file is not None:
            try:
                self.file.close()
            except (OSError, io.UnsupportedOperation):
                pass
            self.file = None
