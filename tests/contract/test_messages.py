"""What the commands say about what went wrong: one vocabulary for failed
and skipped samples; --map tracebacks with the user's frames only, in full
once per error; listed keys never found; binary stdout of a kujob command;
glob characters in input names."""

import io
import json
import re
import tarfile

from helpers import jpeg_bytes, png_bytes, tar_bytes


def lines_tar(sh, n, name="in.tar"):
    sh(f"seq 1 {n} | lines2tar > {name}")


def test_failed_samples_are_failed_everywhere_and_skipped_means_left_out(sh, tmp_path):
    lines_tar(sh, 6)
    # samples 2 and 4 fail; sample 5's command removes its file: nothing to write (skipped)
    cmd = ('k=$(cat sample.__key__); case $k in *2|*4) exit 3;; *5) rm sample.txt;; esac')
    p = sh(f"tarproc -v -c '{cmd}' --max-failures 2 in.tar -o out.tar", stderr_ok=True)
    err = p.stderr.decode()
    failed = [line for line in err.splitlines() if "exit status 3" in line]
    assert len(failed) == 2 and all(line.endswith("(failed: not written)") for line in failed), err
    assert "(skipped)" not in err
    assert "samples read 6, written 3, skipped 1, failed 2" in err
    with tarfile.open(tmp_path / "out.tar") as tf:
        assert sorted(m.name for m in tf) == ["000000000.txt", "000000001.txt", "000000003.txt"]


def test_map_traceback_has_the_users_frames_in_full_once(sh):
    lines_tar(sh, 5)
    sh("printf 'def helper(s):\\n    return s[\"nope\"]\\n\\ndef f(s):\\n    return helper(s)\\n' > bad.py")
    p = sh("tarproc --max-failures 99% --map bad.py:f in.tar -o out.tar", ok=False)
    assert p.returncode == 1
    err = p.stderr.decode()
    assert err.count("Traceback (most recent call last)") == 1, err
    assert 'bad.py", line 5, in f' in err and 'bad.py", line 2, in helper' in err
    assert "tarproc/" not in err.replace("tarproc: ", "")  # none of tarproc's own frames
    again = [line for line in err.splitlines() if "(traceback as for sample '000000000')" in line]
    assert len(again) == 4 and all("KeyError: 'nope'" in line for line in again)


def test_map_returning_a_wrong_type_is_one_line_per_sample(sh):
    lines_tar(sh, 20)
    sh("printf 'def g(s):\\n    return 3\\n' > g.py")
    p = sh("tarproc --max-failures 99% --map g.py:g in.tar -o out.tar", ok=False)
    err = p.stderr.decode()
    assert p.returncode == 1 and "Traceback" not in err and "  |" not in err
    per_sample = [line for line in err.splitlines() if "function returned int" in line]
    assert len(per_sample) == 20


def test_keys_never_found_are_counted(sh):
    lines_tar(sh, 5)
    sh("printf '000000001\\nzz\\nyy\\n000000003\\n' > keys.txt")
    p = sh("tarcat --keys keys.txt in.tar | tar tf -", stderr_ok=True)
    assert p.stdout == b"000000001.txt\n000000003.txt\n"
    assert re.search(r"warning: 2 of the 4 keys listed in keys.txt were never found \(e.g. 'yy', 'zz'\)",
                     p.stderr.decode()), p.stderr
    assert sh("tarcat -q --keys keys.txt in.tar | tar tf -").stderr == b""  # -q: no warning
    # stopped early (-c 1): the rest was never looked for, so nothing is said
    assert sh("tarcat -c 1 --keys keys.txt in.tar | tar tf -").stderr == b""
    assert sh("printf '000000001\\n' > all.txt; tarcat --keys all.txt in.tar | tar tf -").stderr == b""


