#!/usr/bin/env bash
# Makes the reference Python venv the golden and benchmark scripts run in:
# a venv at $FERRITE_REFENV (scripts/env.sh) with scripts/requirements.txt
# installed, from PyPI. Idempotent: a venv that already has every pinned
# version is left as it is (pip finds nothing to do). Prints the venv's
# directory on its last line.
#
#   scripts/setup-refenv.sh             # make or update the venv
#   scripts/setup-refenv.sh --dry-run   # say what would be done, change nothing
#
# PYTHON picks the interpreter the venv is made from (default python3); the
# goldens were made with CPython 3.11, and other versions get a warning
# (wheels of the pinned versions may not exist for them).
# Then run a script with `scripts/refenv python scripts/NAME.py`.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/env.sh"
dry=
case "${1:-}" in
  --dry-run) dry=1 ;;
  "") ;;
  *) echo "usage: scripts/setup-refenv.sh [--dry-run]" >&2; exit 2 ;;
esac
python=${PYTHON:-python3}
version=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
[ "$version" = 3.11 ] || echo "warning: $python is Python $version; the goldens were made with 3.11" >&2
run() { if [ -n "$dry" ]; then echo "would run: $*"; else "$@"; fi; }
if [ ! -x "$FERRITE_REFENV/bin/python" ]; then
  run "$python" -m venv "$FERRITE_REFENV"
fi
run "$FERRITE_REFENV/bin/python" -m pip install --quiet -r "$here/requirements.txt"
echo "$FERRITE_REFENV"
