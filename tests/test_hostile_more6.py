"""Adversarial review, eighth pass: kujob (a shard that leaves a process
behind, a --done-if without {}, a Slurm task line), tarcreate (plan lines,
names that are directories, pipe: commands under signals) and tarsplit
(sizes at the edge of a float).  Every command runs installed, as a
subprocess; outputs are read back with Python's tarfile and GNU tar.  Each
test failed before the fix it comes with."""

import io
import os
import signal
import subprocess
import tarfile
import time

import pytest

from helpers import kill_left, one_line, processes_with, unique_sleep, wait_for


def tar_of(members):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tf:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def run(cmd, cwd, timeout=60, **kw):
    return subprocess.run(["bash", "-c", cmd], cwd=cwd, capture_output=True, timeout=timeout, **kw)


def members(path):
    with tarfile.open(path) as tf:
        return [(m.name, tf.extractfile(m).read()) for m in tf]


# ------------------------------------------------------------------ kujob


def test_kujob_shard_leaving_a_process_behind_does_not_hold_the_run(tmp_path):
    """A shard whose command starts a background process and exits (`cmd &`,
    a helper daemon that keeps stdout) held kujob until that process ended:
    kujob read the shard's output to its end, which never came.  As in a pod
    or a Slurm task, the shard now ends when its command exits; what it left
    in its process group is terminated and kujob goes on."""
    marker = unique_sleep()
    t0 = time.monotonic()
    try:
        p = run(f"kujob -s '{{0..1}}' -j 2 -- sh -c '{marker} & echo started {{}}'", tmp_path, timeout=60)
        took = time.monotonic() - t0
        assert p.returncode == 0, p.stderr
        err = p.stderr.decode()
        assert "[0] started 0" in err and "[1] started 1" in err, err
        assert took < 15, f"kujob waited {took:.0f} s for the shards' background processes"
        assert wait_for(lambda: not processes_with(marker), 10), "left-behind processes still running"
    finally:
        kill_left(marker)


def test_kujob_output_after_the_command_exits_is_kept_whole(tmp_path):
    """The shard's last output is not lost when its command ends: a line
    written without a newline just before exit, and a long last line."""
    p = run("kujob -s '{a,b}' -- sh -c 'head -c 70000 /dev/zero | tr \"\\0\" x; printf \"\\ntail {}\"'", tmp_path)
    assert p.returncode == 0, p.stderr
    err = p.stderr.decode().splitlines()
    for i in "ab":
        mine = [line for line in err if line.startswith(f"[{i}] ")]
        assert mine[-1] == f"[{i}] tail {i}", err
        assert [len(line) - 4 for line in mine] == [65536, 70000 - 65536, 6], err


@pytest.mark.parametrize("mode", [[], ["-n"], ["--k8s", "--image", "img:1"], ["--slurm"]])
def test_kujob_done_if_without_the_id_is_refused(mode, tmp_path):
    """`--done-if out.tar` (the {} forgotten) made every shard check the same
    file: the first shard to finish marked all the others done, and kujob
    exited 0 with most shards never run.  Now refused before anything runs."""
    p = run(f"kujob {' '.join(mode)} -s '{{0..3}}' --done-if out.tar -- sh -c 'echo {{}} >> out.tar'", tmp_path)
    assert p.returncode == 2, p.stderr
    assert "{}" in one_line(p) and "--done-if" in one_line(p)
    assert p.stdout == b"" and not (tmp_path / "out.tar").exists()
    # one shard id: one file, nothing ambiguous
    p = run("kujob -s 7 --done-if out.tar -- sh -c 'echo {} >> out.tar'", tmp_path)
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "out.tar").read_text() == "7\n"


def test_kujob_program_named_by_the_id(tmp_path):
    """`-- ./step-{}.sh` was refused before anything ran ("command not
    found: ./step-{}.sh": the check looked for ./step-x.sh).  Now a
    program per id runs; a missing one fails its shard only, naming it."""
    for i in "ab":
        (tmp_path / f"step-{i}.sh").write_text(f"#!/bin/sh\necho step {i}\n")
        (tmp_path / f"step-{i}.sh").chmod(0o755)
    p = run("kujob -s '{a,b}' -- ./step-{}.sh", tmp_path)
    assert p.returncode == 0, p.stderr
    assert sorted(p.stderr.decode().splitlines()) == ["[a] step a", "[b] step b"]
    p = run("kujob -s '{a,c}' -- ./step-{}.sh", tmp_path)
    assert p.returncode == 1
    err = p.stderr.decode()
    assert "[a] step a" in err and "cannot run ./step-c.sh" in err and err.endswith("shards failed: c\n"), err


