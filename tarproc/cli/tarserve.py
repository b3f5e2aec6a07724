"""tarserve: serve tar shards over HTTP, transformed on read (typer app)."""

import os
import sys
from typing import Optional

import typer

EXAMPLES = """\b
tarserve shards/ --map resize.py:resize -p 4          # GET /train-0000.tar, resized
tarserve s3://bucket/train -c 'gm mogrify -resize 256x256 sample.jpg' --port 8080
TARPROC_SERVE_TOKEN=s3cret tarserve shards/ --host 0.0.0.0 -f 'jpg cls'
curl -sf http://127.0.0.1:8080/train-0000.tar | tar tvf -
curl -s http://127.0.0.1:8080/ | python3 -m json.tool    # listing (local directory)
"""

NOTES = """\b
GET /NAME streams SOURCE-PREFIX/NAME through the selection stages of tarcat and
then --map/-c as tarproc does: the body equals `tarcat [selection] PREFIX/NAME |
tarproc [--map|-c]` byte for byte. A failure mid-stream cuts the chunked body
(the client sees an error, curl exits 18). SIGTERM drains responses in flight
for --drain-timeout seconds, then cuts them. Exit status: 0 stopped cleanly,
2 usage error or the port cannot be opened.
"""

app = typer.Typer(add_completion=False, rich_markup_mode=None, pretty_exceptions_enable=False,
                  context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})


class _Terminated(BaseException):
    pass


def _version(value: bool):
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            v = version("tarproc")
        except PackageNotFoundError:
            v = "unknown (not installed)"
        print(f"tarserve (tarproc) {v}")
        raise typer.Exit(0)


@app.command(help="Serve tar shards over HTTP, transformed on read: GET /NAME streams SOURCE-PREFIX/NAME "
                  "through the selection options of tarcat and --map/-c of tarproc.",
             epilog="examples:\n\n" + EXAMPLES + "\n" + NOTES)
def tarserve(
    prefix: str = typer.Argument(..., metavar="SOURCE-PREFIX",
                                 help="a directory, or an http(s)://, gs:// or s3:// prefix"),
    map: Optional[str] = typer.Option(None, "--map", metavar="MODULE:FUNC",
                                      help="Python function applied to each sample (as tarproc --map)"),
    command: Optional[str] = typer.Option(None, "-c", "--command", metavar="CMD",
                                          help="shell command run in each sample's directory (as tarproc -c)"),
    parallel: Optional[int] = typer.Option(None, "-p", "--parallel", metavar="N",
                                           help="workers per response (default: all cores)"),
    count: Optional[int] = typer.Option(None, "--count", metavar="N", help="only the first N samples"),
    skip: int = typer.Option(0, "-s", "--skip", metavar="N", help="skip the first N samples"),
    slice_: Optional[str] = typer.Option(None, "--slice", metavar="START:STOP[:STEP]",
                                         help="keep samples by index"),
    fields: Optional[str] = typer.Option(None, "-f", "--fields", metavar="SPEC",
                                         help="keep only these fields: 'jpg cls', 'img=jpg;png'"),
    rekey: Optional[str] = typer.Option(None, "--rekey", metavar="FORMAT", help="new keys, e.g. '{index:09d}'"),
    shuffle: int = typer.Option(0, "--shuffle", metavar="N", help="shuffle through a buffer of N"),
    seed: Optional[int] = typer.Option(None, "--seed", metavar="N", help="random seed for --shuffle"),
    max_failures: int = typer.Option(0, "--max-failures", metavar="N",
                                     help="failed samples skipped before a response fails"),
    strict: bool = typer.Option(False, "--strict", help="a shard without the end-of-archive marker fails"),
    host: str = typer.Option("127.0.0.1", "--host", metavar="ADDR", help="address to listen on (loopback unless told)"),
    port: int = typer.Option(8080, "--port", metavar="N", help="port (0: any free port, printed on stderr)"),
    token: Optional[str] = typer.Option(None, "--token", metavar="TOKEN",
                                        help="require 'Authorization: Bearer TOKEN' "
                                             "(better: the environment variable TARPROC_SERVE_TOKEN)"),
    max_clients: int = typer.Option(16, "--max-clients", metavar="N",
                                    help="connections served at once; more get 503 with Retry-After"),
    client_timeout: float = typer.Option(60.0, "--client-timeout", metavar="SECONDS",
                                         help="drop a client that reads nothing for this long"),
    header_timeout: float = typer.Option(10.0, "--header-timeout", metavar="SECONDS",
                                         help="time allowed to send the request head"),
    drain_timeout: float = typer.Option(30.0, "--drain-timeout", metavar="SECONDS",
                                        help="on SIGTERM, time left to responses in flight"),
    quiet: bool = typer.Option(False, "-q", "--quiet", help="no access log, only errors"),
    debug: bool = typer.Option(False, "--debug", help="show the Python traceback of an error"),
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                 help="show the version and exit"),
):
    import signal

    from ..errors import TarprocError, UsageError
    from ..server import Server

    if token is None:
        token = os.environ.get("TARPROC_SERVE_TOKEN") or None

    def on_term(signum, frame):
        raise _Terminated()

    try:
        if map is not None and command is not None:
            raise UsageError("give at most one of --map and -c")
        server = Server(prefix, map=map, command=command, parallel=parallel, count=count, skip=skip,
                        slice=slice_, fields=fields, rekey=rekey, shuffle=shuffle, seed=seed,
                        max_failures=max_failures, strict=strict, host=host, port=port, token=token,
                        max_clients=max_clients, client_timeout=client_timeout, header_timeout=header_timeout,
                        drain_timeout=drain_timeout, quiet=quiet)
        signal.signal(signal.SIGTERM, on_term)
        server.start()
    except TarprocError as e:
        if debug:
            import traceback

            traceback.print_exc()
        print(f"tarserve: {e}", file=sys.stderr)
        raise typer.Exit(e.exit_code)
    print(f"tarserve: serving {prefix} on {server.url}", file=sys.stderr, flush=True)
    try:
        server.wait()
    except (_Terminated, KeyboardInterrupt):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print(f"tarserve: stopping: draining responses in flight (up to {drain_timeout:g}s)",
              file=sys.stderr, flush=True)
        cut = server.stop()
        if cut:
            print(f"tarserve: {cut} responses cut at the drain deadline", file=sys.stderr, flush=True)
    raise typer.Exit(0)


def entry():
    app(prog_name="tarserve")
