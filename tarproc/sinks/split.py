"""Cutting a stream of samples into shards.

:func:`split_samples` writes samples to numbered shards, closing a shard
*before* the sample that would make it exceed a sample count or a byte size;
samples are never split.  Sizes are the shard's bytes exactly as
:class:`~tarproc.tario.TarWriter` writes them (headers, padding and the
1024-byte end-of-archive marker), before compression.  Every shard goes
through :func:`~tarproc.urls.open_sink`, so a local shard appears under its
final name only when it is complete.

After each shard is complete an optional ``post`` callback (see
:func:`post_command`) runs; its failure stops the split.

    for shard in split_samples(samples, "out-%06d.tar", max_count=1000):
        print(shard.name, shard.samples, shard.bytes)
"""

import os

from ..errors import OutputError, UsageError
from ..core.rules import is_meta
from ..core.grouping import SampleWriter, sample_members
from ..core.stats import Stats
from ..core.tario import BLOCK, TarWriter

#: The end-of-archive marker every shard ends with.
END_MARKER = 2 * BLOCK
_MAX_OCTAL_SIZE = 0o77777777777
_sizer = TarWriter(None)


class Shard:
    """A finished shard: ``name`` (URL as written), ``index`` (its number),
    ``samples`` and ``bytes`` (uncompressed tar bytes, end marker included)."""

    __slots__ = ("name", "index", "samples", "bytes")

    def __init__(self, name, index, samples=0, nbytes=0):
        self.name = name
        self.index = index
        self.samples = samples
        self.bytes = nbytes

    def as_dict(self):
        return {"name": self.name, "index": self.index, "samples": self.samples, "bytes": self.bytes}

    def __repr__(self):
        return f"Shard({self.name!r}, index={self.index}, samples={self.samples}, bytes={self.bytes})"


def member_size(name, size):
    """Bytes :class:`TarWriter` writes for a member (header(s), data, padding)."""
    nameb = name.encode("utf-8", "surrogateescape")
    if len(nameb) <= 100 and size <= _MAX_OCTAL_SIZE and nameb.isascii():
        head = BLOCK
    else:
        head = len(_sizer._slow_header(nameb, size))
    return head + size + (-size % BLOCK)


def sample_size(sample):
    """Bytes a sample takes in a tar written by :class:`SampleWriter`."""
    total = 0
    key = sample.get("__key__")
    fast = isinstance(key, str) and key.isascii() and len(key) < 90
    if fast:
        for field, value in sample.items():
            if is_meta(field):
                continue
            if type(value) is not bytes or len(field) + len(key) >= 100 or not field.isascii():
                fast = False
                break
            size = len(value)
            total += BLOCK + size + (-size % BLOCK)
        if fast:
            return total
    total = 0
    for name, value in sample_members(sample):
        total += member_size(name, len(value))
    return total


def shard_pattern(output, compress=False):
    """The shard-name pattern of an ``-o`` value: a name with ``%d``-style or
    ``{shard...}`` placeholders is used as given; anything else is a prefix
    that gets ``-000000.tar`` (``.tar.gz`` with ``compress``)."""
    if "%" in output or "{" in output:
        return output
    return output + ("-%06d.tar.gz" if compress else "-%06d.tar")


def shard_name(pattern, index):
    """Fill a shard-name pattern with the shard number."""
    try:
        if "{" in pattern:
            name = pattern.format(shard=index, index=index)
        else:
            name = pattern % index
    except (KeyError, IndexError, ValueError, TypeError) as e:
        raise UsageError(f"bad shard name pattern {pattern!r}: {e} (use e.g. out-%06d.tar or out-{{shard:06d}}.tar)") from None
    if name == pattern.replace("%%", "%") and ("%" in pattern or "{" in pattern):
        raise UsageError(f"shard name pattern {pattern!r} has no shard number")
    return name


def placeholders(name, index):
    """The values a post command can use for a shard: ``shard`` (its name),
    ``abspath``, ``basename``, ``dirname``, ``base``, ``ext`` and ``index``."""
    from ..sources.open import scheme_of

    local = scheme_of(name) == "file"
    basename = name.rstrip("/").rsplit("/", 1)[-1]
    if basename.endswith((".tar.gz", ".tar.bz2", ".tar.xz", ".tar.zst")):
        cut = basename.rfind(".tar.")
    else:
        cut = basename.rfind(".")
    base, ext = (basename[:cut], basename[cut:]) if cut > 0 else (basename, "")
    return {
        "shard": name,
        "abspath": os.path.abspath(name) if local else name,
        "basename": basename,
        "dirname": os.path.dirname(os.path.abspath(name)) if local else name.rsplit("/", 1)[0],
        "base": base,
        "ext": ext,
        "index": str(index),
    }


