#!/usr/bin/env bash
# Fetches the demo corpora as plain text (never committed; data/ is ignored by git):
#   data/corpus/austen.txt  Jane Austen's six novels, from Debian's r-cran-janeaustenr (via Rscript)
#   data/corpus/kjv.txt     the King James Bible, from Debian's bible-kjv
# Paragraphs are separated by blank lines. Idempotent; safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
out=data/corpus
mkdir -p "$out"

need=()
command -v Rscript >/dev/null || need+=(r-base-core)
dpkg-query -W -f='${Status}' r-cran-janeaustenr 2>/dev/null | grep -q "ok installed" || need+=(r-cran-janeaustenr)
command -v bible >/dev/null || need+=(bible-kjv)
if [ ${#need[@]} -gt 0 ]; then
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  echo "fetch_corpus: installing ${need[*]}"
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends \
    "${need[@]}" >/dev/null
fi

if [ ! -s "$out/austen.txt" ]; then
  # janeaustenr stores each novel as printed lines, with "" between paragraphs. Unwrap each
  # paragraph onto one line (the printed line breaks are layout, not language).
  Rscript -e 'library(janeaustenr); b <- austen_books();
    for (bk in levels(b$book)) { writeLines(c(b$text[b$book == bk], "", ""), con = stdout()) }' |
    awk 'BEGIN { RS = ""; ORS = "\n\n" } { gsub(/[ \t]*\n[ \t]*/, " "); print }' \
    >"$out/austen.txt.tmp"
  mv "$out/austen.txt.tmp" "$out/austen.txt"
fi
if [ ! -s "$out/kjv.txt" ]; then
  # one verse per line ("Ge1:1 In the beginning ..."); drop the reference, blank line per chapter
  bible -f "Gen1:1-Rev22:21" | awk '{
      split($1, ref, ":"); chapter = ref[1]; $1 = "";
      if (NR > 1 && chapter != last) print ""; last = chapter; sub(/^ /, ""); print }' \
    >"$out/kjv.txt.tmp"
  mv "$out/kjv.txt.tmp" "$out/kjv.txt"
fi
ls -l "$out"/*.txt | awk '{print "fetch_corpus:", $NF, $5, "bytes"}'
