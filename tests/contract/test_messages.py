"""What the commands say about what went wrong: one vocabulary for failed
and skipped samples; --map tracebacks with the user's frames only, in full
once per error; listed keys never found; binary stdout of a kujob command;
glob characters in a missing input name."""

import re
import tarfile


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
    p = sh("tarproc --map bad.py:f in.tar -o out.tar", ok=False)
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
    p = sh("tarproc --map g.py:g in.tar -o out.tar", ok=False)
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


def test_glob_characters_in_a_missing_name_are_explained(sh):
    lines_tar(sh, 1, "shard-0.tar")
    for cmd in ("tarcat 'shard-*.tar'", "tarpcat 'shard-?.tar'", "tar2tsv 'shard-[01].tar'"):
        p = sh(cmd, ok=False)
        err = p.stderr.decode()
        assert p.returncode == 2 and "cannot open" in err and "does not expand * ? [ ]" in err, err
        assert len(err.strip().splitlines()) == 1
    p = sh("tarcat nothere.tar", ok=False)
    assert p.returncode == 2 and "expand" not in p.stderr.decode()
