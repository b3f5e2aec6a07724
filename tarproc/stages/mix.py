"""Mixing sample sources by weight (``tarmix``).

A mix spec (the original ``tarmix``'s, in JSON or simple YAML)::

    {"shuffle": 1000,
     "sources": [{"shards": "a-{000..999}.tar", "weight": 1, "probability": 0.9, "shuffle": 10000},
                 {"shards": "b-{000..100}.tar", "weight": 1.7, "nstreams": 10, "nrepeats": 5}]}

Each output sample comes from a source picked at random with probability
proportional to its ``weight``; it is kept with the source's
``probability``.  The mix ends when a picked source has no samples left (so
``nrepeats`` is how a small source is kept from ending the mix early).
Within a source, ``nstreams`` shards are read at once and each sample comes
from one of them at random; ``shuffle`` shuffles the source's shard list and
its samples through a buffer of that size; ``allow_missing`` skips shards
that cannot be opened (with a warning).  A top-level ``shuffle`` shuffles the
mixed stream.  Every random choice comes from one ``random.Random(seed)``, so
a seed gives the same output for the same inputs.  Memory: the shuffle
buffers and one sample per open stream.
"""

import json

from ..errors import BadInput, BadSample, UsageError

SOURCE_KEYS = {"shards": str, "weight": (int, float), "probability": (int, float), "nstreams": int,
               "nrepeats": int, "shuffle": int, "allow_missing": bool}
TOP_KEYS = {"sources": list, "shuffle": int}
UNSUPPORTED = ("convert", "rename")


def load_spec(text, name="spec", origin=None):
    """A mix spec from its text: JSON, or the block YAML of the original's
    examples (mappings, lists of mappings, plain or quoted scalars,
    comments).  Checked: unknown keys, wrong types and bad numbers are a
    :class:`UsageError` naming them.  ``origin``: the URL the spec was read
    from; a spec read from a remote source may not name ``pipe:`` shards
    (:func:`~tarproc.sources.shardlist.url_from_data`)."""
    from ..sources.shardlist import url_from_data

    text = text.lstrip("\ufeff")
    try:
        spec = json.loads(text)
    except ValueError:
        spec = parse_simple_yaml(text, name)
    spec = check_spec(spec, name)
    for src in spec["sources"]:
        url_from_data(src["shards"], origin, "mix spec")
    return spec


def check_spec(spec, name="spec"):
    if not isinstance(spec, dict):
        raise UsageError(f"{name}: a mix spec is a mapping with 'sources'")
    _check_keys(spec, TOP_KEYS, name)
    sources = spec.get("sources")
    if not sources:
        raise UsageError(f"{name}: no sources")
    out = []
    for i, src in enumerate(sources):
        where = f"{name}: sources[{i}]"
        if not isinstance(src, dict):
            raise UsageError(f"{where}: a source is a mapping with 'shards'")
        for k in UNSUPPORTED:
            if k in src:
                raise UsageError(f"{where}: {k!r} is not supported (run tarcat -f or tarproc on the mix instead)")
        _check_keys(src, SOURCE_KEYS, where)
        if "shards" not in src:
            raise UsageError(f"{where}: no 'shards'")
        s = {"shards": src["shards"], "weight": float(src.get("weight", 1.0)),
             "probability": float(src.get("probability", 1.0)), "nstreams": src.get("nstreams", 1),
             "nrepeats": src.get("nrepeats", 1), "shuffle": src.get("shuffle", 0),
             "allow_missing": src.get("allow_missing", False)}
        if not s["weight"] > 0 or s["weight"] == float("inf"):
            raise UsageError(f"{where}: weight must be a positive number")
        if not 0.0 < s["probability"] <= 1.0:
            raise UsageError(f"{where}: probability must be in (0, 1]")
        if not 1 <= s["nstreams"] <= 1024 or not 1 <= s["nrepeats"] <= 10**9 or not 0 <= s["shuffle"] <= 10**7:
            raise UsageError(f"{where}: nstreams must be 1..1024, nrepeats >= 1, shuffle 0..10000000")
        out.append(s)
    shuffle = spec.get("shuffle", 0)
    if not 0 <= shuffle <= 10**7:
        raise UsageError(f"{name}: shuffle must be 0..10000000")
    return {"shuffle": shuffle, "sources": out}


def _check_keys(d, allowed, where):
    for k, v in d.items():
        if k not in allowed:
            raise UsageError(f"{where}: unknown key {k!r} (known: {', '.join(sorted(allowed))})")
        types = allowed[k]
        if isinstance(v, bool) and types is not bool:
            raise UsageError(f"{where}: {k!r} must be a number, not {v!r}")
        if not isinstance(v, types):
            raise UsageError(f"{where}: {k!r} has the wrong type ({type(v).__name__}: {v!r})")


