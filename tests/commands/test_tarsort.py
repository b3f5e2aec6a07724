"""tarsort: orders, stability, shuffle, bounded memory, temporary files."""

import io
import os
import random
import signal
import subprocess
import sys
import tarfile
import time

from helpers import read_tar, samples_of, tar_bytes


def grouped(data):
    """``[(key, {field: bytes})]`` in order, keeping repeated keys apart."""
    out = []
    for name, body in read_tar(data):
        slash = name.rfind("/")
        dot = name.find(".", slash + 1)
        key, field = name[:dot], name[dot + 1 :]
        if out and out[-1][0] == key and field not in out[-1][1]:
            out[-1][1][field] = body
        else:
            out.append((key, {field: body}))
    return out


def make_samples(n, seed=0, dup_every=0):
    r = random.Random(seed)
    out = []
    for i in range(n):
        key = f"k{r.randrange(10 ** 6):07d}"
        if dup_every and i % dup_every == 1:
            key = out[-1][0]  # a duplicate key (not adjacent after shuffling input below)
        out.append((key, {"num": str(r.randrange(-500, 500)).encode(), "flt": repr(r.uniform(-1e3, 1e3)).encode(),
                          "txt": r.choice([b"apple", b"banana", b"cherry", b"Date", b"\xc3\xa9clair"]),
                          "id": str(i).encode()}))
    r.shuffle(out)
    return out


def to_tar(samples):
    members = []
    for key, fields in samples:
        for f in sorted(fields):
            members.append((f"{key}.{f}", fields[f]))
    return tar_bytes(members)


def test_sort_by_key_and_duplicate_keys(sh, tmp_path):
    """Sorted by key; two samples with one key would come out side by side
    and read back as one sample: refused with one line, exit 2, no output
    file; --update keeps the last of each."""
    samples = make_samples(400, seed=1)
    assert len({k for k, _ in samples}) == 400
    got = grouped(sh("tarsort", input=to_tar(samples)).stdout)
    assert got == sorted(samples, key=lambda s: s[0])
    rev = grouped(sh("tarsort -r", input=to_tar(samples)).stdout)
    assert rev == sorted(samples, key=lambda s: s[0], reverse=True)
    dups = make_samples(400, seed=1, dup_every=10)
    (tmp_path / "dups.tar").write_bytes(to_tar(dups))
    for opts in ("", "--memory 20KB --tmpdir .", "-r"):
        p = sh(f"tarsort {opts} dups.tar -o out.tar", ok=False)
        assert p.returncode == 2, p.stderr
        lines = p.stderr.decode().splitlines()
        assert len(lines) == 1 and "same key" in lines[0] and "--update" in lines[0], lines
        assert not (tmp_path / "out.tar").exists()
        assert not [n for n in os.listdir(tmp_path) if n != "dups.tar"]
    got = grouped(sh("tarsort -u dups.tar").stdout)
    last = {}
    for key, fields in dups:
        last[key] = fields
    assert got == sorted(last.items())  # the last one read of each key
    assert len(got) == 400 - 40


def test_equal_sort_fields_keep_input_order(sh, tmp_path):
    """Stable: samples with equal sort fields keep their input order (also -r)."""
    samples = make_samples(400, seed=3)
    got = grouped(sh("tarsort -s txt", input=to_tar(samples)).stdout)
    assert got == sorted(samples, key=lambda s: s[1]["txt"])
    rev = grouped(sh("tarsort -s txt -r", input=to_tar(samples)).stdout)
    assert rev == sorted(samples, key=lambda s: s[1]["txt"], reverse=True)


def test_sort_by_field_types(sh, tmp_path):
    samples = make_samples(300, seed=2)
    data = to_tar(samples)
    assert grouped(sh("tarsort -s txt", input=data).stdout) == sorted(samples, key=lambda s: s[1]["txt"])
    assert grouped(sh("tarsort -s txt -S text -r", input=data).stdout) == sorted(
        samples, key=lambda s: s[1]["txt"], reverse=True)
    assert grouped(sh("tarsort -s num -S int", input=data).stdout) == sorted(samples, key=lambda s: int(s[1]["num"]))
    assert grouped(sh("tarsort --sortkey flt --sorttype float -r", input=data).stdout) == sorted(
        samples, key=lambda s: float(s[1]["flt"]), reverse=True)


