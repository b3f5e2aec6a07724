#!/usr/bin/env python3
"""Make the project's own small test shard, deterministically.

    python testdata/make_testdata.py [OUT.tar]     (default: testdata/digits.tar)

24 samples ``digits/NNNN`` with three fields each: ``png`` (a 48x48 RGB image of
a digit drawn by Pillow on a coloured background), ``cls`` (the digit) and
``json`` (``{"label": digit, "name": ..., "color": [r, g, b]}``).  Written with
tarproc's own TarWriter, so the bytes are the same on every run with the same
Pillow/zlib."""

import io
import json
import os
import random
import sys

NAMES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]


def make_samples(n=24, seed=42):
    from PIL import Image, ImageDraw

    r = random.Random(seed)
    for i in range(n):
        digit = i % 10
        color = tuple(r.randrange(40, 200) for _ in range(3))
        img = Image.new("RGB", (48, 48), color)
        draw = ImageDraw.Draw(img)
        # a seven-segment digit, so no font file is needed
        segs = {0: "abcdef", 1: "bc", 2: "abged", 3: "abgcd", 4: "fgbc", 5: "afgcd",
                6: "afgedc", 7: "abc", 8: "abcdefg", 9: "abcdfg"}[digit]
        box = {"a": (14, 8, 34, 12), "b": (32, 10, 36, 24), "c": (32, 26, 36, 40), "d": (14, 38, 34, 42),
               "e": (12, 26, 16, 40), "f": (12, 10, 16, 24), "g": (14, 23, 34, 27)}
        for s in segs:
            draw.rectangle(box[s], fill=(255, 255, 255))
        png = io.BytesIO()
        img.save(png, format="PNG", optimize=False)
        meta = {"label": digit, "name": NAMES[digit], "color": list(color)}
        yield {
            "__key__": f"digits/{i:04d}",
            "png": png.getvalue(),
            "cls": str(digit).encode(),
            "json": json.dumps(meta, sort_keys=True).encode(),
        }


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, os.path.dirname(here))
    from tarproc import write_samples

    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "digits.tar")
    n = write_samples(out, make_samples())
    print(f"wrote {n} samples to {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