# -- a small YAML subset, enough for mix specs --------------------------------

def parse_simple_yaml(text, name="spec"):
    """Block mappings and sequences by indentation, ``- key: value`` items,
    scalars (quoted strings, integers, floats, true/false, null, plain
    text), ``#`` comments.  Anything else (anchors, flow collections,
    multi-line strings, tags) is a :class:`UsageError` naming the line."""
    lines = []
    for no, raw in enumerate(text.splitlines(), 1):
        line = _strip_comment(raw, name, no).rstrip()
        if not line.strip() or line.strip() in ("---", "..."):
            continue
        if "\t" in line[: len(line) - len(line.lstrip())]:
            raise UsageError(f"{name}: line {no}: tabs in indentation")
        lines.append((len(line) - len(line.lstrip(" ")), line.strip(), no))
    if not lines:
        raise UsageError(f"{name}: empty spec")
    value, i = _block(lines, 0, lines[0][0], name)
    if i != len(lines):
        raise UsageError(f"{name}: line {lines[i][2]}: unexpected indentation")
    return value


def _strip_comment(line, name, no):
    quote = None
    for i, c in enumerate(line):
        if quote:
            if c == quote and not (quote == '"' and i and line[i - 1] == "\\"):
                quote = None
        elif c in "'\"" and (i == 0 or line[i - 1] in " :-[{,"):
            quote = c
        elif c == "#" and (i == 0 or line[i - 1] in " \t"):
            return line[:i]
    return line


def _block(lines, i, indent, name):
    if lines[i][1].startswith("- ") or lines[i][1] == "-":
        out = []
        while i < len(lines) and lines[i][0] == indent and (lines[i][1].startswith("- ") or lines[i][1] == "-"):
            _, text, no = lines[i]
            rest = text[1:].lstrip()
            if not rest:
                if i + 1 < len(lines) and lines[i + 1][0] > indent:
                    value, i = _block(lines, i + 1, lines[i + 1][0], name)
                else:
                    value, i = None, i + 1
            elif _is_pair(rest):
                # '- key: value' starts a mapping whose further keys are indented to 'key'
                sub_indent = indent + (len(text) - len(rest))
                sub = [(sub_indent, rest, no)]
                j = i + 1
                while j < len(lines) and lines[j][0] > indent:
                    sub.append(lines[j])
                    j += 1
                value, k = _block(sub, 0, sub_indent, name)
                if k != len(sub):
                    raise UsageError(f"{name}: line {sub[k][2]}: unexpected indentation")
                i = j
            else:
                value, i = _scalar(rest, name, no), i + 1
            out.append(value)
        return out, i
    out = {}
    while i < len(lines) and lines[i][0] == indent:
        _, text, no = lines[i]
        if text.startswith("- "):
            raise UsageError(f"{name}: line {no}: a list item where a key was expected")
        if not _is_pair(text):
            raise UsageError(f"{name}: line {no}: expected 'key: value'")
        key, _, rest = text.partition(":")
        key = _scalar(key.strip(), name, no)
        if not isinstance(key, str):
            key = str(key)
        if key in out:
            raise UsageError(f"{name}: line {no}: key {key!r} given twice")
        rest = rest.strip()
        if rest:
            out[key], i = _scalar(rest, name, no), i + 1
        elif i + 1 < len(lines) and (lines[i + 1][0] > indent or
                                     (lines[i + 1][0] == indent and lines[i + 1][1].startswith("-"))):
            out[key], i = _block(lines, i + 1, lines[i + 1][0], name)
        else:
            out[key], i = None, i + 1
    return out, i


def _is_pair(text):
    if text[:1] in "'\"":
        q = text[0]
        end = text.find(q, 1)
        return end > 0 and text[end + 1 :].lstrip().startswith(":")
    key, sep, rest = text.partition(":")
    return bool(sep) and (rest == "" or rest.startswith(" ")) and bool(key.strip())


def _scalar(text, name, no):
    import re

    if text[:1] in "&*!|>[{%@`":
        raise UsageError(f"{name}: line {no}: unsupported YAML ({text[:20]!r}); write the spec as JSON")
    if text[:1] == '"':
        try:
            value, end = json.JSONDecoder().raw_decode(text)
        except ValueError:
            raise UsageError(f"{name}: line {no}: bad quoted string") from None
        if text[end:].strip():
            raise UsageError(f"{name}: line {no}: text after a quoted string")
        return value
    if text[:1] == "'":
        if len(text) < 2 or not text.endswith("'"):
            raise UsageError(f"{name}: line {no}: bad quoted string")
        return text[1:-1].replace("''", "'")
    low = text.lower()
    if low in ("true", "yes", "on"):
        return True
    if low in ("false", "no", "off"):
        return False
    if low in ("null", "~"):
        return None
    if re.fullmatch(r"[-+]?[0-9]+", text):
        return int(text)
    if re.fullmatch(r"[-+]?([0-9]+\.[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?|[-+]?[0-9]+[eE][-+]?[0-9]+", text):
        return float(text)
    return text


