"""Trees of files (and ``s3://``/``gs://`` listings) as samples, for
``tarcreate --tree``: every file below a tree's root is a field of the sample
its key rule names (:func:`key_rule`: ``path``, ``base`` or a regex with a
group ``key``; the field is the file name after its first dot, ``PREFIX.``
before it for a tree given as ``DIR:PREFIX``).  :func:`list_trees` walks the
trees once, checks every name against the sample rule
(:func:`~tarproc.core.rules.classify`) and keeps one compact ``bytes`` entry
per file (key, field, tree, size, path: memory linear in the listing, bounded
by ``max_plan`` bytes of entries), sorted by key bytewise as ``tarsort`` orders
keys, so the same trees give the same samples whatever order the file system
lists them in; :func:`check_samples` then checks duplicates and required
fields before anything is written, and :func:`tree_parts` gives each sample's
fields in order: local files opened one at a time (large ones copied in
chunks, a size change while read is an error), bucket objects fetched ahead
by a bounded pool of threads, each spooled to a temporary file when large."""

import os
import re
import stat

from ..core.limits import quote, shown
from ..core.rules import Refused, bad_key, classify, split_name, unsafe_name
from ..errors import BadInput, UsageError
from ..runtime.schemes import scheme_of

#: Schemes whose trees are bucket listings (the scheme table's LIST row).
REMOTE = ("s3", "gs")
#: Objects up to this size are held in memory; larger ones are spooled to a temporary file.
SMALL_FILE = 1 << 20
#: Local files up to this size are read into memory; larger ones are copied
#: from the open file (``sendfile`` into an uncompressed output: one copy fewer).
READ_WHOLE = 64 << 10
#: What :class:`Skipped` counts, and how a summary names each.
SKIP_REASONS = {
    "hidden": "hidden files and directories (names starting with '.') left out",
    "noext": "files without an extension (not KEY.FIELD) left out",
    "nomatch": "files the key regex does not match left out",
    "dirlink": "symbolic links to directories not followed (give the target as its own --tree)",
    "special": "special files (FIFOs, sockets, devices) left out",
}


class Tree:
    """One ``--tree`` argument: its ``root`` (a directory or an ``s3://``/``gs://``
    prefix ending in ``/``) and the ``prefix`` of its fields (``""``: none)."""

    __slots__ = ("spec", "root", "prefix", "remote", "_base")

    def __init__(self, spec, root, prefix, remote):
        self.spec = spec
        self.root = root
        self.prefix = prefix
        self.remote = remote
        self._base = root if remote or root.endswith("/") else root + "/"

    def path(self, rel):
        """The path (or URL) of the file ``rel`` below the root."""
        return self._base + rel


def parse_tree(spec):
    """A :class:`Tree` from ``DIR``, ``DIR:PREFIX``, ``s3://BUCKET/PREFIX/[:PREFIX]``.
    The part after the last ``:`` is a field prefix when it holds no ``/``
    (a directory whose name ends in ``:x`` is written ``DIR:x/``)."""
    root, prefix = spec, ""
    head, sep, tail = spec.rpartition(":")
    if sep and head and "/" not in tail:
        root, prefix = head, tail
        if not prefix or prefix != prefix.strip() or prefix.startswith(".") or prefix.endswith("."):
            raise UsageError(f"--tree {shown(spec)}: bad field prefix {quote(prefix)}")
        prefix = prefix.lower()  # fields read back lower-cased (core/rules.split_name)
    name = scheme_of(root)
    if name in REMOTE:
        if not root.partition("://")[2].partition("/")[0]:
            raise UsageError(f"--tree {shown(spec)}: no bucket")
        return Tree(spec, root if root.endswith("/") else root + "/", prefix, True)
    if name != "file":
        raise UsageError(f"--tree {shown(spec)}: a tree is a directory, an s3:// or a gs:// prefix")
    if not root:
        raise UsageError(f"--tree {shown(spec)}: no directory")
    return Tree(spec, root, prefix, False)


