"""The bundled shard is what its generator makes, and the demo runs."""

import io
import os
import subprocess
import sys

from conftest import ROOT
from helpers import samples_of


def _pixels(png):
    from PIL import Image

    img = Image.open(io.BytesIO(png))
    return img.size, img.mode, img.tobytes()


def test_bundled_shard_is_what_the_generator_makes(tmp_path):
    out = tmp_path / "digits.tar"
    subprocess.run([sys.executable, os.path.join(ROOT, "testdata", "make_testdata.py"), str(out)], check=True,
                   capture_output=True)
    made = samples_of(out.read_bytes())
    bundled = samples_of(open(os.path.join(ROOT, "testdata", "digits.tar"), "rb").read())
    assert list(made) == list(bundled) == [f"digits/{i:04d}" for i in range(24)]
    for key in made:
        assert made[key]["cls"] == bundled[key]["cls"] and made[key]["json"] == bundled[key]["json"]
        # PNG bytes may differ with another zlib; the pixels may not
        assert _pixels(made[key]["png"]) == _pixels(bundled[key]["png"])
    # and the generator is deterministic on one machine
    again = tmp_path / "again.tar"
    subprocess.run([sys.executable, os.path.join(ROOT, "testdata", "make_testdata.py"), str(again)], check=True,
                   capture_output=True)
    assert again.read_bytes() == out.read_bytes()


def test_demo_runs(tmp_path):
    env = dict(os.environ, TMPDIR=str(tmp_path))
    p = subprocess.run(["bash", os.path.join(ROOT, "testdata", "demo.sh")], capture_output=True, env=env,
                       timeout=300)
    assert p.returncode == 0, p.stderr.decode(errors="replace")
    out = p.stdout.decode()
    assert "24 samples" in out and "demo complete" in out
    assert "head-000002.tar" in out and "PNG image (24, 24) L" in out and "\\n\t" not in out
    assert os.listdir(tmp_path) == []  # the demo cleans up after itself
