"""tarcreate --tree against GNU tar on the same files: a tree of N files of
SIZE bytes in two directories (images/NAME.jpg, masks/NAME.png), page cache
warm, commands timed in turns.

    .venv/bin/python bench/bench_tree.py [--quick] [-n 10000] [--size 100000] [--repeat 3]

Rows: `tar -cf - DIR | cat` (the reference), `tarcreate --tree DIR | cat`
(the same files as one stream), the two-tree join of the pets layout, and
`tarcreate --tree ... | tarsplit -s 100MB` (into shards on disk), against
`tar -cf - DIR | tarsplit` as well, and tarcreate cutting the shards
itself (`-s 100MB`; shards on /dev/shm)."""

import argparse
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import DATA, compare, save, table, use_venv  # noqa: E402


def make_tree(root, n, size):
    if os.path.exists(os.path.join(root, ".done")):
        return
    shutil.rmtree(root, ignore_errors=True)
    for sub in ("images", "masks"):
        os.makedirs(os.path.join(root, sub))
    block = os.urandom(size)
    for i in range(n):
        sub, ext = ("images", "jpg") if i % 2 == 0 else ("masks", "png")
        with open(os.path.join(root, sub, f"{i // 2:06d}.{ext}"), "wb") as f:
            f.write(block[i % 97:] + block[:i % 97])
    open(os.path.join(root, ".done"), "w").close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=10000)
    ap.add_argument("--size", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="smoke run: 400 files, one turn")
    a = ap.parse_args()
    if a.quick:
        a.n, a.repeat = 400, 1
    use_venv()
    root = os.path.join(DATA, f"tree-{a.n}x{a.size}")
    make_tree(root, a.n, a.size)
    # shards on tmpfs: the disk of these machines writes 1 GB in 4-9 s, which would time the disk
    shards = os.path.join("/dev/shm" if os.path.isdir("/dev/shm") else DATA, f"tree-shards-{os.getpid()}")
    files = [os.path.join(d, f) for d in (os.path.join(root, "images"), os.path.join(root, "masks"))
             for f in os.listdir(d)]
    cmds = {
        "tar -cf - DIR | cat": f"cd {root} && tar -cf - images masks | cat > /dev/null",
        "tarcreate --tree DIR | cat": f"cd {root} && tarcreate --tree . | cat > /dev/null",
        "tarcreate --tree images --tree masks:mask --key base | cat":
            f"cd {root} && tarcreate --tree images --tree masks:mask --key base | cat > /dev/null",
        # writing 1 GB of files at all (any writer pays it): GNU tar and tarcreate into one file on tmpfs
        "tar -cf SHM/one.tar DIR": f"rm -rf {shards} && mkdir {shards} && cd {root} && "
                                   f"tar -cf {shards}/one.tar images masks",
        "tarcreate --tree ... -o SHM/one.tar": f"rm -rf {shards} && mkdir {shards} && cd {root} && "
                                               f"tarcreate --tree images --tree masks:mask --key base "
                                               f"-o {shards}/one.tar",
        "tar -cf - DIR | tarsplit -s 100MB": f"rm -rf {shards} && mkdir {shards} && cd {root} && "
                                             f"tar -cf - images masks | tarsplit -s 100MB -o {shards}/a-%06d.tar",
        "tarcreate --tree ... --key base | tarsplit -s 100MB":
            f"rm -rf {shards} && mkdir {shards} && cd {root} && tarcreate --tree images --tree masks:mask "
            f"--key base | tarsplit -s 100MB -o {shards}/b-%06d.tar",
        "tarcreate --tree ... --key base -s 100MB -o SHM/pets-%06d.tar":
            f"rm -rf {shards} && mkdir {shards} && cd {root} && tarcreate --tree images --tree masks:mask "
            f"--key base -s 100MB -o {shards}/c-%06d.tar",
    }
    res = compare(cmds, repeat=a.repeat, warm_paths=files)
    shutil.rmtree(shards, ignore_errors=True)
    total = a.n * a.size
    ref = res["tar -cf - DIR | cat"]["median"]
    rows = [(name.replace("|", "\\|"), f"{r['median']:.2f}", f"{total / r['median'] / 1e6:.0f}", f"{ref / r['median']:.2f}x",
             f"{r['peak_mb']:.0f}") for name, r in res.items()]
    print("## bench_tree.py — tarcreate --tree against tar -cf - DIR | cat\n")
    print(f"{a.n} files of {a.size} bytes in two directories ({total / 1e9:.2f} GB), median of {a.repeat}, "
          f"load {os.getloadavg()[0]:.1f}")
    print(table(rows, ["command", "s", "MB/s", "vs tar \\| cat", "peak MB"]))
    save("tree", {"n": a.n, "size": a.size, "results": res})


if __name__ == "__main__":
    main()