def test_bad_sort_field_is_one_line_exit_2(sh, tmp_path):
    data = to_tar(make_samples(20, seed=3))
    p = sh("tarsort -s txt -S int", input=data, ok=False)
    assert p.returncode == 2 and len(p.stderr.splitlines()) == 1 and b"not an int" in p.stderr
    p = sh("tarsort -s nosuch", input=data, ok=False)
    assert p.returncode == 2 and b"nosuch" in p.stderr and len(p.stderr.splitlines()) == 1


def test_shuffle_reproducible_and_complete(sh, tmp_path):
    samples = make_samples(500, seed=4)
    data = to_tar(samples)
    a = sh("tarsort -S shuffle --seed 7", input=data).stdout
    b = sh("tarsort -S shuffle --seed 7 --memory 20KB", input=data).stdout  # spilled: same order
    c = sh("tarsort -S shuffle --seed 8", input=data).stdout
    assert a == b
    assert a != c
    assert sorted(grouped(a)) == sorted(samples) == sorted(grouped(c))
    assert grouped(a) != samples


def test_spilled_sort_equals_in_memory_sort_and_cleans_up(sh, tmp_path):
    samples = make_samples(3000, seed=5, dup_every=7)
    data = to_tar(samples)
    (tmp_path / "t").mkdir()
    small = sh("tarsort -v -s num -S int --memory 50KB --tmpdir t", input=data, stderr_ok=True)
    big = sh("tarsort -s num -S int", input=data).stdout
    assert small.stdout == big
    assert grouped(big) == sorted(samples, key=lambda s: int(s[1]["num"]))
    runs = int(small.stderr.decode().rsplit("spilled to disk:", 1)[1].split()[0])
    assert runs >= 20
    assert os.listdir(tmp_path / "t") == []


def test_ten_times_memory_sorted_with_bounded_peak(tmp_path):
    """An input 10x --memory: sorted right, peak RSS under budget + fixed overhead."""
    budget = 6 << 20
    r = random.Random(6)
    members = []
    keys = []
    for i, n in enumerate(r.sample(range(10 ** 9), 16000)):
        key = f"{n:09d}"
        keys.append(key)
        members.append((f"{key}.bin", r.randbytes(3000 + i % 1000)))
        members.append((f"{key}.cls", str(i).encode()))
    src = tmp_path / "in.tar"
    src.write_bytes(tar_bytes(members))
    assert src.stat().st_size > 10 * budget
    (tmp_path / "t").mkdir()
    out = tmp_path / "out.tar"

    def peak(cmd):
        proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        _, status, usage = os.wait4(proc.pid, 0)
        err = proc.stderr.read()
        proc.stderr.close()
        assert os.waitstatus_to_exitcode(status) == 0, err
        return usage.ru_maxrss * 1024

    base = peak(["tarcat", "in.tar", "-o", "/dev/null"])  # the interpreter and I/O buffers
    rss = peak(["tarsort", "--memory", str(budget), "--tmpdir", "t", "in.tar", "-o", "out.tar"])
    assert rss < base + budget + (24 << 20), (rss >> 20, base >> 20)
    got = [name for name, _ in read_tar(out.read_bytes())]
    want = [name for name, _ in sorted(members, key=lambda m: m[0].split(".")[0])]
    assert got == want  # order, duplicates and stability
    assert dict(read_tar(out.read_bytes())) == dict(members)
    assert os.listdir(tmp_path / "t") == []


