#!/usr/bin/env python3
"""``tarreshard`` (map, plan, reduce, cut, copy on the local pool, a local
work directory) against ``tarsort -S shuffle`` of the same shard set on one
machine, and the peak memory of its largest task.

    .venv/bin/python bench/bench_reshard.py [--samples 200000] [--size 10000] [--shards 20] [-j 2] [--memory 512MB]

Data: ``--shards`` shards of ``--samples`` samples in all, each a ``.bin``
of ``--size`` random bytes and a ``.cls`` (the default: 2 GB, 200,000
samples), in ``bench/out/data/reshard-*``.  Timed in turns, in one run:

* ``tarreshard --seed 1 -n 10000 -j J --memory M --work DIR``;
* ``tarsort -S shuffle --seed 1 --memory M -o FILE`` (one stream, one process);
* ``tarsort -S shuffle ... | tarsplit -n 10000`` (the same shards as tarreshard writes).

Target: tarreshard within 2x of ``tarsort -S shuffle``; each task's peak
within ``--memory`` + 100 MB (the peak RSS of the largest process of the
run, from GNU time).  The load average before and after is printed: on a
shared 2-core machine the ratios are only as good as the cores left free.
"""

import argparse
import os
import random
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

import common  # noqa: E402

common.use_venv()


def load():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def make_data(d, samples, size, shards):
    """The shards, written once (kept between runs of the same shape)."""
    from tarproc.core.tario import TarWriter

    os.makedirs(d, exist_ok=True)
    done = os.path.join(d, ".complete")
    if os.path.exists(done):
        return
    r = random.Random(0)
    per = samples // shards
    for s in range(shards):
        with open(os.path.join(d, f"in-{s:04d}.tar"), "wb") as f:
            w = TarWriter(f)
            for i in range(s * per, (s + 1) * per):
                w.write(f"s{i:08d}.bin", r.randbytes(size))
                w.write(f"s{i:08d}.cls", str(i % 1000).encode())
            w.close()
    open(done, "w").close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=200000)
    ap.add_argument("--size", type=int, default=10000)
    ap.add_argument("--shards", type=int, default=20)
    ap.add_argument("-j", "--jobs", type=int, default=2)
    ap.add_argument("--memory", default="512MB")
    ap.add_argument("--repeat", type=int, default=1)
    a = ap.parse_args()
    data = os.path.join(common.DATA, f"reshard-{a.samples}-{a.size}-{a.shards}")
    make_data(data, a.samples, a.size, a.shards)
    scratch = os.path.join(common.OUT, "reshard-scratch")
    shutil.rmtree(scratch, ignore_errors=True)
    os.makedirs(os.path.join(scratch, "tmp"))
    ins = f"{data}/in-{{0000..{a.shards - 1:04d}}}.tar"
    tmp = os.path.join(scratch, "tmp")
    clean = f"rm -rf {scratch}/out {scratch}/work {scratch}/one.tar {scratch}/ref; "
    cmds = {
        "tarreshard": clean + f"tarreshard --seed 1 -n 10000 -j {a.jobs} --memory {a.memory} --tmpdir {tmp} "
                              f"--work {scratch}/work -o '{scratch}/out/%06d.tar' '{ins}'",
        "tarsort -S shuffle": clean + f"tarsort -S shuffle --seed 1 --memory {a.memory} --tmpdir {tmp} "
                                      f"'{ins}' -o {scratch}/one.tar",
        "tarsort | tarsplit": clean + f"mkdir -p {scratch}/ref && tarsort -S shuffle --seed 1 --memory {a.memory} "
                                      f"--tmpdir {tmp} '{ins}' | tarsplit -n 10000 -o '{scratch}/ref/%06d.tar'",
    }
    gb = a.samples * (a.size + 1536) / 1e9
    print(f"data: {a.shards} shards, {a.samples} samples of {a.size} bytes ({gb:.2f} GB of tar); "
          f"-j {a.jobs}, --memory {a.memory}; load before: {load()}", flush=True)
    res = common.compare(cmds, repeat=a.repeat)
    base = res["tarsort -S shuffle"]["median"]
    rows = [(name, f"{r['median']:.1f} s", f"{r['median'] / base:.2f}x", f"{r['peak_mb']:.0f} MB")
            for name, r in res.items()]
    print(common.table(rows, ["command", "wall", "vs tarsort -S shuffle", "peak RSS (largest process)"]))
    print(f"load after: {load()}")
    common.save("bench_reshard", {"args": vars(a), "results": res, "load_after": load()})
    shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
