"""Options across commands: one long option, one meaning; a single-value
option given twice is refused; every documented option exists and is
documented once; no --help example uses the GraphicsMagick form the README
warns about.

The commands' options are read from their click definitions (no hand-kept
list of what each command has): a new long option shared by two commands
must be entered in MEANINGS below, with the kind of value it takes.
"""

import importlib
import os
import re
import subprocess

import pytest

from conftest import ROOT

COMMANDS = ["tarcat", "tarpcat", "tarsplit", "tarsort", "tarshow", "tar2tsv", "tarfirst", "tarcheck", "tarcreate",
            "tarproc", "kujob", "tarserve", "lines2tar", "tar2json", "tarmix", "tarindex", "tarjoin"]

# long option -> (what it means in every command that has it, kind of value:
# "flag" or "value" or "values" (repeatable)).  The meaning is a sentence
# for the reader of this table; the kind and the parameter's name are checked.
MEANINGS = {
    "--blob-threshold": ("members of this size or more are spooled to a file", "value"),
    "--braceexpand": ("accepted for compatibility (patterns are always expanded)", "flag"),
    "--command": ("the shell command run in each sample's directory", "value"),
    "--count": ("stop after N samples", "value"),
    "--debug": ("show the Python traceback of an error", "flag"),
    "--eof": ("accepted for compatibility with the original (no effect)", "flag"),
    "--field": ("the fields taken (an alias of --fields)", "value"),
    "--fields": ("the fields: which to keep, show, extract, or name", "value"),
    "--filelist": ("read input URLs from a file", "value"),
    "--format": ("the output's format", "value"),
    "--hash": ("binary fields as their sha256 instead of their size", "flag"),
    "--install-completion": ("install shell completion", "flag"),
    "--show-completion": ("print the shell completion script", "flag"),
    "--map": ("a Python function applied to each sample", "value"),
    "--max-failures": ("failed samples allowed", "value"),
    "--memory": ("how much memory the work may use (a size)", "value"),
    "--name": ("the name of what the command makes (a Job, an index's dataset)", "value"),
    "--progress": ("a progress line on stderr", "flag"),
    "--no-progress": ("no progress line", "flag"),
    "--output": ("where the output goes", "value"),
    "--output-mode": ("file mode of the output", "value"),
    "--parallel": ("samples processed at once", "value"),
    "--quiet": ("less on stderr: no warnings", "flag"),
    "--rekey": ("new keys from a template", "value"),
    "--seed": ("the random seed", "value"),
    "--shuffle": ("shuffle through a buffer of N samples", "value"),
    "--skip": ("skip the first N samples", "value"),
    "--slice": ("keep samples by index", "value"),
    "--start-method": ("how worker processes start", "value"),
    "--strict": ("a shard without its end-of-archive marker is an error", "flag"),
    "--tmpdir": ("directory for temporary files", "value"),
    "--verbose": ("more on stderr: inputs, a summary", "flag"),
    "--version": ("print the version", "flag"),
    "--silent": ("tarshow: no text blocks (the original's; tarproc's old --silent is -q)", "flag"),
    # meanings that one command has and others must not take for something else
    "--keys": ("keep only the samples whose keys are listed in a file", "value"),
    "--on-bad-shard": ("what a damaged or unreadable shard does: fail, skip, partial", "value"),
    "--max-bad-shards": ("how many bad shards still exit 0", "value"),
    "--retries": ("resume a broken download up to N times in a row", "value"),
    "--group-size": ("compressed outputs: bytes of tar per independently decodable group (0: one stream)", "value"),
    "--index": ("write a tarindex index of what was written", "value"),
    "--shards": ("exactly N shards", "value"),
}


def click_commands():
    from typer.main import get_command

    for name in COMMANDS:
        mod = importlib.import_module(f"tarproc.cli.{name}")
        fn = next(v for v in vars(mod).values() if hasattr(v, "app") and getattr(v, "__module__", "") == mod.__name__)
        yield name, get_command(fn.app)


def options(cmd):
    """A command's options, without the hidden ones that only refuse an old
    name (base.replaced: ``*_replaced``, checked below)."""
    return [p for p in cmd.params if p.param_type_name == "option" and not p.name.endswith("_replaced")]


def kind(p):
    if p.is_flag or p.count:
        return "flag"
    return "values" if p.multiple else "value"


