"""Guards of every command: signals that must run the cleanup (SIGTERM,
SIGHUP), an output that names one of the inputs, and standard descriptors
closed at start."""

import os
import signal


def refuse_overwriting_inputs(outputs, urls, why):
    """``urls``, checked as they are used: a local input that IS one of the
    local ``outputs`` (the same directory entry, which the commit would
    replace) is a usage error, before anything is written.  For commands
    whose output is not an edited copy of the input (text to tar, tar to an
    index, a spec to a tar): ``-o`` naming the input is a typo that would
    destroy it.  ``why`` ends the message."""
    from ..errors import UsageError
    from ..sources.open import scheme_of

    targets = set()
    for out in outputs:
        if out and scheme_of(out) == "file" and os.path.isfile(out) and not os.path.islink(out):
            targets.add(os.path.realpath(out))  # a symbolic link is replaced, never its target
    if not targets:
        return urls

    def check(url):
        if scheme_of(url) == "file" and os.path.realpath(url) in targets:
            raise UsageError(f"{url}: is also the output; writing it would destroy the input ({why})")
        return url

    if isinstance(urls, list):
        return [check(url) for url in urls]
    return map(check, urls)


def refuse_shared_outputs(named):
    """``named``: ``[(what, path), ...]``, the files one run writes (the
    output, a key list, a manifest, an index).  Two that are the same local
    file however they are spelled (``./x``, ``d/../x``, a directory through a
    symbolic link) are a usage error before anything is written: the commit
    of one would replace the other."""
    from ..core.limits import shown
    from ..errors import UsageError
    from ..sources.open import scheme_of

    seen = {}
    for what, path in named:
        if not path or path == "-" or scheme_of(path) != "file" or "{" in path or "%" in path:
            continue
        real = os.path.join(os.path.realpath(os.path.dirname(path) or "."), os.path.basename(path))
        if real in seen:
            first, given = seen[real]
            raise UsageError(f"{first} {shown(given)} and {what} {shown(path)} are the same file: give each its own")
        seen[real] = (what, path)


def refuse_outputs_among_shards(named, pattern, splits=()):
    """``named``: ``[(what, path), ...]``, the other files a run of shard
    ``pattern`` writes (a manifest, an index): one that is also a shard
    name (``--manifest s-0.tar`` with ``-o 's-%d.tar'``) is a usage error
    before anything is written.  A shard's name holds its number, so each
    run of digits in ``path`` is tried as one (and each split's name for
    ``{split}``)."""
    import re

    from ..core.limits import shown
    from ..errors import UsageError
    from ..sinks.split import shard_name
    from ..sources.open import scheme_of

    def real(path):
        return os.path.join(os.path.realpath(os.path.dirname(path) or "."), os.path.basename(path))

    for what, path in named:
        if not path or path == "-" or scheme_of(path) != "file":
            continue
        for digits in set(re.findall(r"\d+", path)):
            for split in (splits or [None]):
                filled = pattern if split is None else pattern.replace("{split}", split)
                if real(shard_name(filled, int(digits))) == real(path):
                    raise UsageError(f"{what} {shown(path)} is also the name of shard {int(digits)}: give it "
                                     f"another name")


def refuse_one_stream_twice(urls, why):
    """Inputs read at the same time (a join's A and B) must not be one
    stream: ``-`` and ``/dev/stdin`` on a pipe, or a FIFO named twice,
    would each get part of the bytes (a hang, or a misleading error).  Two
    names of the same pipe, FIFO or socket are a usage error; regular files
    (and ``-`` redirected from one) and devices may be read twice.
    Brace patterns and remote URLs are not looked at."""
    import stat

    from ..core.limits import shown
    from ..errors import UsageError
    from ..sources.open import scheme_of

    seen = {}
    for url in urls:
        scheme = scheme_of(url)
        if scheme not in ("-", "file") or "{" in url:
            continue
        try:
            st = os.fstat(0) if scheme == "-" else os.stat(url)
        except OSError:
            continue  # (opening it says what is wrong)
        if not (stat.S_ISFIFO(st.st_mode) or stat.S_ISSOCK(st.st_mode)):
            continue  # (a file, /dev/null: each open reads it from the start)
        ident = (st.st_dev, st.st_ino)
        if ident in seen:
            raise UsageError(f"{shown(seen[ident])} and {shown(url)} are the same stream, read once: "
                             f"give each input its own file or pipe ({why})")
        seen[ident] = url


def refuse_reading_stdout(urls):
    """``urls``, checked as they are used: a local input that is the file
    standard output writes to (``cmd in.tar > in.tar``, ``>> in.tar``) is
    refused as GNU cat does ("input file is output file"), exit 2, before it
    is read (the shell has already emptied it, or the command would read its
    own output forever).  Standard output is looked at when this is called,
    so a command that later points fd 1 elsewhere (tarproc) is still
    guarded.  Every command gets its inputs through
    :func:`~tarproc.cli.base.open_inputs`, which applies this."""
    import stat

    from ..errors import BadInput
    from ..sources.open import scheme_of

    try:
        out = os.fstat(1)
    except OSError:
        return urls
    if not stat.S_ISREG(out.st_mode):
        return urls
    target = (out.st_dev, out.st_ino)

    def check(url):
        scheme = scheme_of(url)
        if scheme in ("file", "-"):
            try:
                st = os.stat(url) if scheme == "file" else os.fstat(0)  # `cmd < in.tar >> in.tar` too
            except OSError:
                return url  # opening it says what is wrong
            if stat.S_ISREG(st.st_mode) and (st.st_dev, st.st_ino) == target:
                raise BadInput(f"{'stdin' if url == '-' else url}: input file is output file (standard output)")
        return url

    if isinstance(urls, list):
        return [check(url) for url in urls]
    return map(check, urls)


def hold_closed_std_fds():
    """A closed stdin, stdout or stderr gets /dev/null opened the wrong way
    round (writes to fd 1, reads from fd 0 fail with EBADF, as when closed),
    so that no file this command opens becomes fd 0/1/2: with stdout closed,
    the first input or temporary file would otherwise be fd 1 and receive the
    tar written to "stdout"."""
    for fd, flags in ((0, os.O_WRONLY), (1, os.O_RDONLY), (2, os.O_WRONLY)):
        try:
            os.fstat(fd)
        except OSError:
            try:
                new = os.open(os.devnull, flags)
                if new != fd:
                    os.dup2(new, fd)
                    os.close(new)
            except OSError:
                pass


class Terminated(BaseException):
    """Raised in the main thread on SIGTERM (or SIGHUP: the terminal or the
    ssh connection went away) so cleanup code runs; exit 128 + the signal."""

    def __init__(self, signum=signal.SIGTERM):
        super().__init__(signum)
        self.code = 128 + int(signum)


def on_sigterm(signum, frame):
    """The handler of SIGTERM and SIGHUP: raise :class:`Terminated`, so
    that outputs are discarded and children ended on the way out."""
    # a second signal (a supervisor repeating itself) must not cut the
    # cleanup short; SIGKILL remains for a cleanup that cannot finish
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    from ..runtime.child import when_started

    def stop():
        raise Terminated(signum)

    # raised now, or, in the middle of starting a child, once it is registered
    # (so the way out ends it)
    when_started(stop, this_thread=True)
