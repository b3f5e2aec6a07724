"""The buffer shuffle: items mixed through a buffer of a bounded number of
them (memory stays bounded however many come).  One function for the
``shuffle`` stage (:func:`tarproc.stages.basic.shuffle`), tarpcat's mixed
samples and a long list of URLs (:mod:`tarproc.sources`)."""


def buffer_shuffle(items, bufsize, rng):
    """Yield ``items`` in a random order drawn from ``rng`` (a
    ``random.Random``) through a buffer of ``bufsize`` (>= 1) of them."""
    buf = []
    for item in items:
        if len(buf) < bufsize:
            buf.append(item)
            continue
        i = rng.randrange(len(buf))
        out, buf[i] = buf[i], item
        yield out
    rng.shuffle(buf)
    yield from buf