def test_kujob_counts_binary_stdout_instead_of_printing_it(sh):
    lines_tar(sh, 5)
    p = sh("kujob -s '{1..2}' -j 1 -- sh -c 'echo start {}; tarcat in.tar; echo done >&2'", stderr_ok=True)
    err = p.stderr.decode()
    assert p.stdout == b""
    assert "[1] start 1" in err and "[2] done" in err
    assert "[1] 6144 bytes of binary output on stdout (forgot -o?)" in err
    assert "\0" not in err and "ustar" not in err


def test_local_names_are_globbed_as_the_shell_would(sh, tmp_path):
    # the README's line, as the user ran it: quoted, so tarproc expands it
    for i in (2, 0, 1):
        (tmp_path / f"shard-{i}.tar").write_bytes(tar_bytes([(f"s{i}-{j:09d}.txt", b"x") for j in range(2)]))
    (tmp_path / ".shard-9.tar").write_bytes((tmp_path / "shard-0.tar").read_bytes())  # * skips dot files
    sh("tarindex --checksum -p 4 'shard-*.tar' -o index.json && tarcheck --index index.json")
    index = json.loads((tmp_path / "index.json").read_text())
    assert [s["url"] for s in index["shardlist"]] == ["shard-0.tar", "shard-1.tar", "shard-2.tar"]
    for cmd in ("tarcat 'shard-*.tar'", "tarpcat -p 1 'shard-?.tar'", "tarcat 'shard-[0-2].tar'",
                "tarcat 'shard-{0,1}*.tar' shard-2.tar"):
        names = tarfile.open(fileobj=io.BytesIO(sh(cmd).stdout)).getnames()
        assert names == [f"s{i}-{j:09d}.txt" for i in range(3) for j in range(2)], (cmd, names)
    assert "s2-" in sh("tar2tsv -f txt 'shard-2*'").stdout.decode()
    # nothing matches: one line, exit 2, before anything is written
    for cmd in ("tarcat 'nope-*.tar' -o out.tar", "tarindex 'nope-?.tar' -o i.json", "tarcheck 'x[0-9].tar'"):
        p = sh(cmd, ok=False)
        err = p.stderr.decode()
        assert p.returncode == 2 and len(err.splitlines()) == 1, err
        assert err.endswith(": cannot open: no such file, and no file matches it as a pattern\n"), err
    assert not (tmp_path / "out.tar").exists()
    # a file of exactly that name wins; [*] matches a literal *, as in the shell
    (tmp_path / "odd*.tar").write_bytes((tmp_path / "shard-1.tar").read_bytes())
    (tmp_path / "odd-x.tar").write_bytes((tmp_path / "shard-2.tar").read_bytes())
    for cmd in ("tarcat 'odd*.tar'", "tarcat 'odd[*].tar'"):
        names = tarfile.open(fileobj=io.BytesIO(sh(cmd).stdout)).getnames()
        assert names == ["s1-000000000.txt", "s1-000000001.txt"], (cmd, names)
    # never expanded: names read from a list (data), output names
    (tmp_path / "list.txt").write_text("shard-*.tar\n")
    p = sh("tarcat -T list.txt", ok=False)
    err = p.stderr.decode()
    assert p.returncode == 2 and "cannot open" in err and "not in names read from a list" in err, err
    assert len(err.strip().splitlines()) == 1
    sh("tarcat shard-0.tar -o 'out-*.tar'")
    assert (tmp_path / "out-*.tar").exists()
    p = sh("tarcat nothere.tar", ok=False)
    assert p.returncode == 2 and "expand" not in p.stderr.decode()


def small_tar(n=4, ext="png"):
    return tar_bytes([m for i in range(n) for m in ((f"s{i}.{ext}", png_bytes(4, 4, seed=i)),
                                                    (f"s{i}.cls", str(i).encode()))])