def test_kujob_failed_shard_that_left_its_done_file_is_named(tmp_path):
    """A shell command that writes with a redirect (`> out-{}.txt`) creates
    its output at once: a shard that failed (or was terminated) left it, and
    a rerun with --done-if skipped that shard as done, silently.  The
    failure now says so (kujob never deletes it: it is the command's)."""
    p = run("kujob -s '{0..1}' --done-if out-{}.txt -- sh -c 'echo partial > out-{}.txt; exit {}'", tmp_path)
    assert p.returncode == 1
    err = p.stderr.decode().splitlines()
    assert err[-3:] == ["kujob: [1] failed (exit status 1)",
                        "kujob: [1] warning: out-1.txt exists although the shard failed: a rerun with --done-if "
                        "would skip it; remove it",
                        "kujob: 1 of 2 shards failed: 1"], err
    assert (tmp_path / "out-1.txt").exists()


def test_slurm_task_keeps_a_literal_dollar_argument(tmp_path):
    """The task line of the sbatch script expanded ANY argument that read
    `$SLURM_ARRAY_TASK_ID`, the command's own included: the same kujob
    command printed the literal text locally and a number on Slurm.  Only
    kujob's own --index is expanded now.  (The script runs under bash with
    the variables sbatch would set.)"""
    p = run("kujob --slurm --log-dir logs -s '{a,b}' -- echo '$SLURM_ARRAY_TASK_ID' {}", tmp_path)
    assert p.returncode == 0, p.stderr
    (tmp_path / "job.sh").write_bytes(p.stdout)
    local = run("kujob -s '{a,b}' -- echo '$SLURM_ARRAY_TASK_ID' {}", tmp_path)
    assert "[b] $SLURM_ARRAY_TASK_ID b" in local.stderr.decode()
    task = run("bash job.sh", tmp_path, env={**os.environ, "SLURM_ARRAY_TASK_ID": "1", "SLURM_ARRAY_JOB_ID": "9"})
    assert task.returncode == 0, task.stderr
    assert "[b] $SLURM_ARRAY_TASK_ID b" in task.stderr.decode(), task.stderr
    assert (tmp_path / "logs").is_dir()


# ------------------------------------------------------------------ tarcreate


def test_tarcreate_plan_lines_end_only_at_newlines(tmp_path):
    """Plans were cut into lines by str.splitlines(), which also ends a line
    at U+2028, U+0085, form feed, vertical tab and \\x1c-\\x1e: a file whose
    name holds U+2028 was 'not found' (line plan) or 'N columns, the header
    has M' (table), and a `text:` value lost everything after a form feed."""
    weird = "photo\u2028one\u0085x.jpg"
    (tmp_path / weird).write_bytes(b"JPEG")
    (tmp_path / "plan.txt").write_text(f"0.jpg {weird}\n0.txt text:a\x0cb\x0bc\u2028d\n1.txt text:two\n")
    p = run("tarcreate plan.txt -o lines.tar", tmp_path)
    assert p.returncode == 0, p.stderr
    assert members(tmp_path / "lines.tar") == [("0.jpg", b"JPEG"), ("0.txt", "a\x0cb\x0bc\u2028d".encode()),
                                               ("1.txt", b"two")]
    (tmp_path / "plan.tsv").write_text(f"__key__\t@jpg\tcls\nk0\t{weird}\t3\nk1\t{weird}\t4\u2028x\n")
    p = run("tarcreate plan.tsv -o table.tar", tmp_path)
    assert p.returncode == 0, p.stderr
    assert members(tmp_path / "table.tar") == [("k0.cls", b"3"), ("k0.jpg", b"JPEG"),
                                               ("k1.cls", "4\u2028x".encode()), ("k1.jpg", b"JPEG")]


@pytest.mark.parametrize("name", ["dir/", "a.txt/", "x/.", "."])
def test_tarcreate_refuses_a_member_name_that_is_a_directory(name, tmp_path):
    """`dir/ text:hi` wrote a regular-file member named `dir/` with data:
    GNU tar lists it as a directory and fails extracting (`Skipping to next
    header`, exit 2), bsdtar calls the archive damaged.  A member name must
    end in a file name; such names are refused, naming the line."""
    (tmp_path / "plan.txt").write_text(f"0.txt text:ok\n{name} text:hello world\n")
    p = run("tarcreate plan.txt -o out.tar", tmp_path)
    assert p.returncode == 2, p.stderr
    assert "plan.txt:2" in one_line(p)
    assert sorted(os.listdir(tmp_path)) == ["plan.txt"]


