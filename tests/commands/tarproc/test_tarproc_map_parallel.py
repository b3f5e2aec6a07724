"""`tarproc --map -p N` is bounded as `-c -p N` is: no more worker
processes than the open-file limit (and the available memory) allow, with
one warning line; the run is otherwise the same.  tarpcat's -w likewise."""

import io
import tarfile

from helpers import tar_bytes


def test_map_workers_fit_the_open_file_limit(sh, tmp_path):
    (tmp_path / "in.tar").write_bytes(tar_bytes([(f"s{i:03d}.txt", b"%d" % i) for i in range(40)]))
    (tmp_path / "f.py").write_text(
        "import os, time\n"
        "def f(s):\n"
        "    time.sleep(0.05)\n"
        "    s['pid.txt'] = str(os.getpid()).encode()\n"
        "    return s\n")
    # 96 descriptors: (96 - 32) // 6 = 10 workers at most
    p = sh("ulimit -n 96 && tarproc -p 200 --batch 1 --map f.py:f in.tar > out.tar", stderr_ok=True)
    err = p.stderr.decode().splitlines()
    assert len(err) == 1 and err[0].startswith("tarproc: warning: -p 200 worker processes") and \
        "open-file limit" in err[0] and err[0].endswith("starting 10"), err
    with tarfile.open(tmp_path / "out.tar") as t:
        names = t.getnames()
        pids = {t.extractfile(n).read() for n in names if n.endswith(".pid.txt")}
    assert sum(n.endswith(".txt") and not n.endswith(".pid.txt") for n in names) == 40
    assert 1 <= len(pids) <= 10
    # within the limit: no warning
    sh("ulimit -n 96 && tarproc -p 4 --batch 1 --map f.py:f in.tar > /dev/null")


def test_tarpcat_workers_fit_the_open_file_limit(sh, tmp_path):
    for i in range(30):
        (tmp_path / f"s{i:02d}.tar").write_bytes(tar_bytes([(f"k{i:02d}.txt", b"%d" % i)]))
    p = sh("ulimit -n 96 && tarpcat -w 30 's{00..29}.tar' > out.tar", stderr_ok=True)
    err = p.stderr.decode().splitlines()
    assert len(err) == 1 and "-w 30 worker processes" in err[0] and err[0].endswith("starting 10"), err
    with tarfile.open(fileobj=io.BytesIO((tmp_path / "out.tar").read_bytes())) as t:
        assert sorted(t.getnames()) == [f"k{i:02d}.txt" for i in range(30)]