def key_rule(text):
    """The key rule of ``--key``: a function from a path below the tree root
    to ``(key, field)`` or ``None`` (not matched).  ``path``: the directories
    and the file name up to its first dot (as ``tar -c | tarsplit`` groups);
    ``base``: the file name up to its first dot, directories dropped; else a
    regular expression searched in the path, whose group ``key`` is the key.
    The field is the file name after its first dot in every rule."""
    if text == "path":
        return split_name
    if text == "base":
        def base(rel):
            return split_name(rel[rel.rfind("/") + 1:])
        return base
    try:
        rx = re.compile(text)
    except re.error as e:
        raise UsageError(f"--key {quote(text)}: not path, base or a regular expression ({e})") from None
    if "key" not in rx.groupindex:
        raise UsageError(f"--key {quote(text)}: a regular expression needs a group named key: (?P<key>...)")

    def regex(rel):
        m = rx.search(rel)
        parts = split_name(rel[rel.rfind("/") + 1:])
        if m is None or parts is None:
            return None
        return m.group("key"), parts[1]
    return regex


class Skipped:
    """Files left out of a listing, counted by reason (:data:`SKIP_REASONS`),
    with the first of each as an example; ``on_skip(reason, path)`` is
    called for each (``-v``)."""

    def __init__(self, on_skip=None):
        self.counts = {}
        self.example = {}
        self.on_skip = on_skip

    def add(self, reason, path):
        n = self.counts.get(reason, 0)
        if not n:
            self.example[reason] = path
        self.counts[reason] = n + 1
        if self.on_skip is not None:
            self.on_skip(reason, path)

    def lines(self):
        """One summary line per reason."""
        return [f"{n:,} {SKIP_REASONS[r]}, e.g. {quote(self.example[r])}" for r, n in self.counts.items()]


def _enc(text):
    return text.encode("utf-8", "surrogateescape")


def _dec(raw):
    return raw.decode("utf-8", "surrogateescape")


class Listing:
    """The files of some trees as sorted entries (see the module doc):
    ``entries`` (``bytes``: ``KEY\\0FIELD\\0TREE\\0SIZE\\0PATH``, sorted),
    ``trees``, ``skipped`` (a :class:`Skipped`), ``files``, ``bytes`` (the
    sizes listed; ``None`` when a listing gave none)."""

    def __init__(self, trees, rule, max_plan, avoid, skipped):
        self.trees = trees
        self.rule = rule
        self.max_plan = max_plan
        self.avoid = avoid
        self.skipped = skipped
        self.entries = []
        self.held = 0
        self.bytes = 0

    @property
    def files(self):
        return len(self.entries)

    def add(self, index, rel, size, ident=None):
        """One file ``rel`` of tree ``index``: checked, keyed, kept."""
        tree = self.trees[index]
        path = tree.path(rel)
        why = None if rel.isprintable() and ".." not in rel else unsafe_name(rel)  # (the common name passes)
        if why:
            raise BadInput(f"{shown(path)}: refusing the file: {why.replace('member name', 'name')} "
                           f"(rename it, or move it out of the tree)")
        base = rel[rel.rfind("/") + 1:]
        if split_name(base) is None:
            self.skipped.add("noext", path)
            return
        parts = self.rule(rel)
        if parts is None:
            self.skipped.add("nomatch", path)
            return
        key, field = parts
        if tree.prefix:
            field = f"{tree.prefix}.{field}"
        why = bad_key(key) if self.rule is not split_name else None  # (split_name's keys have no dot)
        found = classify(f"{key}.{field}") if not why else None
        if isinstance(found, Refused):
            why = found.why
        elif not why and found != (key, field):
            why = f"key {quote(key)} and field {quote(field)} would read back as {found[0]!r}, {found[1]!r}"
        if why:
            raise BadInput(f"{shown(path)}: refusing the file: {why}")
        if ident is not None and ident in self.avoid:
            raise BadInput(f"{shown(path)}: input file is output file (it is being written)")
        if not tree.remote and not os.access(path, os.R_OK):
            raise BadInput(f"{shown(path)}: file is not readable (permission denied)")
        entry = b"\0".join((_enc(key), _enc(field), b"%d" % index, b"%d" % (size if size is not None else -1),
                            _enc(rel)))
        self.held += len(entry) + 64  # the entry and its object's overhead
        if self.held > self.max_plan:
            raise BadInput(f"{shown(tree.spec)}: the listing holds more than {self.max_plan:,} bytes "
                           f"(TARPROC_MAX_PLAN): it is checked whole before anything is written; "
                           f"make trees of parts and join the outputs with tarcat")
        if size is None:
            self.bytes = None
        elif self.bytes is not None:
            self.bytes += size
        self.entries.append(entry)