def test_tarcreate_output_naming_the_plan_is_refused(tmp_path):
    """`tarcreate plan.txt -o plan.txt` replaced the plan with the tar, exit
    0 (as lines2tar and tarmix did before pass 4).  A file of the plan may
    still be the output: it is read before the new one replaces it."""
    (tmp_path / "plan.txt").write_text("0.txt text:hi\n")
    p = run("tarcreate plan.txt -o ./plan.txt", tmp_path)
    assert p.returncode == 2, p.stderr
    assert "plan.txt: is also the output" in one_line(p)
    assert (tmp_path / "plan.txt").read_text() == "0.txt text:hi\n"
    (tmp_path / "p2.txt").write_text("0.tar old.tar\n1.txt text:new\n")
    (tmp_path / "old.tar").write_bytes(b"old bytes")
    p = run("tarcreate p2.txt -o old.tar", tmp_path)
    assert p.returncode == 0, p.stderr
    assert members(tmp_path / "old.tar") == [("0.tar", b"old bytes"), ("1.txt", b"new")]


def test_tarcreate_terminated_leaves_no_pipe_command_running(tmp_path):
    """SIGTERM while a `pipe:` command ran killed only its shell: the
    command's own children (here a sleep) went on running, orphaned."""
    marker = unique_sleep()
    (tmp_path / "plan.txt").write_text(f"0.txt text:a\n1.txt pipe:{marker}; echo late\n")
    proc = subprocess.Popen(["tarcreate", "plan.txt", "-o", "out.tar"], cwd=tmp_path, stderr=subprocess.PIPE)
    try:
        assert wait_for(lambda: processes_with(marker))
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 143
        assert wait_for(lambda: not processes_with(marker), 10), "the pipe: command's children still run"
        assert sorted(os.listdir(tmp_path)) == ["plan.txt"]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        kill_left(marker)


# ------------------------------------------------------------------ tarsplit


def test_tarsplit_terminated_in_a_post_command_leaves_none_of_it_running(tmp_path):
    """SIGTERM while a -p command ran killed only its shell: the command's
    children (an upload, here a sleep) went on, orphaned."""
    marker = unique_sleep()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tf:
        for i in range(30):
            info = tarfile.TarInfo(f"s{i:03d}.txt")
            info.size = 3
            tf.addfile(info, io.BytesIO(b"abc"))
    (tmp_path / "in.tar").write_bytes(buf.getvalue())
    proc = subprocess.Popen(["tarsplit", "-n", "10", "-o", "out-%03d.tar", "-p", f"{marker}; true", "in.tar"],
                            cwd=tmp_path, stderr=subprocess.PIPE)
    try:
        assert wait_for(lambda: processes_with(marker))
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 143
        assert wait_for(lambda: not processes_with(marker), 10), "the post command's children still run"
        assert sorted(os.listdir(tmp_path)) == ["in.tar", "out-000.tar"]  # committed before its post command
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        kill_left(marker)


def small_tar(n, prefix="s"):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tf:
        for i in range(n):
            data = f"{prefix} {i}".encode()
            info = tarfile.TarInfo(f"{prefix}{i:03d}.txt")
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@pytest.mark.parametrize("args, victim", [
    ("-n 10 --start 1 -o data-%d.tar data-0.tar data-1.tar", "data-1.tar"),  # input 1 would be replaced unread
    ("-n 10 -o data-%d.tar data-0.tar", "data-0.tar"),
    ("--shards 2 --total 40 --start 1 -o data-{shard}.tar data-0.tar data-1.tar", "data-1.tar"),
    ("--fractions a=0.5,b=0.5 -o data-{split}-%d.tar data-0.tar data-1.tar data-a-0.tar", "data-a-0.tar"),
    ("-n 10 -o out --manifest data-0.tar data-0.tar", "data-0.tar"),
    ("-n 10 -o out --index data-1.tar data-0.tar data-1.tar", "data-1.tar"),
])
def test_tarsplit_never_replaces_an_input(args, victim, tmp_path):
    """`tarsplit -n 10 --start 1 -o 'data-%d.tar' data-0.tar data-1.tar`
    (resplitting in place) committed shard data-1.tar over the input
    data-1.tar before it was read: the run then read its own shard back,
    duplicated 10 samples, lost 20, exit 0.  `--manifest` or `--index` naming an input replaced it
    with JSON, exit 0.  Now refused (exit 2) before that input is touched."""
    for name, prefix in (("data-0.tar", "a"), ("data-1.tar", "b"), ("data-a-0.tar", "c")):
        (tmp_path / name).write_bytes(small_tar(20, prefix))
    before = (tmp_path / victim).read_bytes()
    p = run(f"tarsplit {args}", tmp_path)
    assert p.returncode == 2, p.stderr
    assert f"{victim}: is also" in one_line(p)
    assert (tmp_path / victim).read_bytes() == before


