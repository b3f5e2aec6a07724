#!/usr/bin/env bash
# `make demo`: a real pipeline over the bundled shard, with the installed commands.
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(mktemp -d "${TMPDIR:-/tmp}/tarproc-demo.XXXXXX")
trap 'rm -rf "$out"' EXIT
say() { printf '\n\033[1m$ %s\033[0m\n' "$*"; }

say "tarcheck testdata/digits.tar"
tarcheck testdata/digits.tar

say "tarshow -c 2 testdata/digits.tar"
tarshow -c 2 testdata/digits.tar
if [ -t 1 ]; then
  say "tarshow -c 1 -f 'png cls' testdata/digits.tar     # on a terminal: the image itself"
  tarshow -c 1 -f 'png cls' -w 24 testdata/digits.tar
fi

say "tarcat testdata/digits.tar | tarproc -p 2 --map testdata/demo_fns.py:thumbnail | tarsort -S shuffle --seed 1 | tarsplit -n 10 -o $out/thumbs -v"
tarcat testdata/digits.tar \
  | tarproc -p 2 --map testdata/demo_fns.py:thumbnail \
  | tarsort -S shuffle --seed 1 \
  | tarsplit -n 10 -o "$out/thumbs" -v

say "tarproc -c 'printf %s \$(wc -c < sample.png) > sample.size' $out/thumbs-000000.tar | tar2tsv -f 'cls size json.name txt'"
tarproc -p 2 -c 'printf %s $(wc -c < sample.png) > sample.size' "$out/thumbs-000000.tar" | tar2tsv -f 'cls size json.name txt'

say "tarfirst -f thumb.png -S 'int(_.cls) == 7' '$out/thumbs-{000000..000002}.tar' > $out/seven.png"
tarfirst -f thumb.png -S 'int(_.cls) == 7' "$out/thumbs-{000000..000002}.tar" > "$out/seven.png"
python3 -c "from PIL import Image; im = Image.open('$out/seven.png'); print('seven.png:', im.format, 'image', im.size, im.mode)"

say "kujob -j 2 -s '{000000..000002}' -- tarcat -c 3 $out/thumbs-{}.tar -o $out/head-{}.tar && ls $out"
kujob -j 2 -s '{000000..000002}' -- tarcat -c 3 "$out/thumbs-{}.tar" -o "$out/head-{}.tar"
ls "$out"
echo
echo "demo complete: every command above read and wrote real tar shards."
echo "the commands are in $PWD/.venv/bin; to run them by name in your shell:"
echo "  export PATH=\"$PWD/.venv/bin:\$PATH\"     # or: . .venv/bin/activate"