def test_tables_and_previews_name_the_columns_no_sample_has(sh, tmp_path):
    (tmp_path / "in.tar").write_bytes(small_tar())
    p = sh("tar2tsv -f 'cls nofield' in.tar", stderr_ok=True)
    assert p.stdout.decode().splitlines()[1] == "s0\t0\t"
    assert p.stderr.decode().count("\n") == 1 and "no sample has 'nofield'" in p.stderr.decode()
    p = sh("tarshow -f 'jpg;gif cls' in.tar", stderr_ok=True)
    assert p.stderr.decode().count("\n") == 1 and "'jpg;gif'" in p.stderr.decode()
    p = sh("tarfirst -f nofield in.tar", ok=False)
    assert p.returncode == 1 and b"no sample matched" in p.stderr and b"cls, png" in p.stderr


def _zip_bytes():
    import zipfile

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("a.txt", "hello")
    return buf.getvalue()


NOT_TAR = {
    "PNG image data": lambda: png_bytes(64, 48),
    "JPEG image data": lambda: jpeg_bytes(64, 48),
    "GIF image data": lambda: b"GIF89a\x01\x00\x01\x00\x00\x00\x00;",
    "a PDF document": lambda: b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n1 0 obj\n<<>>\nendobj\n" * 20,
    "a ZIP archive": _zip_bytes,
    "a 7-Zip archive": lambda: b"7z\xbc\xaf\x27\x1c\x00\x04" + bytes(600),
    "a RAR archive": lambda: b"Rar!\x1a\x07\x01\x00" + bytes(40),
    "an ELF executable": lambda: open("/bin/true", "rb").read(),
    "an HTML document": lambda: b"<!DOCTYPE html>\n<html><body>404 Not Found</body></html>\n",
    "an XML document": lambda: b'<?xml version="1.0"?><Error><Code>NoSuchKey</Code></Error>\n' * 10,
    "JSON text": lambda: json.dumps({"error": "not found", "pad": "x" * 600}).encode(),
    "lz4 compressed data": lambda: b"\x04\x22\x4d\x18\x64\x40\xa7" + bytes(700),
    "Unix compress (.Z) data": lambda: b"\x1f\x9d\x90" + bytes(30),
    "text": lambda: b"just some words\n",
}


def test_not_a_tar_archive_says_what_it_looks_like(sh, tmp_path):
    for n, what in enumerate(sorted(NOT_TAR)):
        (tmp_path / f"thing{n}").write_bytes(NOT_TAR[what]())
    p = sh(f"for n in $(seq 0 {len(NOT_TAR) - 1}); do tarcat < thing$n > /dev/null; echo $? >&2; done", stderr_ok=True)
    lines = p.stderr.decode().splitlines()
    for n, what in enumerate(sorted(NOT_TAR)):
        err, rc = lines[2 * n: 2 * n + 2]
        assert rc == "2" and err.startswith(f"tarcat: stdin: offset 0: not a tar archive (looks like {what}"), err
    p = sh("tarcat thing0 > /dev/null", ok=False)  # the source is named, as for any damage
    assert p.returncode == 2 and p.stderr.decode().startswith("tarcat: thing0: offset 0: not a tar archive")


def test_damaged_tar_header_is_still_reported_as_damage(sh, tmp_path):
    data = bytearray(small_tar())
    data[148:156] = b"zzzzzzz\0"  # checksum field of a real ustar header
    (tmp_path / "bad.tar").write_bytes(bytes(data))
    p = sh("tarcat bad.tar > /dev/null", ok=False)
    assert p.returncode == 2 and b"not a tar archive (looks like" not in p.stderr and b"offset 0" in p.stderr
    # a PNG that comes after a good archive is not sniffed: the offset says where
    (tmp_path / "img.png").write_bytes(png_bytes(64, 48))
    p = sh("cat bad.tar img.png | tarcat -c 1 > /dev/null", ok=False)
    assert p.returncode == 2


def test_a_tar_cut_inside_its_first_header_is_not_called_text(sh, tmp_path):
    (tmp_path / "cut.tar").write_bytes(small_tar()[:100])
    p = sh("tarcat < cut.tar > /dev/null", ok=False)
    assert p.returncode == 2 and b"input ends inside a header (100 of 512 bytes)" in p.stderr
