#!/usr/bin/env bash
# Prints the README's set-up commands, one per line: the lines of the first fenced block under the
# "## Two commands" heading, with comments and blank lines dropped. .ci/run runs exactly these, so a
# newcomer and CI run the same thing; tests/charts/readme_test.py checks what they name exists.
# Usage: scripts/readme-commands.sh [README path, default: the repository's README.md]
set -euo pipefail
readme=${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/README.md}
awk '
  /^## / { in_section = ($0 == "## Two commands"); next }
  in_section && /^```/ { if (in_block) exit; in_block = 1; next }
  in_block {
    sub(/[ \t]+#.*$/, ""); sub(/^[ \t]+/, ""); sub(/[ \t]+$/, "")
    if ($0 != "" && $0 !~ /^#/) { print; found = 1 }
  }
  END { if (!found) { print "readme-commands: no commands in a fenced block under \"## Two commands\"" > "/dev/stderr"; exit 1 } }
' "$readme"