def _walk_local(listing, index):
    tree = listing.trees[index]
    root = tree.root
    try:
        st = os.stat(root)
    except OSError as e:
        raise BadInput(f"--tree {shown(root)}: {e.strerror}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise BadInput(f"--tree {shown(root)}: not a directory")
    pending = [""]  # directories below the root still to list (depth first)
    while pending:
        rel_dir = pending.pop()
        where = os.path.join(root, rel_dir) if rel_dir else root
        try:
            it = os.scandir(where)
        except OSError as e:
            raise BadInput(f"{shown(where)}: cannot list the directory: {e.strerror}") from None
        with it:
            for entry in it:
                name = entry.name
                rel = rel_dir + name
                if name[:1] == ".":
                    listing.skipped.add("hidden", entry.path)
                    continue
                try:
                    if entry.is_symlink():
                        try:
                            st = os.stat(entry.path)  # a link to a file is followed
                        except OSError as e:
                            raise BadInput(f"{shown(entry.path)}: symbolic link to nothing readable: "
                                           f"{e.strerror}") from None
                        if stat.S_ISDIR(st.st_mode):  # never descended: no loops, nothing outside the tree
                            listing.skipped.add("dirlink", entry.path)
                            continue
                    elif entry.is_dir(follow_symlinks=False):
                        pending.append(rel + "/")
                        continue
                    else:
                        st = entry.stat(follow_symlinks=False)
                except OSError as e:
                    raise BadInput(f"{shown(entry.path)}: cannot stat: {e.strerror}") from None
                if not stat.S_ISREG(st.st_mode):
                    listing.skipped.add("special", entry.path)
                    continue
                listing.add(index, rel, st.st_size, (st.st_dev, st.st_ino))


#: A line of ``aws s3 ls``: an object (date, time, size, name) or a prefix.
_S3_OBJECT = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d +(\d+) (.*)")
_S3_PREFIX = re.compile(r" *PRE (.*/)")


def list_remote(url, settings=None):
    """The objects and sub-prefixes directly under the prefix ``url`` (ending
    in ``/``), from the scheme table's LIST command: ``[(name, size or None)]``
    and ``[name/]``, names relative to ``url``.  Reads ``aws s3 ls``'s lines
    (date, time, size, name; ``PRE name/``) and ``gsutil ls``'s (URLs; a
    prefix ends in ``/``)."""
    from ..runtime.child import run
    from ..runtime.schemes import command

    cmd = command("LIST", url, settings)
    tail = settings.tail_bytes if settings is not None else None
    out = run(cmd, url, error=BadInput, tail_bytes=tail,
              accept=lambda child, out: child.returncode == 1 and not out and not child.kept_stderr()[0].strip())
    if not out:
        return [], []  # `aws s3 ls` of an empty (or absent) prefix
    objects, prefixes = [], []
    for line in _dec(out).split("\n"):
        line = line.rstrip("\r")
        if not line.strip():
            continue
        m = _S3_PREFIX.fullmatch(line)
        if m:
            prefixes.append(m.group(1))
            continue
        m = _S3_OBJECT.fullmatch(line)
        if m:
            if m.group(2):  # (a "directory" marker object has the prefix's own name)
                objects.append((m.group(2), int(m.group(1))))
            continue
        if line.startswith(url):
            name = line[len(url):]
            if name.endswith("/"):
                prefixes.append(name)
            elif name:
                objects.append((name, None))
            continue
        raise BadInput(f"{shown(url)}: cannot read the listing line {quote(line)}")
    return objects, prefixes


def _walk_remote(listing, index, settings):
    tree = listing.trees[index]
    pending = [""]
    while pending:
        rel_dir = pending.pop()
        objects, prefixes = list_remote(tree.root + rel_dir, settings)
        for name in prefixes:
            if name[:1] == "." or "/" in name[:-1] or name in ("/", "./", "../"):
                if name[:1] == ".":
                    listing.skipped.add("hidden", tree.root + rel_dir + name)
                    continue
                raise BadInput(f"{shown(tree.root + rel_dir)}: the listing names {quote(name)}")
            pending.append(rel_dir + name)
        for name, size in objects:
            if name[:1] == ".":
                listing.skipped.add("hidden", tree.root + rel_dir + name)
                continue
            listing.add(index, rel_dir + name, size)


def list_trees(trees, rule, max_plan=256 << 20, avoid=(), on_skip=None, settings=None):
    """The sorted :class:`Listing` of ``trees`` (:class:`Tree`) keyed by
    ``rule`` (:func:`key_rule`).  Hidden files and directories, files
    without an extension, files the rule does not match, links to
    directories (never followed: no loops) and special files are left out
    and counted; links to files are followed; a name the sample rule
    refuses, an unreadable file or directory, a broken link, or a file whose
    ``(st_dev, st_ino)`` is in ``avoid`` (the output) is a
    :class:`BadInput`.  ``max_plan``: bytes of entries held at most."""
    listing = Listing(trees, rule, max_plan, set(avoid), Skipped(on_skip))
    for index, tree in enumerate(trees):
        if tree.remote:
            _walk_remote(listing, index, settings)
        else:
            _walk_local(listing, index)
    listing.entries.sort()  # bytewise by key (NUL ends a key: "a" before "a b"), then by field
    return listing


class TreeSample:
    """One sample of a listing: ``key`` and its ``files``, a list of
    ``(field, tree index, size or None, path below the tree root)`` in field order."""

    __slots__ = ("key", "files")

    def __init__(self, key, files):
        self.key = key
        self.files = files


def _groups(entries):
    key = None
    files = []
    for entry in entries:
        k, field, index, size, rel = entry.split(b"\0", 4)
        if k != key:
            if files:
                yield TreeSample(_dec(key), files)
            key, files = k, []
        n = int(size)
        files.append((_dec(field), int(index), None if n < 0 else n, _dec(rel)))
    if files:
        yield TreeSample(_dec(key), files)


def _missing(sample, require):
    have = {f[0] for f in sample.files}
    return [r for r in require if r not in have]


class Checked:
    """What :func:`check_samples` found: ``samples`` and ``files`` kept,
    ``bytes`` (``None``: unknown), ``fields`` (every field seen, sorted),
    ``incomplete`` samples (skipped or kept)."""

    def __init__(self):
        self.samples = self.files = self.incomplete = 0
        self.bytes = 0
        self.fields = set()


def check_samples(listing, require=(), missing="stop", on_missing=None):
    """Check every sample of ``listing`` before anything is written: two
    files that are the same field of one key are a :class:`BadInput` naming
    both; a sample without a field of ``require`` is a :class:`BadInput`
    (``missing="stop"``), left out (``"skip"``) or kept (``"keep"``), with
    ``on_missing(key, missing_fields)`` called for each.  Returns a
    :class:`Checked`."""
    if missing not in ("stop", "skip", "keep"):
        raise UsageError(f"--missing {quote(missing)}: stop, skip or keep")
    done = Checked()
    for sample in _groups(listing.entries):
        last = None
        for field, index, size, rel in sample.files:
            if last is not None and field == last[0]:
                first = listing.trees[last[1]].path(last[3])
                raise BadInput(f"{shown(first)} and {shown(listing.trees[index].path(rel))} are both field "
                               f"{quote(field)} of sample {quote(sample.key)}")
            last = (field, index, size, rel)
        lacking = _missing(sample, require) if require else None
        if lacking:
            done.incomplete += 1
            have = ", ".join(f[0] for f in sample.files)
            if missing == "stop":
                raise BadInput(f"sample {quote(sample.key)}: missing {', '.join(lacking)} (has {have}; "
                               f"--missing skip leaves such samples out, keep writes them)")
            if on_missing is not None:
                on_missing(sample.key, lacking)
            if missing == "skip":
                continue
        done.samples += 1
        done.files += len(sample.files)
        for field, index, size, rel in sample.files:
            done.fields.add(field)
            if size is None or done.bytes is None:
                done.bytes = None
            else:
                done.bytes += size
    done.fields = sorted(done.fields)
    return done


def tree_samples(listing, require=(), missing="stop"):
    """The :class:`TreeSample` of a checked listing, in key order (without
    the incomplete ones when ``missing`` is ``"skip"``)."""
    for sample in _groups(listing.entries):
        if require and missing == "skip" and _missing(sample, require):
            continue
        yield sample


class Part:
    """One file to write: the member ``name``, its ``data`` (``bytes`` or a
    :class:`~tarproc.core.blob.Blob` copied in chunks), ``where`` it comes
    from, and :meth:`done`, called once it is written (checks that a large
    file kept its size, and closes it)."""

    __slots__ = ("name", "data", "where", "_file", "_size")

    def __init__(self, name, data, where, file=None, size=None):
        self.name = name
        self.data = data
        self.where = where
        self._file = file
        self._size = size

    def done(self):
        f, self._file = self._file, None
        if f is None:
            return
        try:
            size = os.fstat(f.fd).st_size
        finally:
            f.close()
        if size != self._size:
            raise BadInput(f"{shown(self.where)}: changed size while being read ({self._size:,} bytes when "
                           f"opened, {size:,} now)")


def _read_local(name, path, avoid):
    """A :class:`Part` of a local file: small ones read whole, larger ones a
    blob over the open file (copied in chunks or sent with ``sendfile``).  Its size is taken when it is
    opened; a file that grows or shrinks while being read is an error."""
    from ..core.blob import Blob, SharedFile

    try:
        # O_NONBLOCK: a FIFO swapped in since the listing never blocks (on a regular file it does nothing)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as e:
        raise BadInput(f"{shown(path)}: cannot read: {e.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise BadInput(f"{shown(path)}: not a regular file any more")
        if (st.st_dev, st.st_ino) in avoid:
            raise BadInput(f"{shown(path)}: input file is output file (it is being written)")
        size = st.st_size
        if size <= READ_WHOLE:
            data = os.read(fd, size + 1)  # (one more: a file that grew, or a /proc file of size 0)
            while len(data) < size:
                piece = os.read(fd, size - len(data) + 1)
                if not piece:
                    break
                data += piece
            if len(data) != size:
                raise BadInput(f"{shown(path)}: changed size while being read ({size:,} bytes when opened)")
            return Part(name, data, path)
        shared = SharedFile(fd, path, False)
        fd = -1  # the blob's now
        return Part(name, Blob(shared, 0, size), path, shared, size)
    except OSError as e:
        raise BadInput(f"{shown(path)}: cannot read: {e.strerror}") from None
    finally:
        if fd >= 0:
            os.close(fd)


def _fetch(name, url, settings, retries, stopped):
    """A :class:`Part` of an object: its bytes read through the scheme table's
    READ command (resumed where it breaks, ``retries`` times), in memory up
    to :data:`SMALL_FILE`, else spooled to an unnamed temporary file;
    ``None`` once ``stopped`` (an event) is set."""
    import tempfile

    from ..core.blob import Blob, SharedFile
    from .open import open_source

    kept = []
    size = 0
    spool = None
    if stopped.is_set():
        return None
    try:
        with open_source(url, decompress=False, retries=retries, settings=settings) as f:
            if stopped.is_set():  # (a stop while its client started, before it was registered)
                return None
            while True:
                piece = f.read(1 << 20)
                if not piece:
                    break
                size += len(piece)
                if spool is None and size > SMALL_FILE:
                    spool = tempfile.TemporaryFile(dir=settings.spool_dir if settings is not None else None)
                    spool.write(b"".join(kept))
                    kept = []
                if spool is not None:
                    spool.write(piece)
                else:
                    kept.append(piece)
        if spool is None:
            return Part(name, b"".join(kept), url)
        spool.flush()
        return Part(name, Blob(SharedFile(os.dup(spool.fileno()), None, False), 0, size), url)
    except OSError as e:
        raise BadInput(f"{shown(url)}: cannot fetch: {e.strerror or e}") from None
    finally:
        if spool is not None:
            spool.close()


def tree_parts(listing, samples, parallel=1, settings=None, retries=None):
    """``(key, [Part, ...])`` of each sample of ``samples`` (from
    :func:`tree_samples`), in order.  Local files are opened as they come;
    objects of bucket trees are fetched ahead by ``parallel`` threads (at
    most ``2 × parallel`` objects held: in memory up to 1 MiB each, else
    in temporary files); a failed fetch raises :class:`BadInput` naming it."""
    from collections import deque

    from .resume import RETRIES

    import threading

    retries = RETRIES if retries is None else retries
    remote = any(t.remote for t in listing.trees)
    stopped = threading.Event()
    pool = None
    if remote:
        from concurrent.futures import ThreadPoolExecutor

        pool = ThreadPoolExecutor(max(1, parallel), thread_name_prefix="tarcreate-fetch")
    ahead = deque()

    def start(sample):
        parts = []
        for field, index, size, rel in sample.files:
            tree = listing.trees[index]
            name = f"{sample.key}.{field}"
            path = tree.path(rel)
            if tree.remote:
                parts.append(pool.submit(_fetch, name, path, settings, retries, stopped))
            else:
                parts.append((name, path))
        return sample.key, parts

    def finish(key, parts):
        out = []
        for p in parts:
            out.append(p.result() if not isinstance(p, tuple) else _read_local(*p, listing.avoid))
        return key, out

    try:
        it = iter(samples)
        if pool is None:
            for sample in it:
                yield finish(*start(sample))
            return
        window = 2 * max(1, parallel)
        queued = 0
        for sample in it:
            ahead.append(start(sample))
            queued += len(ahead[-1][1])
            while ahead and queued >= window:
                key, parts = ahead.popleft()
                queued -= len(parts)
                yield finish(key, parts)
        while ahead:
            key, parts = ahead.popleft()
            yield finish(key, parts)
    finally:
        if pool is not None:
            for _, parts in ahead:
                for p in parts:
                    if not isinstance(p, tuple):
                        p.cancel()
            # a stop (an error, Ctrl-C, the reader gone) does not wait for the fetches under
            # way to end: their clients (input children) are killed, their reads fail at once
            if ahead:
                from ..runtime.child import when_started
                from .open import stop_sources

                # the clients running are killed (their reads end at once); one being
                # started is killed once registered; one not yet started never starts
                stopped.set()
                when_started(stop_sources)
            pool.shutdown(wait=True, cancel_futures=True)
