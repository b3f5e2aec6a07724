"""tarreshard's shuffle leaves no order: 100,000 tiny key-sorted samples in
10 shards, shuffled; the rank correlation of input and output positions is
near 0 and every output shard draws from every input shard in proportion."""

import io
import tarfile

from tarproc.core.tario import TarWriter

N, SHARDS = 100_000, 10
#: chi-square with 9 degrees of freedom at 1%
CHI2_9_1PCT = 21.666


def test_shuffle_quality(sh, tmp_path):
    per = N // SHARDS
    for s in range(SHARDS):
        out = io.BytesIO()
        w = TarWriter(out)
        for i in range(s * per, (s + 1) * per):
            w.write(f"s{i:06d}.c", b"x")
        w.close()
        (tmp_path / f"in-{s}.tar").write_bytes(out.getvalue())
    sh(f"mkdir -p out && tarreshard --seed 11 -n {per} --buckets 2 -j 2 -o 'out/%06d.tar' 'in-{{0..{SHARDS - 1}}}.tar'", stderr_ok=True,
       timeout=300)
    outputs = []
    for k in range(SHARDS):
        with tarfile.open(tmp_path / f"out/{k:06d}.tar") as t:  # (an independent reader)
            outputs.append([int(m.name[1:7]) for m in t])
    ranks = [r for shard in outputs for r in shard]
    assert sorted(ranks) == list(range(N))  # every sample once
    # Spearman's rho between input rank and output position (both permutations of 0..N-1)
    mean = (N - 1) / 2
    var = sum((i - mean) ** 2 for i in range(N))
    rho = sum((i - mean) * (r - mean) for i, r in enumerate(ranks)) / var
    assert abs(rho) < 0.01, rho
    for k, shard in enumerate(outputs):
        counts = [0] * SHARDS
        for r in shard:
            counts[r // per] += 1
        expected = len(shard) / SHARDS
        chi2 = sum((c - expected) ** 2 / expected for c in counts)
        assert chi2 < CHI2_9_1PCT, (k, counts, chi2)
    # the order within each output shard is not the input order either
    assert all(shard != sorted(shard) for shard in outputs)
