"""One warning when a field selection (``-f``) finds nothing: shared by every
command with ``-f``."""


class FieldCheck:
    """Say so (one warning line) when a field selection (``-f``) finds
    nothing: ``before`` and ``after`` are stages put around the selecting
    stage; when every sample that went in was dropped, ``after`` warns at
    the end of the input, naming the fields the samples do have.  Commands
    that keep every sample (tables, previews) call :meth:`missing` with the
    columns that never had a value."""

    LIMIT = 1000  # samples whose field names are remembered for the message

    def __init__(self, rep, spec):
        self.rep = rep
        self.spec = spec
        self.n_in = self.n_out = 0
        self.names = set()

    def before(self, samples):
        for sample in samples:
            self.n_in += 1
            if self.n_in <= self.LIMIT and len(self.names) < 100:
                self.names.update(k for k in sample if not (k[:2] == "__" and k[-2:] == "__"))
            yield sample

    def after(self, samples):
        for sample in samples:
            self.n_out += 1
            yield sample
        if self.n_in and not self.n_out:
            self.rep.warn(f"-f {self.spec!r} matched none of the {self.n_in} samples read ({self._have()})")

    def missing(self, names):
        """Warn about the columns ``names`` that no sample had."""
        if self.n_in and names:
            which = ", ".join(repr(n) for n in names)
            self.rep.warn(f"-f: no sample has {which} ({self.n_in} sample{'s' * (self.n_in != 1)} read; "
                         f"{self._have()})")

    def _have(self):
        names = sorted(self.names)
        if not names:
            return "they have no fields"
        more = ", …" if len(names) > 20 else ""
        return "their fields: " + ", ".join(names[:20]) + more