def _wait_for_runs(tdir, proc, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        for d in os.listdir(tdir):
            if d.startswith("tarsort-") and len(os.listdir(os.path.join(tdir, d))) >= 2:
                return True
        if proc.poll() is not None:
            return False
        time.sleep(0.05)
    return False


def test_temporary_files_removed_on_sigterm_ctrl_c_and_failure(sh, tmp_path):
    gen = tmp_path / "gen.py"
    gen.write_text(
        "import sys, tarfile, io, time\n"
        "tf = tarfile.open(fileobj=sys.stdout.buffer, mode='w|')\n"
        "for i in range(4000):\n"
        "    info = tarfile.TarInfo(f'{(i * 7919) % 4000:06d}.bin'); data = b'x' * 2000; info.size = len(data)\n"
        "    tf.addfile(info, io.BytesIO(data))\n"
        "sys.stdout.flush(); time.sleep(60)\n"
    )
    tdir = tmp_path / "t"
    tdir.mkdir()
    for sig, code in ((signal.SIGTERM, 143), (signal.SIGINT, 130)):
        producer = subprocess.Popen([sys.executable, str(gen)], stdout=subprocess.PIPE)
        sort = subprocess.Popen(["tarsort", "--memory", "100KB", "--tmpdir", str(tdir), "-o", "/dev/null"],
                                stdin=producer.stdout, stderr=subprocess.PIPE)
        producer.stdout.close()
        try:
            assert _wait_for_runs(tdir, sort), "no sort runs appeared"
            sort.send_signal(sig)
            assert sort.wait(timeout=30) == code
        finally:
            producer.kill()
            producer.wait()
            sort.stderr.close()
        assert os.listdir(tdir) == []
    # a failure after runs were spilled: the last sample has no sort field
    members = [(f"{i:05d}.num", str(i).encode()) for i in range(3000)] + [("zzz.other", b"1")]
    p = sh("tarsort -s num -S int --memory 30KB --tmpdir t", input=tar_bytes(members), ok=False)
    assert p.returncode == 2 and b"zzz" in p.stderr
    assert os.listdir(tdir) == []


def test_samples_byte_identical_and_help(sh, tmp_path):
    members = [("b/x.jpg", bytes(range(256)) * 3), ("b/x.json", b"{}"), ("a/y.seg.png", b"\0" * 600),
               ("a/y.txt", "é".encode())]
    out = sh("tarsort", input=tar_bytes(members)).stdout
    assert read_tar(out) == sorted(members)
    assert samples_of(out)["a/y"]["seg.png"] == b"\0" * 600
    assert b"examples:" in sh("tarsort --help").stdout


def test_a_sample_scattered_in_its_input_comes_back_whole(sh, tmp_path):
    """Members of one key apart in the input (a tar of a directory):
    sorted, they are one sample again, read back by tarfile and webdataset;
    tarcat joining two shards whose boundary sample has different fields
    writes them side by side too."""
    import webdataset as wds

    (tmp_path / "in.tar").write_bytes(tar_bytes([("b.cls", b"1"), ("a.cls", b"0"), ("b.txt", b"B"),
                                                 ("a.txt", b"A")]))
    sh("tarsort in.tar -o out.tar")
    assert grouped((tmp_path / "out.tar").read_bytes()) == [("a", {"cls": b"0", "txt": b"A"}),
                                                            ("b", {"cls": b"1", "txt": b"B"})]
    got = [(s["__key__"], s["cls"], s["txt"]) for s in wds.WebDataset(str(tmp_path / "out.tar"), shardshuffle=False)]
    assert got == [("a", b"0", b"A"), ("b", b"1", b"B")]
    (tmp_path / "x.tar").write_bytes(tar_bytes([("k.jpg", b"J")]))
    (tmp_path / "y.tar").write_bytes(tar_bytes([("k.cls", b"7")]))
    sh("tarcat x.tar y.tar -o xy.tar")
    assert grouped((tmp_path / "xy.tar").read_bytes()) == [("k", {"jpg": b"J", "cls": b"7"})]


def tar_of(members):
    return tar_bytes(members, format=tarfile.GNU_FORMAT)


def run(cmd, cwd, input=None, **kw):
    return subprocess.run(cmd, cwd=cwd, input=input, capture_output=True, timeout=60, **kw)


def raw_names(data):
    with tarfile.open(fileobj=io.BytesIO(data), encoding="utf-8", errors="surrogateescape") as tf:
        return [m.name.encode("utf-8", "surrogateescape") for m in tf]


def test_tarsort_text_order_is_byte_order_for_names_that_are_not_utf8(tmp_path):
    # b"\xff" (not UTF-8) came out before U+E000 (bytes ee 80 80): lone
    # surrogates compare as U+DCxx code points, not as the bytes they are.
    names = ["\udcff.txt", "\ue000.txt", "z.txt", "\udc80a.txt", "\U0001f600.txt", "a\udcfe.txt"]
    data = tar_of([(n, n.encode("utf-8", "surrogateescape")) for n in names])
    want = sorted(n.encode("utf-8", "surrogateescape") for n in names)
    for memory in ("512MB", "1"):  # in memory, and one spilled run per sample
        p = run(["tarsort", "--memory", memory, "--tmpdir", str(tmp_path)], tmp_path, data)
        assert p.returncode == 0, p.stderr
        assert raw_names(p.stdout) == want
        p = run(["tarsort", "-r", "--memory", memory, "--tmpdir", str(tmp_path)], tmp_path, data)
        assert raw_names(p.stdout) == want[::-1]
    assert os.listdir(tmp_path) == []


def test_tarsort_float_nan_sorts_first_and_does_not_depend_on_memory(tmp_path):
    # NaN compares false with everything: the output was not sorted, and
    # differed between an in-memory and a spilled sort of the same input.
    values = [b"3", b"nan", b"1", b"-inf", b"2", b"NaN", b"0", b"inf", b"-1e3"]
    data = tar_of([(f"s{i:02d}.v", v) for i, v in enumerate(values)])
    outs = []
    for extra in ([], ["--memory", "1"], ["--memory", "300"]):
        p = run(["tarsort", "-s", "v", "-S", "float", "--tmpdir", str(tmp_path)] + extra, tmp_path, data)
        assert p.returncode == 0, p.stderr
        outs.append(p.stdout)
    assert outs[0] == outs[1] == outs[2]
    got = [body for _, body in read_tar(outs[0])]
    assert got == [b"nan", b"NaN", b"-inf", b"-1e3", b"0", b"1", b"2", b"3", b"inf"]
    p = run(["tarsort", "-s", "v", "-S", "float", "-r", "--memory", "1", "--tmpdir", str(tmp_path)], tmp_path, data)
    assert [body for _, body in read_tar(p.stdout)] == [b"inf", b"3", b"2", b"1", b"0", b"-1e3", b"-inf",
                                                         b"nan", b"NaN"]
    assert os.listdir(tmp_path) == []


def test_tarsort_int_or_float_of_a_key_or_a_long_number_is_one_clear_line(tmp_path):
    # -S int/float of __key__ (a str) that is not a number was an "internal
    # error: TypeError: string argument without an encoding"; a number of more
    # than 4300 digits (Python's int limit) was "is not an int".
    data = tar_bytes([("b-1.n", b"1"), ("a-2.n", b"9" * 5000)])
    for cmd, want in ((["-s", "__key__", "-S", "int"], "sample 'b-1': field '__key__' is not an int: 'b-1'"),
                      (["-s", "__key__", "-S", "float"], "sample 'b-1': field '__key__' is not a float: 'b-1'"),
                      (["-s", "n", "-S", "int"], "sample 'a-2': field 'n' is an int of more than 4300 digits")):
        p = run(["tarsort"] + cmd, tmp_path, data)
        err = p.stderr.decode()
        assert p.returncode == 2 and p.stdout == b"", err
        assert len(err.splitlines()) == 1 and want in err, err


# Measured by a small parent: a child forked from the (big) test process
# inherits its peak RSS in ru_maxrss.
PEAK = ("import os, subprocess, sys; p = subprocess.Popen(sys.argv[1:], stderr=subprocess.DEVNULL); "
        "_, st, ru = os.wait4(p.pid, 0); sys.stderr.write(f'{os.waitstatus_to_exitcode(st)} {ru.ru_maxrss}')")


def peak(cmd, cwd, input=None):
    """``(peak RSS in bytes, stdout)`` of a command that must succeed."""
    p = run([sys.executable, "-c", PEAK] + cmd, cwd, input)
    code, kb = p.stderr.decode().split()
    assert code == "0", p.stderr
    return int(kb) * 1024, p.stdout


