"""The same input and options give the same bytes: for any worker count
(tarproc --map and -c with -p 1 and -p 3), in any run (tarsplit with a
manifest and an index, tarcreate with input files touched between runs)."""

import os
import subprocess

from helpers import read_tar, samples_of, tar_bytes


MEMBERS = [(f"d{i % 3}/s{i:04d}.{f}", (f"{f} {i} " * (20 + i % 7)).encode())
           for i in range(240) for f in ("cls", "txt")]


def run(cmd, cwd, input=None, env=None, **kw):
    return subprocess.run(cmd, cwd=cwd, input=input, capture_output=True, timeout=60,
                          env={**os.environ, **(env or {})}, **kw)


MAPFN = """
import random, time
def f(sample):
    time.sleep(random.random() * 0.01)          # finish out of order
    sample["len"] = str(len(sample["txt"])).encode()
    return [sample, dict(sample, __key__=sample["__key__"] + "-b")]
"""


def test_same_bytes_for_any_worker_count_and_any_run(tmp_path):
    data = tar_bytes(MEMBERS[:120])  # 60 samples
    (tmp_path / "in.tar").write_bytes(data)
    (tmp_path / "fn.py").write_text(MAPFN)
    outs = {}
    for p in ("1", "3"):
        for tag, argv in {"map": ["--map", "fn.py:f", "--batch", "4"],
                          "cmd": ["-c", "sleep 0.0$((RANDOM % 3)); wc -c < sample.txt > sample.len"]}.items():
            r = run(["tarproc", *argv, "-p", p, "in.tar"], tmp_path)
            assert r.returncode == 0 and r.stderr == b"", r.stderr
            got = samples_of(r.stdout)
            assert len(got) == (120 if tag == "map" else 60)  # the samples did succeed
            assert all(s["len"].strip() == str(len(s["txt"])).encode() for s in got.values())
            outs.setdefault(tag, []).append(r.stdout)
    assert outs["map"][0] == outs["map"][1] and outs["cmd"][0] == outs["cmd"][1]
    # tarsplit twice (compressed, with a manifest and an index): the same files, the same bytes
    trees = []
    for n in ("r1", "r2"):
        d = tmp_path / n
        d.mkdir()
        r = run(["tarsplit", "-n", "7", "-s", "6K", "-o", "x-%03d.tar.gz", "--manifest", "m.json",
                 "--index", "i.json", "-q", "../in.tar"], d)
        assert r.returncode == 0, r.stderr
        trees.append({os.path.relpath(os.path.join(top, f), d): open(os.path.join(top, f), "rb").read()
                      for top, _, files in os.walk(d) for f in files})  # (the index's sidecars in i.offsets.d/)
    assert len(trees[0]) > 5 and "i.offsets.d/000000.offsets" in trees[0] and trees[0] == trees[1]
    # tarcreate twice, the input files touched (and re-moded) between: the same bytes
    (tmp_path / "a.bin").write_bytes(os.urandom(3000))
    (tmp_path / "plan.tsv").write_text("__key__\t@bin\tcls\n000\ta.bin\t3\n001\tfn.py\t4\n")
    first = run(["tarcreate", "plan.tsv"], tmp_path)
    os.utime(tmp_path / "a.bin", (1, 1))
    os.chmod(tmp_path / "a.bin", 0o700)
    second = run(["tarcreate", "plan.tsv"], tmp_path)
    assert first.returncode == 0 and first.stdout == second.stdout
    assert [n for n, _ in read_tar(first.stdout)] == ["000.bin", "000.cls", "001.bin", "001.cls"]
