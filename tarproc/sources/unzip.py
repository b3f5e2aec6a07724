"""Decoding gzip, bzip2 and xz with the standard library, in a thread of
ours or as a program of its own.

:func:`decoded_chunks` is the decoder.  Run as a script
(``python -I -S unzip.py CODEC``) it decodes its stdin to its stdout: for
a compressed *file*, :mod:`tarproc.sources.compression` starts it as the
decoding program, so decoding and tar parsing run on two cores without
sharing a GIL (a thread's decoded chunk waits for the parser's switch
interval before it is handed over), with zlib's inflate, which is about twice
as fast as ``gzip -dc``'s, and with the same acceptance as the thread
(``pigz -dc`` ignores junk after the last stream, which the thread refuses).
Only the standard library is imported here: the script starts in about
15 ms, without ``site``.
"""

import os
import sys

#: Largest piece the decoder hands over at once.
CHUNK = 1 << 20
#: What the script writes on stderr when its input ends inside a stream
#: (the reader's word list for a truncated stream has "unexpected end").
TRUNCATED = "unexpected end of the compressed stream"


def decoded_chunks(codec, read):
    """Decode what ``read()`` returns (``b""`` at the end) into chunks of at
    most ``CHUNK`` bytes.  Concatenated streams are read as one; zero bytes
    after the last one are padding; anything else there is a new stream and
    must decode.  Raises ``EOFError`` when the input ends inside a stream and
    the codec's own error when it is damaged."""
    import zlib

    if codec == "gzip":
        def new():
            return zlib.decompressobj(31)
    elif codec == "bzip2":
        import bz2

        new = bz2.BZ2Decompressor
    else:
        import lzma

        new = lzma.LZMADecompressor
    d = None
    data = b""
    while True:
        if not data:
            data = read()
            if not data:
                if d is not None:
                    raise EOFError
                return
        if d is None:
            if not data.strip(b"\0"):
                data = b""  # padding
                continue
            d = new()
        if codec == "gzip":
            out = d.decompress(data, CHUNK)
            data = d.unconsumed_tail
            while not data and len(out) == CHUNK and not d.eof:
                yield out  # output still held inside the decoder
                out = d.decompress(b"", CHUNK)
                data = d.unconsumed_tail
        else:
            out = d.decompress(data, CHUNK)
            data = b""
            while not d.eof and not d.needs_input:
                yield out
                out = d.decompress(b"", CHUNK)
        if out:
            yield out
        if d.eof:
            data = d.unused_data + data
            d = None


def main(argv):
    """Decode stdin to stdout; exit 1 with one line on stderr when the
    stream is damaged or truncated, 0 when the reader went away."""
    codec = argv[1]
    read = os.read
    try:
        for chunk in decoded_chunks(codec, lambda: read(0, 1 << 18)):
            view = memoryview(chunk)
            while view:
                view = view[os.write(1, view):]
    except BrokenPipeError:
        return 0
    except EOFError:
        print(TRUNCATED, file=sys.stderr)
        return 1
    except Exception as e:  # the codec's own message, as the thread reports it
        print(str(e) or type(e).__name__, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
