"""Every code example in README.md and docs/*.md runs.

Each fenced block tagged ``sh``, ``bash`` or ``python`` is one test: it runs
in a fresh directory holding generated data under the names the docs use
(``small.tar``, ``data.tar``, ``shard-{0000..0146}.tar``, ``mymodule.py``, ...,
see :func:`workspace`), shell blocks with ``bash -eo pipefail``, Python
blocks with this venv's Python, and must exit 0; and no tarproc command in
them may fail, not even one that ``bash -e`` lets pass (the left side of
``&&`` or ``||``, a command inside ``if``): each runs through a wrapper that
records a non-zero exit.  Blocks without a tag (usage lines, sample output)
are not code examples.

A block that cannot run here (it needs the network, a cloud bucket, a
cluster, or runs a server until stopped) has the marker
``<!-- no-test: REASON -->`` on the line before its fence; it is then only
checked for syntax (``bash -n``, ``compile``), and the reason must say why.
See README.md, "Development"."""

import glob
import os
import re
import shutil
import subprocess
import sys

import pytest
from conftest import ROOT

FENCE = re.compile(r"^```\s*(sh|bash|python)\s*$")
MARKER = re.compile(r"<!--\s*no-test:\s*(.*?)\s*-->")
TIMEOUT = 120


def doc_files():
    return [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))


def blocks():
    """``(file, line, lang, code, reason)`` of every tagged block; reason is
    the no-test marker's text (``None`` when the block runs)."""
    out = []
    for path in doc_files():
        lines = open(path, encoding="utf-8").read().splitlines()
        rel = os.path.relpath(path, ROOT)
        i = 0
        while i < len(lines):
            m = FENCE.match(lines[i])
            if not lines[i].startswith("```"):
                i += 1
                continue
            j = i + 1
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            if m:
                k = i - 1
                while k >= 0 and not lines[k].strip():
                    k -= 1
                marker = MARKER.search(lines[k]) if k >= 0 else None
                code = "\n".join(lines[i + 1 : j]) + "\n"
                out.append((rel, i + 1, m.group(1), code, marker.group(1) if marker else None))
            i = j + 1  # past the closing fence (an unclosed one ends the file)
    return out


ALL = blocks()
RUN = [b for b in ALL if b[4] is None]
MARKED = [b for b in ALL if b[4] is not None]


# ---------------------------------------------------------------- the data the examples use


def _tar(path, samples):
    import io
    import tarfile

    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tf:
        for key, fields in samples:
            for field in sorted(fields):
                data = fields[field]
                info = tarfile.TarInfo(f"{key}.{field}")
                info.size, info.mtime = len(data), 1600000000
                tf.addfile(info, io.BytesIO(data))


def _jpeg(w, h, seed):
    import io

    from PIL import Image

    img = Image.new("RGB", (w, h), ((seed * 37) % 256, (seed * 91) % 256, (seed * 13) % 256))
    out = io.BytesIO()
    img.save(out, format="JPEG", quality=80)
    return out.getvalue()


def _pdf(pages, seed):
    import io

    from PIL import Image

    imgs = [Image.new("RGB", (40, 30), ((seed * 50 + p * 90) % 256, 80, 120)) for p in range(pages)]
    out = io.BytesIO()
    imgs[0].save(out, format="PDF", save_all=True, append_images=imgs[1:])
    return out.getvalue()


def _image_samples(n, prefix="n"):
    import json

    return [(f"{prefix}{130 + i:04d}", {"jpg": _jpeg(64, 48, i), "cls": b"%d" % (i % 10), "txt": b"class %d" % (i % 10),
                                        "json": json.dumps({"label": i % 10, "text": "a b"}).encode()})
            for i in range(n)]


def _tiny_samples(shard, n=2):
    return [(f"s{shard}_{j}", {"cls": b"%d" % j, "txt": b"hello", "json": b'{"label": %d}' % j}) for j in range(n)]


