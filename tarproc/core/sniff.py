"""What an input that is not a tar archive looks like, from its first bytes.

The tar reader calls :func:`describe` when the very first header of an input
is not a tar header, so that ``tarcat < image.png`` says "not a tar archive
(looks like PNG image data)" rather than a checksum complaint.  Only the
first block is looked at; nothing here reads the stream."""

# (magic bytes at offset 0, description); longest first where prefixes overlap
_MAGIC = (
    (b"\x89PNG\r\n\x1a\n", "PNG image data"),
    (b"\xff\xd8\xff", "JPEG image data"),
    (b"GIF87a", "GIF image data"),
    (b"GIF89a", "GIF image data"),
    (b"%PDF-", "a PDF document"),
    (b"PK\x03\x04", "a ZIP archive"),
    (b"PK\x05\x06", "an empty ZIP archive"),
    (b"7z\xbc\xaf\x27\x1c", "a 7-Zip archive"),
    (b"Rar!\x1a\x07", "a RAR archive"),
    (b"070707", "a cpio archive (odc): convert it with bsdtar -cf out.tar @in.cpio"),
    (b"070701", "a cpio archive (newc): convert it with bsdtar -cf out.tar @in.cpio"),
    (b"070702", "a cpio archive (newc): convert it with bsdtar -cf out.tar @in.cpio"),
    (b"\xc7\x71", "a cpio archive (binary): convert it with bsdtar -cf out.tar @in.cpio"),
    (b"\x71\xc7", "a cpio archive (binary): convert it with bsdtar -cf out.tar @in.cpio"),
    (b"!<arch>\n", "an ar archive"),
    (b"\x7fELF", "an ELF executable"),
    (b"\x04\x22\x4d\x18", "lz4 compressed data, which is not supported: decompress with lz4 -dc"),
    (b"\x1f\x9d", "Unix compress (.Z) data, which is not supported: decompress with gzip -dc"),
    (b"\x5d\x00\x00", "lzma compressed data, which is not supported: decompress with xz -dc"),
    (b"\x1f\x8b", "gzip data inside the decompressed stream (compressed twice?)"),
    (b"\x28\xb5\x2f\xfd", "zstd data inside the decompressed stream (compressed twice?)"),
    (b"\xfd7zXZ\x00", "xz data inside the decompressed stream (compressed twice?)"),
    (b"\x93NUMPY", "a NumPy .npy array"),
    (b"II*\x00", "TIFF image data"),
    (b"MM\x00*", "TIFF image data"),
)


def describe(head):
    """A short description of what ``head`` (the first bytes of an input,
    up to a block) looks like, or ``None`` when it is nothing we know (or
    looks like a damaged tar header, which the reader reports as such)."""
    head = bytes(head[:512])
    if len(head) >= 262 and head[257:262] == b"ustar":
        return None  # a tar header, damaged
    for magic, what in _MAGIC:
        if head.startswith(magic):
            return what
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "WebP image data"
    if head[:4] == b"RIFF" and head[8:12] == b"WAVE":
        return "WAV audio data"
    if b"\0" in head:  # text has no NUL bytes; a tar header cut short has
        return None
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as e:
        if e.start < len(head) - 4:  # not just a character cut at the end of the block
            return None
        text = head[: e.start].decode("utf-8")
    start = text.lstrip("\ufeff \t\r\n")[:64].lower()
    if start.startswith(("<!doctype html", "<html", "<head", "<body")):
        return "an HTML document: an error page instead of the file?"
    if start.startswith("<?xml"):
        return "an XML document: an error page instead of the file?" if "<error" in text.lower() \
            else "an XML document"
    if start[:1] in ("{", "["):
        return "JSON text"
    if text.strip() and all(c.isprintable() or c in "\t\r\n" for c in text):
        return "text"
    return None
