"""Reading many byte ranges at once: coalescing nearby ranges, HTTP range
requests through a curl that replaces the in-process client, and the Range
probe of ``tarindex``.

:func:`coalesce` merges ranges of one URL whose gap is at most ``gap``
bytes into runs (one read each, up to ``max_run`` bytes); duplicates merge
into one.  :func:`http_ranges` reads ranges with one curl process (the
command of ``TARPROC_RANGES_HTTP(S)``, which replaces the in-process client
of :mod:`tarproc.sources.keepalive`) per share of them: the requests of a
share go one after another over one kept-alive connection, the shares at
once; each answer must be a 206 with exactly the range asked for.
:func:`probe_servers` asks each server once for one byte.

    runs = coalesce([("a.tar", 0, 1024, "x"), ("a.tar", 1536, 2048, "y")], gap=4096)
    runs[0].start, runs[0].stop, runs[0].tags   # 0, 2048, ["x", "y"]
"""

import json

from ..errors import BadInput


class Run:
    """Bytes ``start`` to ``stop`` of ``url``, covering the ranges tagged ``tags``."""

    __slots__ = ("url", "start", "stop", "tags")

    def __init__(self, url, start, stop, tag):
        self.url, self.start, self.stop, self.tags = url, start, stop, [tag]

    def __repr__(self):
        return f"Run({self.url!r}, {self.start}, {self.stop}, {self.tags!r})"


def coalesce(ranges, gap=64 << 10, max_run=16 << 20):
    """Runs covering ``ranges`` (``(url, start, stop, tag)``): ranges of one
    URL less than ``gap`` bytes apart share a run while it stays at most
    ``max_run`` bytes long (a single longer range is a run of its own)."""
    runs = []
    last = None
    for url, start, stop, tag in sorted(ranges, key=lambda r: (r[0], r[1], r[2])):
        if last is not None and url == last.url and start <= last.stop + gap \
                and max(stop, last.stop) - last.start <= max_run:
            last.stop = max(stop, last.stop)
            last.tags.append(tag)
        else:
            last = Run(url, start, stop, tag)
            runs.append(last)
    return runs


# after each transfer, on stderr, a line of its own: the transfer's variables and its last response's
# headers as JSON (a newline in a value is escaped, so a line starting with the mark is ours)
_MARK = "\n@tarproc-range@"
_WRITE_OUT = "%{stderr}@tarproc-range@%{json}%{header_json}\\n"


def _quote(text):
    """A curl config-file value: quoted, with its escapes."""
    out = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r") \
        .replace("\t", "\\t").replace("\v", "\\v")
    return f'"{out}"'