@pytest.fixture(scope="session")
def workspace(tmp_path_factory):
    """Generated data under the names the docs use (read by every block
    through symlinks for the many small shards, copies for the rest)."""
    import gzip

    root = tmp_path_factory.mktemp("docs-data")
    copied = root / "copied"
    linked = root / "linked"
    copied.mkdir()
    linked.mkdir()
    for name in ("small.tar", "big.tar", "in.tar", "images.tar", "a.tar"):
        _tar(copied / name, _image_samples(16))
    _tar(copied / "data.tar", [(k, dict(f, png=f["jpg"])) for k, f in _image_samples(16)])
    _tar(copied / "b.tar", _image_samples(4, prefix="b"))
    (copied / "b.tar.gz").write_bytes(gzip.compress((copied / "b.tar").read_bytes(), mtime=0))
    for i in range(10):
        _tar(copied / f"in-{i:04d}.tar", _tiny_samples(f"in{i}"))
    (copied / "shards").mkdir()
    _tar(copied / "shards" / "train-0000.tar", _image_samples(4, prefix="t"))
    _tar(copied / "docs.tar", [(f"d{i}", {"pdf": _pdf(2, i), "txt": b"doc"}) for i in range(2)])  # scanned documents
    for pattern, n in (("shard-{:04d}.tar", 147), ("imagenet-{:04d}.tar", 147), ("train-{:06d}.tar", 147),
                       ("train-{:03d}.tar", 100)):
        for i in range(n):
            _tar(linked / pattern.format(i), _tiny_samples(pattern.split("-")[0] + str(i)))
    for i in range(147):
        data = (linked / f"shard-{i:04d}.tar").read_bytes()
        (linked / f"shard-{i:04d}.tgz").write_bytes(gzip.compress(data, mtime=0))
    for i in range(100):
        data = (linked / f"train-{i:03d}.tar").read_bytes()
        (linked / f"train-{i:03d}.tar.gz").write_bytes(gzip.compress(data, mtime=0))
    _tar(copied / "all.tar", [s for i in range(147) for s in _tiny_samples(f"shard{i}")])
    # no output directory is prepared: an example runs as in a fresh, empty directory with its inputs
    (copied / "val-keys.txt").write_text("sshard3_0\nsshard7_1\n")
    # an index of the shard-NNNN.tar shards (made by tarindex, as the docs do)
    subprocess.run(["tarindex", "shard-{0000..0146}.tar", "-o", "index.json"], cwd=linked, check=True,
                   capture_output=True, timeout=TIMEOUT)
    shutil.move(linked / "index.json", copied / "index.json")
    # a member larger than the blob threshold the examples use (1 MiB)
    _tar(linked / "videos.tar", [("v0", {"mp4": bytes(range(256)) * 6000, "txt": b"big"}),
                                 ("v1", {"mp4": b"\0\0\0\x18ftypmp42", "txt": b"small"})])
    (copied / "shards.txt").write_text("".join(f"shard-{i:04d}.tar\n" for i in range(3)))
    # images and plans for tarcreate
    for d in ("img", "images"):
        (copied / d).mkdir()
        for n, name in enumerate(("a.jpg", "b.jpg")):
            (copied / d / name).write_bytes(_jpeg(32, 24, n))
    (copied / "a.jpg").write_bytes(_jpeg(32, 24, 5))
    (copied / "plan.tsv").write_text("__key__\t@jpg\tcls\nn0001\timg/a.jpg\t3\nn0002\timg/b.jpg\t7\n")
    (copied / "plan.csv").write_text("@jpg,cls\na.jpg,3\nb.jpg,7\n")
    (copied / "files.txt").write_text("0001.jpg img/a.jpg\n0001.cls text:3\n0002.jpg file:img/b.jpg\n")
    resize = ("import io\nfrom PIL import Image\n\n\ndef resize(sample):\n"
              "    img = Image.open(io.BytesIO(sample['jpg']))\n    img.thumbnail((32, 32))\n"
              "    out = io.BytesIO()\n    img.save(out, 'JPEG')\n    sample['jpg'] = out.getvalue()\n"
              "    return sample\n")
    (copied / "resize.py").write_text(resize)
    (copied / "mymodule.py").write_text(resize)
    return root


def console_scripts():
    """The names of the commands setup.cfg installs."""
    import configparser

    cfg = configparser.ConfigParser()
    cfg.read(os.path.join(ROOT, "setup.cfg"))
    return [line.split("=")[0].strip() for line in cfg["options.entry_points"]["console_scripts"].splitlines()
            if "=" in line]


