"""tarserve: serve tar shards over HTTP, transformed on read."""

import os
import sys
from typing import Annotated, Optional

import typer

from .base import OnBadShard
from .base import Fields, Seed, Skip, Slice, command, nonneg, opt, positive, run, seconds

EXAMPLES = """
tarserve shards/ --map resize.py:resize -p 4          # GET /train-0000.tar, resized
tarserve s3://bucket/train -c 'gm mogrify -resize 256x256 sample.jpg' --port 8080
TARPROC_SERVE_TOKEN=s3cret tarserve shards/ --host 0.0.0.0 -f 'jpg cls'
curl -sf http://127.0.0.1:8080/train-0000.tar | tar tvf -
curl -s http://127.0.0.1:8080/ | python3 -m json.tool    # listing (local directory)
"""

NOTES = """\
GET /NAME streams SOURCE-PREFIX/NAME through the selection stages of tarcat and
then --map/-c as tarproc does: the body equals `tarcat [selection] PREFIX/NAME |
tarproc [--map|-c]` byte for byte. A failure mid-stream cuts the chunked body
(the client sees an error, curl exits 18). SIGTERM drains responses in flight
for --drain-timeout seconds, then cuts them (exit 0); Ctrl-C stops at once,
cutting them (exit 130). Exit status: 0 stopped cleanly, 2 usage error or the
port cannot be opened, 130 interrupted.
"""


class _Terminated(BaseException):
    pass


@command("Serve tar shards over HTTP, transformed on read: GET /NAME streams SOURCE-PREFIX/NAME through the "
         "selection options of tarcat and --map/-c of tarproc.", EXAMPLES, NOTES)
def tarserve_command(
    prefix: Annotated[str, typer.Argument(metavar="SOURCE-PREFIX", show_default=False,
                                          help="a directory, or an http(s)://, gs:// or s3:// prefix")],
    map: Annotated[Optional[str], opt("--map", metavar="MODULE:FUNC",
                   help="Python function applied to each sample (as tarproc --map)")] = None,
    command: Annotated[Optional[str], opt("-c", "--command", metavar="CMD",
                       help="shell command run in each sample's directory (as tarproc -c)")] = None,
    parallel: Annotated[Optional[int], opt("-p", "--parallel", metavar="N", parser=positive(),
                        help="workers per response (default: all cores)")] = None,
    count: Annotated[Optional[int], opt("--count", metavar="N", parser=nonneg(),
                     help="only the first N samples (-c is the command here)")] = None,
    skip: Skip = 0,
    slice_: Slice = None,
    fields: Fields = None,
    rekey: Annotated[Optional[str], opt("--rekey", metavar="FORMAT", help="new keys, e.g. '{index:09d}'")] = None,
    shuffle: Annotated[int, opt("--shuffle", metavar="N", parser=nonneg(),
                       help="shuffle through a buffer of N")] = 0,
    seed: Seed = None,
    max_failures: Annotated[int, opt("--max-failures", metavar="N", parser=nonneg(),
                            help="failed samples allowed (left out of the response) before a response fails")] = 0,
    strict: Annotated[bool, opt("--strict/--no-strict",
                      help="a shard without the end-of-archive marker (cut off, or still being copied) "
                           "fails its response (default); --no-strict serves what is there")] = True,
    on_bad_shard: OnBadShard = "fail",
    host: Annotated[str, opt("--host", metavar="ADDR", help="address to listen on (default 127.0.0.1: loopback "
                                                            "unless told)")] = "127.0.0.1",
    port: Annotated[int, opt("--port", metavar="N", parser=nonneg(),
                    help="port (default 8080; 0: any free port, printed on stderr)")] = 8080,
    token: Annotated[Optional[str], opt("--token", metavar="TOKEN",
                     help="require 'Authorization: Bearer TOKEN' (better: the environment variable "
                          "TARPROC_SERVE_TOKEN)")] = None,
    max_clients: Annotated[int, opt("--max-clients", metavar="N", parser=positive(),
                           help="connections served at once (default 16); more get 503 with Retry-After")] = 16,
    client_timeout: Annotated[float, opt("--client-timeout", metavar="SECONDS", parser=seconds(),
                              help="drop a client that reads nothing for this long (default 60)")] = 60.0,
    header_timeout: Annotated[float, opt("--header-timeout", metavar="SECONDS", parser=seconds(),
                              help="time allowed to send the request head (default 10)")] = 10.0,
    drain_timeout: Annotated[float, opt("--drain-timeout", metavar="SECONDS", parser=seconds(True),
                             help="on SIGTERM, time left to responses in flight (default 30)")] = 30.0,
    stall_timeout: Annotated[float, opt("--stall-timeout", metavar="SECONDS", parser=seconds(),
                             help="end a response whose job sends nothing for this long (a hung source): "
                                  "504 before the first byte, a cut response after (default 300)")] = 300.0,
    quiet: Annotated[bool, opt("-q", "--quiet", help="no access log, only errors")] = False,
):
    import signal

    from ..errors import UsageError
    from ..server import Server
    from ..settings import Settings
    from .base import Terminated

    if token is None:
        token = os.environ.get("TARPROC_SERVE_TOKEN") or None

    def on_term(signum, frame):
        raise _Terminated()

    if map is not None and command is not None:
        raise UsageError("give at most one of --map and -c")
    server = Server(prefix, map=map, command=command, parallel=parallel, count=count, skip=skip,
                    slice=slice_, fields=fields, rekey=rekey, shuffle=shuffle, seed=seed,
                    max_failures=max_failures, strict=strict, on_bad_shard=on_bad_shard, host=host, port=port, token=token,
                    max_clients=max_clients, client_timeout=client_timeout, header_timeout=header_timeout,
                    drain_timeout=drain_timeout, stall_timeout=stall_timeout, quiet=quiet,
                    settings=Settings.from_environ(os.environ))
    signal.signal(signal.SIGTERM, on_term)
    server.start()
    from ..core.limits import safe_text

    print(f"tarserve: serving {safe_text(prefix)} on {server.url}", file=sys.stderr, flush=True)
    try:
        try:
            server.wait()
        except (_Terminated, Terminated):  # SIGTERM, SIGHUP (base.run's handler): drain
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            signal.signal(signal.SIGHUP, signal.SIG_IGN)
            print(f"tarserve: stopping: draining responses in flight (up to {drain_timeout:g}s)",
                  file=sys.stderr, flush=True)
            cut = server.stop()
            if cut:
                print(f"tarserve: {cut} responses cut at the drain deadline", file=sys.stderr, flush=True)
    except KeyboardInterrupt:  # Ctrl-C (also while draining): stop now, responses in flight cut
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        server.stop(drain=0)
        return 130
    return 0


def entry():
    run("tarserve", tarserve_command)