def http_ranges(requests, check=None, command=("curl", "-K", "-")):
    """The bytes of each ``(url, start, stop)`` in ``requests`` (a list), read
    by one curl process over kept-alive connections.  ``check(url, headers)``
    is called with each answer's headers (a dict, lower-case names).
    ``command``: the curl that reads the requests as a config file on its
    stdin (the scheme table's ``RANGES``: an argument vector, or a shell
    command that replaces it).
    Raises :class:`BadInput` naming the request (``e.request``, its position)."""
    import threading

    from ..runtime.child import Child

    config = []
    for url, start, stop in requests:
        if "\0" in url:
            raise BadInput(f"{url!r}: a URL with a NUL byte")
        config.append(f"url = {_quote(url)}\nrange = \"{start}-{stop - 1}\"\nwrite-out = \"{_WRITE_OUT}\"\n"
                      f"silent\ngloboff\nlocation\nmax-redirs = 10\nmax-filesize = {stop - start}\nproto-redir = \"=http,https\"\n")
    cfg = "next\n".join(config).encode("utf-8", "surrogateescape")
    expect = sum(stop - start for _, start, stop in requests)
    try:
        # (its stderr carries the --write-out records: read below, bounded)
        proc = Child(command if isinstance(command, str) else list(command), requests[0][0] if requests else "",
                     "curl", stdin="pipe", stderr="pipe")
    except OSError as e:
        raise _failed(requests, 0, f"cannot start curl: {e.strerror}") from None
    err = []

    def feed_and_drain():
        try:
            proc.stdin.write(cfg)
            proc.stdin.close()
        except OSError:
            pass
        got = 0
        while True:
            piece = proc.stderr.read(65536)
            if not piece:
                break
            if got < (1 << 22) + 8192 * len(requests):  # bounded: headers are bounded by the servers we ask
                err.append(piece)
                got += len(piece)

    t = threading.Thread(target=feed_and_drain, daemon=True)
    t.start()
    try:
        body = proc.stdout.read(expect + 1)
        if len(body) > expect:  # more than every range asked for: a server answered with more
            proc.kill()
        proc.stdout.close()
        proc.wait()
        t.join()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    records = _records(b"".join(err).decode("utf-8", "replace"))
    out = []
    pos = 0
    for n, (url, start, stop) in enumerate(requests):
        if n >= len(records):
            if len(body) > expect:
                raise _failed(requests, n, "the server sent more bytes than the ranges asked for: it ignored a "
                                           "range request; use a server that honours Range, or a local copy")
            raise _failed(requests, n, f"curl ended (exit status {proc.returncode}) before this range was read")
        info, headers = records[n]
        code, size = info.get("http_code"), info.get("size_download")
        if info.get("exitcode") == 63 or code == 200:
            raise _failed(requests, n, "the server ignored the range request (status 200, the whole shard): it "
                                       "cannot serve one sample; use a server that honours Range, or a local copy")
        if info.get("exitcode"):
            raise _failed(requests, n, f"curl failed with exit status {info['exitcode']}: "
                                       f"{str(info.get('errormsg') or '')[:300]}")
        if code != 206:
            raise _failed(requests, n, f"range request failed with HTTP status {code}")
        unit, _, rng = headers.get("content-range", "").partition(" ")
        span = rng.partition("/")[0]
        if unit != "bytes" or span != f"{start}-{stop - 1}" or size != stop - start:
            raise _failed(requests, n, f"the server answered bytes {span or '?'} to a request for "
                                       f"{start}-{stop - 1}: refusing a range it did not honour")
        if check is not None:
            try:
                check(url, headers)
            except BadInput as e:
                e.request = n
                raise
        out.append(body[pos : pos + size])
        pos += size
    return out


def _failed(requests, n, problem):
    url, start, stop = requests[n]
    e = BadInput(f"{url}: bytes {start}-{stop - 1}: {problem}")
    e.request = n
    return e


def _records(text):
    """The ``(variables, headers)`` of each transfer, in order."""
    dec = json.JSONDecoder()
    out = []
    for part in ("\n" + text).split(_MARK)[1:]:
        try:
            info, end = dec.raw_decode(part)
            headers, _ = dec.raw_decode(part, end)
        except ValueError:
            info, headers = {"exitcode": -1, "errormsg": "unreadable curl report"}, {}
        if not isinstance(info, dict) or not isinstance(headers, dict):
            info, headers = {"exitcode": -1, "errormsg": "unreadable curl report"}, {}
        flat = {}
        for name, values in headers.items():
            if isinstance(values, list) and values and isinstance(values[-1], str):
                flat[str(name).lower()] = values[-1]
        out.append((info, flat))
    return out


def share(items, parts):
    """``items`` cut into at most ``parts`` consecutive lists of near-equal length."""
    parts = max(1, min(parts, len(items)))
    size, extra = divmod(len(items), parts)
    out, pos = [], 0
    for p in range(parts):
        n = size + (p < extra)
        out.append(items[pos : pos + n])
        pos += n
    return [o for o in out if o]


def probe_servers(urls, settings=None):
    """One ranged request (the first byte) to the server of the first
    ``http(s)://`` URL of each server in ``urls`` (whose ranged reads are not
    replaced by a ``TARPROC_RANGE_`` command): a server that ignores Range is
    a :class:`BadInput` saying what to use instead, found when the index is
    made rather than at the first sample."""
    from ..runtime.schemes import override, scheme_of
    from .keepalive import probe

    seen = set()
    for url in urls:
        scheme = scheme_of(url)
        if scheme not in ("http", "https") or override("RANGE", scheme, settings) is not None:
            continue
        origin = url.partition("://")[2].partition("/")[0]
        if (scheme, origin) not in seen:
            seen.add((scheme, origin))
            probe(url, settings.stall_timeout if settings is not None else 60.0)