def test_a_long_option_means_one_thing_in_every_command():
    used = {}
    for name, cmd in click_commands():
        for p in options(cmd):
            for o in p.opts + p.secondary_opts:
                if o.startswith("--"):
                    used.setdefault(o, []).append((name, p))
    assert len(used) > 100  # the walk found the commands' options
    problems = []
    for o, where in sorted(used.items()):
        if len(where) > 1 and o not in MEANINGS:
            problems.append(f"{o} is used by {[n for n, _ in where]}: add its one meaning to MEANINGS")
        if o in MEANINGS:
            want = MEANINGS[o][1]
            for name, p in where:
                if kind(p) != want and not (want == "value" and kind(p) == "values"):
                    problems.append(f"{name} {o} takes {kind(p)}, elsewhere {want}")
            # one parameter name per option: the same concept in the code too
            # (typer names a parameter after its first long option)
            names = {p.name.rstrip("_") for _, p in where}
            if len(names) > 1 and o not in ("--field", "--fields", "--no-progress", "--progress"):
                problems.append(f"{o} is the parameter {sorted(names)} in different commands")
    assert not problems, "\n".join(problems)


def test_renamed_options_are_gone_where_they_meant_something_else():
    have = {name: {o for p in options(cmd) for o in p.opts + p.secondary_opts} for name, cmd in click_commands()}
    assert "--keys" not in have["tar2json"] and "-k" in have["tar2json"]  # -k is the original's
    assert "--keys" not in have["lines2tar"] and "--fields" in have["lines2tar"]
    assert "--command" not in have["tarsplit"] and "--post-delete" in have["tarsplit"]
    assert "--index" not in have["kujob"] and "--task-index" in have["kujob"]
    assert "--shards" not in have["kujob"] and "--ids" in have["kujob"]
    assert "--silent" not in have["tarproc"] and "--silent" in have["tarshow"]  # tarshow keeps the original's


@pytest.mark.parametrize("argv,new", [("tar2json --keys txt", "-k/--fields"), ("lines2tar --keys url", "-k/--fields"),
                                      ("tarsplit --command 'rm %s'", "-C/--post-delete"),
                                      ("tarproc --silent -c true", "-q/--quiet"),
                                      ("kujob --index 0 -s 0 -- tarcat", "--task-index"),
                                      ("kujob --shards 0 -- tarcat", "-s/--ids")])
def test_an_old_name_that_means_something_else_now_says_what_replaced_it(sh, argv, new):
    p = sh(f"seq 1 2 | lines2tar > in.tar; {argv} in.tar", ok=False)
    old = argv.split()[1]
    assert p.returncode == 2 and p.stdout == b""
    assert f"{old} is {new} in this command" in p.stderr.decode()


def single_value_option(cmd):
    for p in options(cmd):
        if kind(p) == "value" and not p.hidden and p.opts[0] not in ("--help",):
            return p.opts[-1], "x"
    raise AssertionError(cmd.name)


@pytest.mark.parametrize("name", COMMANDS)
def test_a_single_value_option_given_twice_is_refused(name, tmp_path):
    cmd = dict(click_commands())[name]
    opt, _ = single_value_option(cmd)
    argv = [name, opt, "1", opt, "2"] + (["--", "true"] if name == "kujob" else [])
    p = subprocess.run(argv, cwd=tmp_path, capture_output=True, stdin=subprocess.DEVNULL, timeout=60)
    assert p.returncode == 2, (argv, p.stderr)
    err = p.stderr.decode()
    assert err.endswith(" given more than once (it takes one value)\n") and len(err.splitlines()) == 1, err
    assert err.startswith(f"{name}: error: option ")
    assert p.stdout == b"" and os.listdir(tmp_path) == []


def test_tarproc_c_twice_does_not_run_the_second(sh):
    p = sh("lines2tar <<< a | tarproc -m -c 'cp sample.txt sample-0.txt' -c2", ok=False)
    assert p.returncode == 2 and p.stdout == b""
    assert b"-c/--command given more than once" in p.stderr


def test_repeatable_and_flag_options_still_repeat(sh):
    # flags and repeatable options are not single values: -v -v, --progress --no-progress
    p = sh("lines2tar <<< a | tarcat -v -v --progress --no-progress | tar tf -", stderr_ok=True)
    assert p.stdout == b"000000000.txt\n"
    p = sh("kujob -n -s '{0..1}' -s 7 -- echo {}")
    assert p.stdout.decode().split("\n")[:3] == ["echo 0", "echo 1", "echo 7"]


def doc_rows(name):
    with open(os.path.join(ROOT, "docs", f"{name}.md")) as f:
        return [line.split("|")[1] for line in f if line.startswith("| `-") or line.startswith("| `URL")]


