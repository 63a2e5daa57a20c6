#!/usr/bin/env bash
# The unit suite on every other CPython 3.10-3.13 this machine has (pyenv's, or python3.X
# on PATH), each in a virtualenv of its own. A version the machine lacks is named, not
# silently passed over; one that fails fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."

main="$(python -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')"
roots=()
if command -v pyenv >/dev/null 2>&1; then roots+=("$(pyenv root)/versions"); fi
[ -d "$HOME/.pyenv/versions" ] && roots+=("$HOME/.pyenv/versions")
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
for version in 3.10 3.11 3.12 3.13; do
  [ "$version" = "$main" ] && continue
  interpreter=""
  for root in "${roots[@]}"; do
    for candidate in "$root/$version".*/bin/python; do
      [ -x "$candidate" ] && interpreter="$candidate" && break 2
    done
  done
  [ -z "$interpreter" ] && interpreter="$(command -v "python$version" || true)"
  if [ -z "$interpreter" ]; then
    echo "Python $version: not on this machine, not tested"
    continue
  fi
  "$interpreter" -m venv "$work/$version"
  "$work/$version/bin/pip" install -q --disable-pip-version-check -e '.[test]'
  "$work/$version/bin/pip" install -q --disable-pip-version-check --no-deps -e samples/backup
  echo "Python $version ($interpreter):"
  "$work/$version/bin/python" -m pytest -q -p no:cacheprovider tests/unit
done