def fill_command(template, name, index):
    """Fill every ``%s`` (the shard name) and every ``{shard}``, ``{abspath}``,
    ``{basename}``, ``{dirname}``, ``{base}``, ``{ext}``, ``{index}`` in a
    shell command template.  Values are shell-quoted when they need it."""
    import re
    import shlex

    values = placeholders(name, index)

    def quoted(v):
        return shlex.quote(v)

    def sub(m):
        word = m.group(1)
        if word not in values:
            return m.group(0)
        return quoted(values[word])

    out = template.replace("%s", "\0S\0")
    out = re.sub(r"\{(\w+)\}", sub, out)
    return out.replace("\0S\0", quoted(name))


def post_command(template, delete=False, env=None):
    """A ``post(shard)`` callback running a shell command filled by
    :func:`fill_command`; a non-zero exit raises :class:`OutputError` naming
    the shard.  With ``delete``, a local shard is removed after the command
    succeeds (the original ``tarsplit -C``)."""
    import subprocess
    import sys

    from ..sources.open import scheme_of

    def post(shard):
        cmd = fill_command(template, shard.name, shard.index)
        try:
            rc = subprocess.call(cmd, shell=True, stdout=sys.stderr.fileno(), env=env)
        except OSError as e:
            raise OutputError(f"{shard.name}: cannot run post command {cmd!r}: {e.strerror}") from None
        if rc != 0:
            raise OutputError(f"{shard.name}: post command {cmd!r} failed with exit status {rc}")
        if delete and scheme_of(shard.name) == "file":
            try:
                os.unlink(shard.name)
            except FileNotFoundError:
                pass  # the command moved it away
            except OSError as e:
                raise OutputError(f"{shard.name}: cannot delete after the command: {e.strerror}") from None

    return post


def split_samples(samples, pattern, max_count=None, max_size=None, start=0, maxshards=None,
                  compression="auto", post=None, stats=None, **header_defaults):
    """Write ``samples`` to shards named by ``pattern`` (see :func:`shard_name`)
    and yield a :class:`Shard` for each shard as it is completed.

    A shard is closed before a sample that would make it hold more than
    ``max_count`` samples or more than ``max_size`` bytes (as written, end
    marker included); a sample larger than ``max_size`` on its own gets a
    shard to itself.  Shards are numbered from ``start``; after ``maxshards``
    shards no more input is read.  ``compression`` is passed to
    :func:`~tarproc.urls.open_sink` (``"auto"``: from the name).  ``post(shard)``
    runs after each shard is complete (and before it is yielded)."""
    from .output import open_sink

    if max_count is not None and max_count < 1:
        raise UsageError(f"the sample count per shard must be at least 1 (got {max_count})")
    if max_size is not None and max_size < 1:
        raise UsageError(f"the shard size must be at least 1 byte (got {max_size})")
    if maxshards is not None and maxshards < 1:
        return
    stats = stats if stats is not None else Stats()
    count_limit = max_count if max_count is not None else float("inf")
    size_limit = max_size if max_size is not None else float("inf")
    index = start
    sink = writer = shard = None
    done = 0

    def finish(shard, writer, sink):
        """Close a full shard: end marker, commit under its final name, post command."""
        writer.close()
        shard.bytes = writer.bytes_written
        sink.close()
        if post is not None:
            post(shard)

    it = iter(samples)
    try:
        for sample in it:
            nbytes = sample_size(sample)
            if shard is not None and (shard.samples + 1 > count_limit
                                      or shard.bytes + nbytes + END_MARKER > size_limit):
                finish(shard, writer, sink)
                sink = None
                yield shard
                done += 1
                shard = None
                index += 1
                if maxshards is not None and done >= maxshards:
                    return
            if shard is None:
                name = shard_name(pattern, index)
                sink = open_sink(name, compression)
                writer = SampleWriter(sink, stats, **header_defaults)
                shard = Shard(name, index)
            writer.write(sample)
            shard.samples += 1
            shard.bytes += nbytes
        if shard is not None:
            finish(shard, writer, sink)
            sink = None
            yield shard
    finally:
        if sink is not None:
            sink.abort()
        close = getattr(it, "close", None)
        if close is not None:
            close()
