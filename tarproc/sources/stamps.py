"""What tells a version of a shard from another cheaply: its size, and its
modification time (local files), ETag or Last-Modified (HTTP), ETag (S3).

``tarindex`` records a shard's stamp in its index entry (``"filesize"``,
``"mtime_ns"``, ``"etag"``, ``"last_modified"``: those the store gives);
:class:`~tarproc.sources.indexed.IndexedDataset` compares what each read
sees with it (:func:`check_stamp`), so a shard replaced since indexing is
one clear error naming it, not a wrong sample.  ``gs://`` ranged reads
(``gsutil cat -r``) show no metadata: only the key check guards them.

    stamp_of("data/a.tar")   # {"filesize": 10240, "mtime_ns": 1764...}
"""

import json
import os

from ..core.limits import is_decimal
from ..errors import BadInput
from .open import scheme_of

#: The fields of an index entry a stamp may set.
FIELDS = ("filesize", "mtime_ns", "etag", "last_modified")
#: What ``verify`` may be: the whole stamp, the size only, or nothing.
VERIFY = ("stamp", "size", "none")


def local_stamp(st):
    """The stamp of a local file from its ``os.stat`` result."""
    return {"filesize": st.st_size, "mtime_ns": st.st_mtime_ns}


def parse_headers(text):
    """``(status, {lower-case name: value})`` of the last response in
    ``text`` (what ``curl -D -`` or ``curl -I`` prints, redirects first)."""
    status, headers = None, {}
    for line in text.splitlines():
        parts = line.split()
        if parts and parts[0].startswith("HTTP/") and len(parts) > 1:
            status = int(parts[1]) if is_decimal(parts[1]) else -1
            headers = {}
        elif ":" in line and status is not None:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    return status, headers


def http_stamp(url):
    """The stamp of an HTTP(S) resource from a HEAD request (curl); ``{}``
    when the server answers HEAD with anything but 200."""
    rc, out = _capture(["curl", "-g", "-sS", "-I", "-L", "--max-redirs", "10", "--max-time", "60", "--", url], url)
    status, headers = parse_headers(out.decode("latin-1"))
    if rc != 0 or status != 200:
        return {}
    return stamp_of_headers(headers)


def stamp_of_headers(headers):
    """The stamp an HTTP response's headers give (a ranged answer's size is
    the total of its Content-Range)."""
    out = {}
    total = headers.get("content-range", "").rpartition("/")[2]
    length = total if is_decimal(total) else headers.get("content-length", "") if "content-range" not in headers else ""
    if is_decimal(length):
        out["filesize"] = int(length)
    for name, field in (("etag", "etag"), ("last-modified", "last_modified")):
        if headers.get(name):
            out[field] = headers[name][:1024]
    return out


def s3_stamp(url):
    """The stamp of an ``s3://`` object (``aws s3api head-object``)."""
    bucket, _, key = url[len("s3://"):].partition("/")
    if not bucket or not key:
        raise BadInput(f"{url}: not an s3://BUCKET/KEY URL")
    cmd = ["aws", "s3api", "head-object", "--bucket", bucket, "--key", key]
    endpoint = os.environ.get("AWS_ENDPOINT_URL")
    if endpoint:
        cmd += ["--endpoint-url", endpoint]
    rc, out = _capture(cmd, url)
    return stamp_of_s3(out.decode("utf-8", "replace")) if rc == 0 else {}


def _capture(cmd, url):
    """``(exit status, stdout)`` of ``cmd`` (its stderr dropped: no stamp is no error)."""
    from ..runtime.child import Child

    try:
        child = Child(cmd, url, stderr=None)
    except OSError as e:
        raise BadInput(Child.start_error(url, cmd[0], e)) from None
    try:
        out = child.stdout.read(1 << 20)  # bounded: a longer answer is no stamp
        if child.stdout.read(1):
            child.kill()
    finally:
        child.stdout.close()
        if child.poll() is None:
            child.kill()
    return child.wait(), out


def stamp_of_s3(meta, ranged=False):
    """The stamp in the JSON ``aws s3api`` prints for an object (ETag; the
    size from the total of a ContentRange, or, unless the answer is to a
    ``ranged`` get, from ContentLength)."""
    try:
        meta = json.loads(meta or "{}")
    except ValueError:
        return {}
    out = {}
    total = str(meta.get("ContentRange", "")).rpartition("/")[2]
    if is_decimal(total):
        out["filesize"] = int(total)
    elif isinstance(meta.get("ContentLength"), int) and "ContentRange" not in meta and not ranged:
        out["filesize"] = meta["ContentLength"]
    if isinstance(meta.get("ETag"), str):
        out["etag"] = meta["ETag"][:1024]
    return out


def stamp_of(url, settings=None):
    """The stamp of the shard at ``url`` (``{}`` where the store gives none,
    or where ``settings`` replaces the scheme's reading command)."""
    override = (lambda scheme: settings is not None and settings.command("READ", scheme))
    scheme = scheme_of(url)
    if scheme == "file":
        import stat

        try:
            st = os.stat(url)
        except OSError as e:
            raise BadInput(f"{url}: cannot open: {e.strerror}") from None
        return local_stamp(st) if stat.S_ISREG(st.st_mode) else {}  # a FIFO, /dev/stdin: nothing to compare
    if scheme in ("http", "https") and not override(scheme):
        return http_stamp(url)
    if scheme == "s3" and not override(scheme):
        return s3_stamp(url)
    return {}


def check_stamp(url, entry, seen, verify="stamp"):
    """Raise one :class:`BadInput` naming ``url`` when the stamp ``seen``
    (a dict of :data:`FIELDS`) differs from the index ``entry``'s.  Only the
    fields both have are compared; ``verify="size"`` compares the size only."""
    if verify == "none":
        return
    fields = FIELDS if verify == "stamp" else ("filesize",)
    for field in fields:
        then, now = entry.get(field), seen.get(field)
        if then is None or now is None or then == now:
            continue
        if field == "filesize":
            what = f"the shard has {now} bytes, {then} when it was indexed"
        elif field == "mtime_ns":
            what = (f"the shard was modified since it was indexed (mtime {_when(now)}, indexed at {_when(then)}; "
                    f"a copy that did not keep times: IndexedDataset(..., verify=\"size\"))")
        else:
            what = f"its {field.replace('_', '-')} is {now!r}, {then!r} when it was indexed"
        from ..core.limits import shorten

        raise BadInput(f"{shorten(url)}: {shorten(what, 400)}: the shard changed since (index it again)")


def _when(ns):
    import time

    try:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ns / 1e9)) + f".{ns % 10**9:09d} UTC"
    except (OverflowError, ValueError, OSError, TypeError):
        return repr(ns)
