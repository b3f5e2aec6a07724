"""The work behind one response of tarserve: a shard through the stages of
``tarcat`` and ``tarproc`` (:func:`transform`), and the body of the job
process that writes it as a tar on its stdout (:func:`job_main`)."""

import json
import os
import signal
import sys

from ..core.limits import safe_text
from ..errors import SampleFailed, TarprocError, UsageError


# ---------------------------------------------------------------- the transformation


def transform(url, *, map=None, command=None, parallel=None, count=None, skip=0, slice=None, fields=None,
              rekey=None, shuffle=0, seed=None, max_failures=0, strict=False, batch=32, stats=None,
              on_error=None, warn=None, stall=None, on_bad_shard="fail", settings=None):
    """The samples of one shard through the stages of ``tarcat`` (``skip``,
    ``slice``, ``fields``, ``count``, ``rekey``, ``shuffle``) and then
    ``tarproc`` (``map`` or ``command``); a response of ``tarserve`` is
    these samples written by :class:`~tarproc.SampleWriter`.  A failed
    sample is left out and reported to ``on_error``; one more than
    ``max_failures`` (``None``: no limit) raises
    :class:`~tarproc.errors.SampleFailed`.  ``stall`` (a
    :class:`~tarproc.runtime.stall.Stall`, also given to the sink) flushes
    output whenever the source is about to block.  ``on_bad_shard``: as
    for :func:`~tarproc.iter_samples` (a damaged shard is reported to
    ``warn`` and ends the samples: none of them, or those before the damage).
    ``settings`` (a :class:`~tarproc.settings.Settings`, or its
    :meth:`~tarproc.settings.Settings.as_dict`): the reading settings."""
    from ..stages import basic as S
    from ..sources.samples import iter_samples
    from ..core.stats import Stats

    if map is not None and command is not None:
        raise UsageError("give at most one of map and command")
    if isinstance(settings, dict):
        from ..settings import Settings

        settings = Settings.from_dict(settings)
    stats = stats if stats is not None else Stats()
    report = on_error or (lambda message: print(safe_text(f"tarserve: {message}", lines=True), file=sys.stderr,
                                                flush=True))
    failed = [0]

    def on_failure(message):
        failed[0] += 1
        report(message)
        if max_failures is not None and failed[0] > max_failures:
            raise SampleFailed(f"{failed[0]} failed samples, more than --max-failures {max_failures}")

    stages = [S.shuffle(shuffle, seed)] if shuffle > 0 else []
    if skip:
        stages.append(S.skip(skip))
    if slice:
        sl = S.parse_slice(slice) if isinstance(slice, str) else slice
        stages.append(S.slice_samples(sl.start, sl.stop, sl.step))
    if fields:
        stages.append(S.select_fields(fields, stats))
    if count is not None:
        stages.append(S.take(count))
    if rekey:
        stages.append(S.rekey(rekey))
    samples = S.pipeline(iter_samples([url], stats, strict=strict, warn=warn, stall=stall, on_bad_shard=on_bad_shard,
                                      settings=settings),
                         *stages)
    if map is not None:
        from ..stages.function import map_function

        return map_function(samples, map, parallel, batch=batch, stats=stats, on_error=on_failure, stall=stall)
    if command is not None:
        from ..stages.command import map_command

        return map_command(samples, command, parallel, stats=stats, on_error=on_failure, quiet=True, stall=stall,
                           capture_spill=None if settings is None else settings.capture_spill)
    return samples


def job_main():
    """Body of the child process of one response: ``argv[1]`` the options
    (JSON), ``argv[2]`` the shard URL, ``argv[3]`` its name for messages.
    Writes the tar on stdout; exit 0 only when all of it was written."""
    from ..core.grouping import SampleWriter
    from ..core.stats import Stats
    from ..runtime.stall import Stall
    from ..sinks.output import open_sink

    from ..runtime.child import when_started
    from ..sources.open import stop_sources

    def on_term(signum, frame):
        # the input commands run in their own process groups, not reached by killpg;
        # one being started is registered first (when_started)
        when_started(stop_sources)
        sys.exit(143)  # run the cleanups

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the server's business
    options, url, name = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]

    def say(message):  # (the server's log: text shown to people)
        print(safe_text(f"tarserve: {name}: {message}", lines=True), file=sys.stderr, flush=True)

    code = 0
    try:
        stats = Stats()
        stall = Stall()  # output keeps pace with a slow source
        with open_sink("-", stall=stall) as sink:  # the sink writes to its own copy of stdout
            # what a --map function prints goes to the server's log, not into the response
            os.dup2(2, 1)
            writer = SampleWriter(sink, stats)
            results = transform(url, stats=stats, on_error=say, warn=say, stall=stall, **options)
            try:
                for sample in results:
                    writer.write(sample)
            finally:
                close = getattr(results, "close", None)
                if close is not None:
                    close()
            writer.close()
    except BrokenPipeError:
        code = 141  # the server stopped reading: it knows why
    except TarprocError as e:
        say(str(e))
        code = e.exit_code or 1
    except Exception as e:  # a bug: one line, and a failed response
        say(f"internal error: {type(e).__name__}: {e}")
        code = 2
    try:
        sys.stdout.flush()
    except OSError:
        pass
    os._exit(code)