# -- mixing ---------------------------------------------------------------------

def mix_sources(spec, seed=None, stats=None, strict=False, warn=None, shuffle=None, on_bad_shard=None,
                settings=None):
    """The samples of a checked mix spec (see :func:`load_spec`), mixed.
    ``shuffle`` overrides the spec's top-level shuffle buffer size.
    ``on_bad_shard``: as for :func:`~tarproc.iter_samples`, for every shard
    of every source.  ``settings``: the bound on the shard lists
    (``max_urls``, all sources together) and the reading settings of
    :func:`~tarproc.iter_samples`."""
    import random

    from .basic import shuffle as shuffle_stage

    from ..core import limits

    rng = random.Random(seed)
    budget = [limits.MAX_URLS if settings is None else settings.max_urls]  # the shard lists of all sources together (each is held as a list)
    sources = [_source(s, rng, stats, strict, warn, budget, on_bad_shard, settings) for s in spec["sources"]]
    top = max(s["weight"] for s in spec["sources"])
    weights = [s["weight"] / top for s in spec["sources"]]  # a sum of weights near the float maximum is inf
    probs = [s["probability"] for s in spec["sources"]]
    total = sum(weights)
    cum = []
    acc = 0.0
    for w in weights:
        acc += w / total
        cum.append(acc)

    def mixed():
        import bisect

        try:
            while True:
                i = min(bisect.bisect_left(cum, rng.random()), len(cum) - 1)
                sample = next(sources[i], None)
                if sample is None:
                    return
                if probs[i] < 1.0 and rng.random() >= probs[i]:
                    continue
                yield sample
        finally:
            for src in sources:
                src.close()

    buf = spec["shuffle"] if shuffle is None else shuffle
    if buf > 0:
        return shuffle_stage(buf, rng=rng)(mixed())
    return mixed()


def _source(spec, rng, stats, strict, warn, budget=None, on_bad_shard=None, settings=None):
    from ..core.limits import MAX_URLS, bounded_list
    from ..sources.shardlist import expand_urls
    from .basic import shuffle as shuffle_stage

    # repeated: a list; ``budget`` is what is left of the bound for all sources
    urls = bounded_list(expand_urls([spec["shards"]], globs=False), "the shards of the sources",
                        None if budget is None else budget[0],
                        max_urls=MAX_URLS if settings is None else settings.max_urls)
    if budget is not None:
        budget[0] -= len(urls)

    def repeated():
        for _ in range(spec["nrepeats"]):
            files = list(urls)
            if spec["shuffle"] > 0:
                rng.shuffle(files)
            yield from _multistream(files, spec["nstreams"], rng, stats, strict, warn, spec["allow_missing"],
                                    on_bad_shard, settings)

    if spec["shuffle"] > 0:
        return shuffle_stage(spec["shuffle"], rng=rng)(repeated())
    return repeated()


def _multistream(files, n, rng, stats, strict, warn, allow_missing, on_bad_shard=None, settings=None):
    from ..sources.samples import iter_samples

    files = list(files)
    files.reverse()
    streams = []
    try:
        while True:
            while len(streams) < n and files:
                url = files.pop()
                streams.append((url, iter_samples([url], stats, strict=strict, warn=warn, on_bad_shard=on_bad_shard, settings=settings),
                                [False]))
            if not streams:
                return
            i = rng.randrange(len(streams))
            url, it, started = streams[i]
            try:
                sample = next(it, None)
            except BadInput as e:
                if not (allow_missing and not started[0]):
                    raise
                if warn:
                    warn(f"skipped (allow_missing): {e}")
                sample = None
            if sample is None:
                it.close()
                del streams[i]
                continue
            started[0] = True
            yield sample
    finally:
        for _, it, _ in streams:
            it.close()


def distinct_neighbours(hint=""):
    """Stage: refuse two samples in a row with the same key (written one
    after the other they would read back as one sample with repeated
    fields).  Mixed sources often share key names (``000000001``)."""

    def stage(samples):
        prev = None
        for sample in samples:
            key = sample.get("__key__")
            if key is not None and key == prev:
                raise BadSample(key, f"two samples in a row have this key (sources share key names){hint}",
                                sample.get("__source__"))
            prev = key
            yield sample

    return stage
