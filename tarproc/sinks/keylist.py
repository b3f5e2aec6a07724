"""A key list being written (``tarproc --failed-keys``), published under its
name only when committed (:mod:`tarproc.sinks.output`); its lines in the
format of :mod:`tarproc.core.keylines`."""

from ..core.keylines import escape_key


class KeyList:
    """A key list being written (``tarproc --failed-keys``): :meth:`add` a
    key per line as they come (nothing is held in memory), then
    :meth:`commit` publishes it under its name (a path, s3:// or gs://),
    or :meth:`abort` leaves no file under that name.  Written under a
    temporary name (see :mod:`tarproc.sinks.output`) until then."""

    def __init__(self, url, settings=None):
        from .output import open_sink

        self.url = url
        self.count = 0
        self.committed = False
        self.sink = open_sink(url, compression=None, defer=False, settings=settings)

    def add(self, key):
        self.sink.write(escape_key(str(key)).encode("utf-8", "surrogateescape") + b"\n")
        self.count += 1

    def commit(self):
        self.sink.close()
        self.committed = True

    def abort(self):
        """Leave no list under its name (no effect once committed)."""
        if not self.committed:
            self.sink.abort()