@pytest.mark.parametrize("name", COMMANDS)
def test_docs_list_each_option_once_and_every_option(name):
    cmd = dict(click_commands())[name]
    with open(os.path.join(ROOT, "docs", f"{name}.md")) as f:
        doc = f.read()
    listed = {}
    for row in doc_rows(name):
        for o in re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", row):
            assert o not in listed, f"docs/{name}.md lists {o} in two rows"
            listed[o] = row
    exists = {o for p in options(cmd) for o in p.opts + p.secondary_opts}
    for o in listed:
        assert o in exists, f"docs/{name}.md lists {o}, which {name} does not have"
    for p in options(cmd):
        if p.hidden:
            continue
        for o in p.opts + p.secondary_opts:
            if o in ("--install-completion", "--show-completion"):
                continue
            assert re.search(r"(?<![\w-])" + re.escape(o) + r"(?![\w-])", doc), f"docs/{name}.md omits {o}"


@pytest.mark.parametrize("name", COMMANDS)
def test_help_examples_put_gm_options_before_the_files(name):
    p = subprocess.run([name, "--help"], capture_output=True, timeout=60)
    assert p.returncode == 0 and b"examples:" in p.stdout
    assert b"mogrify -size" not in p.stdout  # the README's warning: -size is a decoding hint, not a resize


def test_readme_short_flag_table_is_what_the_commands_do():
    # rows like: | `-s` | `--slice`: tar2tsv (the original's); `--shuffle`: tarpcat; ... |
    with open(os.path.join(ROOT, "README.md")) as f:
        rows = [line for line in f if re.match(r"\| `-[A-Za-z]` \| `--", line)]
    assert len(rows) >= 10
    short_of = {}
    for name, cmd in click_commands():
        for p in options(cmd):
            longs = [o for o in p.opts if o.startswith("--")]
            # a short-only alias (tarpcat -p, the original's -w) is named after the option it aliases
            long = longs[0] if longs else "--" + p.name.split("_")[0]
            for o in p.opts:
                if not o.startswith("--"):
                    short_of[(name, o)] = long
    checked = 0
    for row in rows:
        flag = re.match(r"\| `(-[A-Za-z])`", row).group(1)
        for long, names in re.findall(r"`(--[\w-]+)`: ([a-z0-9, ]+)", row):
            for name in (n.strip() for n in names.split(",")):
                if name in COMMANDS:
                    assert short_of.get((name, flag)) == long, f"README: {name} {flag} is {long}?"
                    checked += 1
    assert checked >= 25


def test_one_format_name_in_every_command(sh):
    # issue 40: `tar2tsv --format jsonl` but `tar2json -f jsonl` was refused (it said jsonlines)
    sh("seq 1 3 | lines2tar > in.tar")
    want = sh("tar2json -f jsonlines in.tar").stdout
    assert want.count(b"\n") == 3 and sh("tar2json -f jsonl in.tar").stdout == want
    tsv = sh("tar2tsv --format jsonl in.tar").stdout
    assert tsv.count(b"\n") == 3 and sh("tar2tsv --format jsonlines in.tar").stdout == tsv


@pytest.mark.parametrize("argv,hint", [("tarsort --shuffle", "-S shuffle"), ("tarsort --random", "-S shuffle"),
                                       ("tarsplit --shuffle", "tarsort -S shuffle")])
def test_an_unknown_option_a_user_may_try_says_what_to_use(sh, argv, hint):
    p = sh(f"seq 1 2 | lines2tar | {argv}", ok=False)
    err = p.stderr.decode().splitlines()
    assert p.returncode == 2 and len(err) == 2 and f"(did you mean {hint}" in err[1], err


@pytest.mark.parametrize("argv,why", [("--batch 8 -c true", "--batch applies to --map"),
                                      ("--start-method spawn -c true", "--start-method applies to --map"),
                                      ("--map-blobs blob -c true", "--map-blobs applies to --map"),
                                      ("--map m.py:f -b x", "-b/--base applies to commands"),
                                      ("--map m.py:f --interpreter sh", "--interpreter applies to commands")])
def test_tarproc_options_of_one_mode_are_refused_in_the_other(sh, argv, why):
    sh("printf 'def f(s):\\n    return s\\n' > m.py")
    p = sh(f"tarproc {argv} 'pipe:touch read; seq 1 2 | lines2tar'", ok=False)
    err = p.stderr.decode().splitlines()
    assert p.returncode == 2 and len(err) == 1 and err[0].startswith(f"tarproc: {why}"), err