@pytest.fixture(scope="session")
def wrappers(tmp_path_factory):
    """A directory of wrappers, one per installed command, that run it and
    append ``NAME ARGS -> exit N`` to ``$DOCS_FAILED`` when it fails: ``bash
    -e`` ignores a failure left of ``&&`` (``tarindex 'shard-*.tar' -o i.json
    && tarcheck ...`` passed while tarindex exited 2)."""
    d = tmp_path_factory.mktemp("wrappers")
    for name in console_scripts():
        real = shutil.which(name)
        assert real, name
        (d / name).write_text(f'#!/bin/sh\n"{real}" "$@"\nrc=$?\n'
                              f'[ $rc -eq 0 ] || echo "{name} $* -> exit $rc" >> "$DOCS_FAILED"\nexit $rc\n')
        (d / name).chmod(0o755)
    return d


def _block_dir(workspace, tmp_path):
    d = tmp_path / "run"
    shutil.copytree(workspace / "copied", d, symlinks=True)
    for f in os.listdir(workspace / "linked"):
        os.symlink(workspace / "linked" / f, d / f)
    return d


def _show(code, p):
    err = p.stderr.decode(errors="replace")[-3000:]
    out = p.stdout.decode(errors="replace")[-1000:]
    return f"exit {p.returncode}\n--- block ---\n{code}--- stderr (tail) ---\n{err}--- stdout (tail) ---\n{out}"


@pytest.mark.parametrize("path, line, lang, code, reason", RUN, ids=[f"{b[0]}:{b[1]}" for b in RUN])
def test_doc_example_runs(path, line, lang, code, reason, workspace, wrappers, tmp_path):
    d = _block_dir(workspace, tmp_path)
    failed = tmp_path / "failed.txt"
    env = dict(os.environ, PYTHONPATH=str(d), TARPROC_ALLOW_TTY="1", DOCS_FAILED=str(failed),
               PATH=str(wrappers) + os.pathsep + os.environ["PATH"])
    if lang == "python":
        argv = [sys.executable, "-c", code]
    else:
        argv = ["bash", "-eo", "pipefail", "-c", code]
    p = subprocess.run(argv, cwd=d, env=env, capture_output=True, timeout=TIMEOUT, stdin=subprocess.DEVNULL)
    assert p.returncode == 0, f"{path}:{line}: " + _show(code, p)
    assert not failed.exists(), f"{path}:{line}: a command failed:\n{failed.read_text()}" + _show(code, p)


@pytest.mark.parametrize("path, line, lang, code, reason", MARKED, ids=[f"{b[0]}:{b[1]}" for b in MARKED])
def test_opted_out_example_says_why_and_parses(path, line, lang, code, reason):
    assert len(reason) >= 10 and not reason.lower().startswith(("todo", "fixme", "skip")), \
        f"{path}:{line}: the no-test marker must give a reason, e.g. <!-- no-test: needs network -->"
    if lang == "python":
        compile(code, f"{path}:{line}", "exec")
    else:
        p = subprocess.run(["bash", "-n", "-c", code], capture_output=True, timeout=30)
        assert p.returncode == 0, f"{path}:{line}: {p.stderr.decode()}"


def test_the_harness_finds_the_examples():
    # every command page has examples, and most of them run
    assert len(ALL) >= 20 and len(RUN) > len(MARKED)
    files = {b[0] for b in RUN}
    assert "README.md" in files and "docs/tarcat.md" in files


def test_a_failure_bash_e_lets_pass_is_caught(wrappers, tmp_path):
    # the left side of && under bash -e: the block exits 0, the wrapper records the failure
    failed = tmp_path / "failed.txt"
    env = dict(os.environ, DOCS_FAILED=str(failed), PATH=str(wrappers) + os.pathsep + os.environ["PATH"])
    p = subprocess.run(["bash", "-eo", "pipefail", "-c", "tarcat nothere.tar -o x.tar && true\necho ok"],
                       cwd=tmp_path, env=env, capture_output=True, timeout=TIMEOUT)
    assert p.returncode == 0 and p.stdout == b"ok\n"
    assert failed.read_text() == "tarcat nothere.tar -o x.tar -> exit 2\n"


def test_harness_reads_markers_and_fences(tmp_path, monkeypatch):
    import test_docs as T

    (tmp_path / "README.md").write_text("x\n\n```sh\necho hi\n```\n<!-- no-test: needs the network -->\n"
                                        "```bash\ncurl https://x\n```\n```\nnot code\n```\n```python\nprint(1)\n")
    (tmp_path / "docs").mkdir()
    monkeypatch.setattr(T, "ROOT", str(tmp_path))
    got = [(b[1], b[2], b[4]) for b in T.blocks()]
    assert got == [(3, "sh", None), (7, "bash", "needs the network"), (13, "python", None)]