@pytest.mark.parametrize("size", ["1e400", "inf", "-inf", "infGiB"])
def test_tarsplit_size_beyond_a_float_is_a_usage_error(size, tmp_path):
    """`-s 1e400` (or `inf`) was an internal error (OverflowError)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tf:
        info = tarfile.TarInfo("a.txt")
        tf.addfile(info, io.BytesIO(b""))
    (tmp_path / "in.tar").write_bytes(buf.getvalue())
    p = run(f"tarsplit -s {size} -o out in.tar", tmp_path)
    assert p.returncode == 2
    assert "bad size" in one_line(p)
    assert sorted(os.listdir(tmp_path)) == ["in.tar"]


def test_tarcreate_plan_size_is_bounded(tmp_path):
    """A plan is checked whole before writing, so its size is bounded:
    ``tarcreate /dev/zero`` read until memory ran out."""
    p = subprocess.run(["tarcreate", "/dev/zero"], cwd=tmp_path, capture_output=True, timeout=60,
                       env={**os.environ, "TARPROC_MAX_PLAN": "100000"})
    assert p.returncode == 2 and p.stdout == b""
    assert p.stderr.decode() == ("tarcreate: /dev/zero: the plan is larger than 100,000 bytes (TARPROC_MAX_PLAN): "
                                 "it is checked whole before anything is written, so split it and join the parts "
                                 "with tarcat\n")


@pytest.mark.parametrize("cmd, what", [
    ("tarsplit -n 2 -o 'x-{shard:0999999999}.tar' in.tar", "bad shard name pattern"),
    ("tarsplit -n 2 -o 'x-%0999999999d.tar' in.tar", "bad shard name pattern"),
    ("tarsplit -n 2 -o 'x-{shard:0{index}}.tar' in.tar", "bad shard name pattern"),
    ("tarcat --rekey '{key:>9999999999}' in.tar", "--rekey"),
    ("printf 'a\\n' | lines2tar --keyformat '{:.99999}'", "--keyformat"),
])
def test_huge_widths_in_name_patterns_are_refused(tmp_path, cmd, what):
    """A width in a name pattern was honoured: ``{shard:0999999999}`` built
    gigabyte names for every probe of the pattern (24 GB, then the OOM
    killer); now one line, exit 2, before any work."""
    (tmp_path / "in.tar").write_bytes(tar_of([(f"{i}.txt", b"x") for i in range(5)]))
    p = run(f"ulimit -v 2000000; {cmd}", tmp_path, timeout=30)
    assert p.returncode == 2, p.stderr
    line = one_line(p)
    assert what in line and ("is more than a name can hold (4096)" in line or "nested fields" in line), line
    assert not any(n.startswith("x-") for n in os.listdir(tmp_path))


@pytest.mark.parametrize("name, hint", [("README", " (e.g. 'README.txt')"), ("d/.hidden", "")])
def test_tarcreate_refuses_members_no_reader_keeps(tmp_path, name, hint):
    """A member whose file name is not KEY.FIELD was written, and every
    reader (tarcat, webdataset) then skipped it: what we write must read back."""
    (tmp_path / "a.txt").write_text("hi\n")
    p = run(f"printf 'x.txt a.txt\\n{name} a.txt\\n' | tarcreate -o out.tar", tmp_path)
    assert p.returncode == 2
    assert one_line(p) == (f"tarcreate: stdin:2: refusing member name '{name}': its file name is not KEY.FIELD, "
                           f"so readers skip it{hint}")
    assert not (tmp_path / "out.tar").exists()
