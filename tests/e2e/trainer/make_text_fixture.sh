#!/usr/bin/env bash
# Writes a learnable labelled-text CSV for the classifier tests: 400 rows of
# (label, text); a "spam" text contains the word "prize" among random words,
# a "ham" text never does. Deterministic (its own LCG).
# Usage: make_text_fixture.sh OUT.csv
set -euo pipefail
awk 'BEGIN {
  split("the a ship whale sea captain deck rope sail wind storm harbour crew boat night day", w, " ")
  x = 12345
  for (i = 0; i < 400; i++) {
    spam = (i % 5) < 2
    n = 4 + i % 5; at = i % n; text = ""
    for (j = 0; j < n; j++) {
      x = (x * 1103515245 + 12345) % 2147483648
      word = (spam && j == at) ? "prize" : w[1 + int(x / 65536) % 16]
      text = text (j ? " " : "") word
    }
    printf "%s,%s\n", spam ? "spam" : "ham", text
  }
}' > "$1"
