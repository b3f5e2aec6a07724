"""One rule for the directory of every output file, in every command that
writes one (docs/commit.md): a missing directory is refused before any
input is read (one usage line, exit 2) and never made; only the
directories a shard-name pattern's placeholders make below its written part
are created (tarsplit)."""

import importlib
import os
import subprocess

import pytest

# the input a command would read: touching "read" tells that it was read
IN = "'pipe:touch read; cat in.tar'"

# every option that names an output file, in every command that has one
WRITERS = {
    "tarcat -o": f"tarcat {IN} -o OUT/x.tar",
    "tarpcat -o": f"tarpcat {IN} -o OUT/x.tar",
    "tarsort -o": f"tarsort {IN} -o OUT/x.tar",
    "tarproc -o": f"tarproc -c true {IN} -o OUT/x.tar",
    "tarproc --failed-keys": f"tarproc -c true {IN} --failed-keys OUT/k.txt -o x.tar",
    "tarjoin -o": f"tarjoin {IN} in.tar -o OUT/x.tar",
    "tarmix -o": "tarmix mix.json -o OUT/x.tar",
    "tarsplit -o": f"tarsplit -n 2 {IN} -o OUT/train",
    "tarsplit -o pattern": f"tarsplit -n 2 {IN} -o 'OUT/{{shard}}/p.tar'",
    "tarsplit --manifest": f"tarsplit -n 2 {IN} -o p --manifest OUT/m.json",
    "tarsplit --index": f"tarsplit -n 2 {IN} -o p --index OUT/i.json",
    "tarindex -o": "tarindex in.tar -o OUT/i.json",
    "tarindex --offsets": "tarindex in.tar -o i.json --offsets OUT/i.offsets",
    "tarshow --grid": f"tarshow --grid OUT/g.png {IN}",
    "tarfirst -o": f"tarfirst {IN} -o OUT/x.txt",
    "lines2tar -o": "lines2tar 'pipe:touch read; seq 3' -o OUT/x.tar",
    "tarcreate -o": "tarcreate plan.txt -o OUT/x.tar",
    "tarreshard -o": f"tarreshard -n 2 {IN} -o 'OUT/%06d.tar'",
}


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    d = tmp_path_factory.mktemp("outdirs")
    subprocess.run("seq 1 4 | lines2tar > in.tar; echo '{\"sources\": [{\"shards\": \"in.tar\"}]}' > mix.json;"
                   "echo 'a.txt text:hello' > plan.txt", shell=True, cwd=d, check=True)
    return d


@pytest.mark.parametrize("name", sorted(WRITERS))
def test_a_missing_output_directory_is_refused_before_reading(inputs, name):
    before = sorted(os.listdir(inputs))
    for where in ["nodir/sub"] + ([f"{inputs}/nonexistent/dir"] if name.startswith("tarsplit -o") else []):
        # (`tarsplit -o /nonexistent/dir/train` made /nonexistent/dir)
        p = subprocess.run(["bash", "-c", WRITERS[name].replace("OUT", where)], cwd=inputs, capture_output=True,
                           stdin=subprocess.DEVNULL, timeout=60)
        err = p.stderr.decode()
        assert p.returncode == 2 and f"directory {where} does not exist" in err, err
        assert err.splitlines()[-1].startswith(f"{name.split()[0]}: error: "), err
        assert sorted(os.listdir(inputs)) == before  # nothing read ("read"), nothing made


def test_every_option_naming_an_output_file_checks_its_directory():
    import configparser

    from typer.main import get_command

    from conftest import ROOT

    config = configparser.ConfigParser()
    config.read(os.path.join(ROOT, "setup.cfg"))
    checked = set()
    for line in config["options.entry_points"]["console_scripts"].strip().splitlines():
        module = importlib.import_module(line.split("=")[1].strip().split(":")[0])
        for fn in [v for v in vars(module).values() if hasattr(v, "app") and v.__module__ == module.__name__]:
            for p in get_command(fn.app).params:
                if getattr(p.callback, "__name__", "") == "output_directory_exists":
                    checked.add(f"{module.__name__.rsplit('.', 1)[1]} {p.opts[0]}")
    # (tarcheck's --index, kujob's --log-dir, tarproc's -w name inputs and directories, not output files)
    assert sorted(checked) == sorted({" ".join(w.split()[:2]) for w in WRITERS}), sorted(checked)


def test_placeholders_make_directories_below_an_existing_root(sh, tmp_path):
    sh("seq 1 5 | lines2tar > in.tar; mkdir out; tarsplit -n 2 in.tar -o 'out/{shard}/p.tar'")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["0", "1", "2"]
