"""Counts of what a command did."""

class Stats:
    """Counts of what a command did: samples read, written, skipped, failed,
    members skipped by reason, inputs tried, and inputs that ended without
    their end-of-archive marker (``truncated``)."""

    __slots__ = ("read", "written", "skipped", "failed", "members_skipped", "reasons", "inputs", "truncated")

    def __init__(self):
        self.read = self.written = self.skipped = self.failed = 0
        self.members_skipped = 0
        self.reasons = {}
        self.inputs = 0
        self.truncated = 0

    def skip_member(self, reason):
        self.members_skipped += 1
        self.reasons[reason] = self.reasons.get(reason, 0) + 1

    def summary(self):
        text = f"samples read {self.read}, written {self.written}, skipped {self.skipped}, failed {self.failed}"
        if self.members_skipped:
            why = ", ".join(f"{n} {reason}" for reason, n in sorted(self.reasons.items()))
            text += f"; members skipped {self.members_skipped} ({why})"
        return text

    def as_dict(self):
        return {
            "read": self.read, "written": self.written, "skipped": self.skipped,
            "failed": self.failed, "members_skipped": self.members_skipped,
            "reasons": dict(self.reasons),
        }
