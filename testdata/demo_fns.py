"""Python functions for `tarproc --map` in the demo (and the README)."""

import io
import json


def thumbnail(sample):
    """Add a 24x24 grayscale thumbnail and a caption to a sample."""
    from PIL import Image

    img = Image.open(io.BytesIO(sample["png"])).convert("L").resize((24, 24))
    out = io.BytesIO()
    img.save(out, format="PNG")
    meta = json.loads(sample["json"])
    sample["thumb.png"] = out.getvalue()
    sample["txt"] = f"a {meta['name']} on rgb{tuple(meta['color'])}".encode()
    return sample
