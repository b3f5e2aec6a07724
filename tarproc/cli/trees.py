"""``tarcreate --tree``: trees of files (or bucket listings) to one stream of
samples; the options are tarcreate's, the work is in
:mod:`tarproc.sources.tree` and :mod:`tarproc.sinks.tree`."""

import os
import sys

from .base import Reporter, group_size_of

#: Samples named one by one in warnings with ``--missing skip`` (then a summary).
MISSING_SHOWN = 10
#: tarcreate's --key default (a table plan's key format): with --tree, the rule ``path``.
DEFAULT_KEY = "{index:09d}"


def _avoid(output):
    """``(st_dev, st_ino)`` of the files being written (a regular file on
    stdout, an existing ``-o`` file), which a tree must not hold."""
    import stat

    found = set()
    try:
        st = os.fstat(1)
        if stat.S_ISREG(st.st_mode):
            found.add((st.st_dev, st.st_ino))
    except OSError:
        pass
    if output and output != "-":
        try:
            st = os.stat(output)
            found.add((st.st_dev, st.st_ino))
        except (OSError, ValueError):
            pass
    return found


def _refuse_output_inside(trees, output):
    """An ``-o`` file inside a tree being read would be read by the next run
    (its temporary name is hidden, but the result is not): a usage error."""
    from ..errors import UsageError
    from ..runtime.schemes import scheme_of

    if not output or output == "-" or scheme_of(output) != "file":
        return
    out = os.path.realpath(output)
    for tree in trees:
        if tree.remote:
            continue
        root = os.path.realpath(tree.root)
        if out.startswith(root.rstrip("/") + "/"):
            raise UsageError(f"-o {output}: the output is inside the tree {tree.root} being read "
                             f"(write it elsewhere)")


def _dry_run(listing, checked, require, missing):
    """The samples as a table plan on stdout (``__key__`` and an ``@FIELD``
    column per field, cells the paths): read by ``tarcreate PLAN``."""
    import csv
    import io

    from ..sources.tree import tree_samples

    buf = io.StringIO()
    w = csv.writer(buf, delimiter="\t", lineterminator="\n")
    w.writerow(["__key__"] + ["@" + f for f in checked.fields])
    col = {f: i for i, f in enumerate(checked.fields)}
    out = sys.stdout.buffer
    for sample in tree_samples(listing, require, missing):
        row = [""] * len(col)
        for field, index, size, rel in sample.files:
            row[col[field]] = listing.trees[index].path(rel)
        w.writerow([sample.key] + row)
        if buf.tell() > 1 << 16:
            out.write(buf.getvalue().encode("utf-8", "surrogateescape"))
            buf.seek(0)
            buf.truncate()
    out.write(buf.getvalue().encode("utf-8", "surrogateescape"))
    out.flush()


def main_trees(args, prog):
    from ..errors import UsageError
    from ..sinks.tree import write_tree
    from ..sources.tree import check_samples, key_rule, list_trees, parse_tree, tree_samples

    if args.plan != "-":
        raise UsageError("give a plan or --tree, not both")
    if args.dir is not None or args.delim is not None or args.plan_format != "auto":
        raise UsageError("-C, -f and --plan-format go with a plan, not with --tree")
    if (args.max_size is not None or args.max_count is not None) and args.output == "-" and not args.dry_run:
        raise UsageError("-s and -n write shards: give -o a name pattern, e.g. -o 'pets-%06d.tar'")
    rep = Reporter(prog, args.verbose, args.quiet, args.progress, unit="B")
    trees = [parse_tree(t) for t in args.tree]
    rule = key_rule("path" if args.key == DEFAULT_KEY else args.key)
    require = [f.strip().lower() for f in (args.require or "").split(",") if f.strip()]
    if not args.dry_run:
        _refuse_output_inside(trees, args.output)
    reasons = {"hidden": "hidden", "noext": "no extension", "nomatch": "not matched by --key",
               "dirlink": "link to a directory", "special": "special file"}
    listing = list_trees(trees, rule, max_plan=args.settings.max_plan,
                         avoid=() if args.dry_run else _avoid(args.output),
                         on_skip=(lambda reason, path: rep.info(f"left out {path}: {reasons[reason]}"))
                         if args.verbose else None, settings=args.settings)
    shown = [0]

    def on_missing(key, lacking):
        shown[0] += 1
        if args.missing == "skip" and shown[0] <= MISSING_SHOWN:
            rep.warn(f"sample {key}: missing {', '.join(lacking)}: left out")

    checked = check_samples(listing, require, args.missing, on_missing)
    for line in listing.skipped.lines():  # (after the checks: a refused tree ends in its one error line)
        rep.warn(line)
    if checked.incomplete:
        verb = "left out" if args.missing == "skip" else "written"
        rep.warn(f"{checked.incomplete:,} samples missing one of {', '.join(require)} {verb}")
    if args.dry_run:
        _dry_run(listing, checked, require, args.missing)
        rep.info(f"{checked.samples:,} samples, {checked.files:,} files (dry run: nothing read)")
        return 0
    if not checked.samples:
        rep.warn("the trees make no samples (writing an empty archive)")  # (a mistyped prefix, often)
    rep.bar.total = checked.bytes
    done = [0]

    def on_part(part, size):
        done[0] += size
        rep.info(f"{part.name} ({size} bytes) from {part.where}")
        rep.bar.update(done[0])

    if args.max_size is not None or args.max_count is not None:
        from ..sinks.tree import split_tree
        from .base import parse_size

        max_size = parse_size(args.max_size) if args.max_size not in (None, "0") else None
        shards = 0
        for shard in split_tree(listing, tree_samples(listing, require, args.missing), args.output,
                                max_size=max_size, max_count=args.max_count, parallel=args.parallel or 1,
                                group_size=group_size_of(args), settings=args.settings,
                                retries=args.settings.retries,
                                on_part=on_part if rep.progress or args.verbose else None):
            shards += 1
            rep.info(f"{shard.name}: {shard.samples:,} samples, {shard.bytes:,} bytes")
        rep.bar.clear()
        rep.info(f"{checked.samples:,} samples in {shards:,} shards")
        return 0
    n, members, nbytes = write_tree(listing, tree_samples(listing, require, args.missing), args.output,
                                    parallel=args.parallel or 1, group_size=group_size_of(args),
                                    settings=args.settings, retries=args.settings.retries,
                                    on_part=on_part if rep.progress or args.verbose else None)
    rep.bar.clear()
    rep.info(f"{n:,} samples, {members:,} members, {nbytes:,} bytes written")
    return 0
