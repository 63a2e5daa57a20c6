#!/usr/bin/env bash
# The unit suite on every other CPython 3.10-3.13 this machine has (pyenv's, or python3.X
# on PATH), each in a virtualenv of its own. A version the machine lacks is named, not
# silently passed over; one that fails fails the run.
#
# The suites run as many at once as the machine has cores (OPERATOR_KIT_UNIT_PARALLEL sets
# it): each is one process, so on 2 cores two of them take the time of one. Each has its
# own virtualenv (made in its job, so one installs while another tests; one install at a
# time, as they write build files into the checkout) and pytest
# temporary folder, and its output is printed whole when it ends.
set -euo pipefail
cd "$(dirname "$0")/.."

main="$(python -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')"
parallel="${OPERATOR_KIT_UNIT_PARALLEL:-$(nproc)}"
roots=()
if command -v pyenv >/dev/null 2>&1; then roots+=("$(pyenv root)/versions"); fi
[ -d "$HOME/.pyenv/versions" ] && roots+=("$HOME/.pyenv/versions")
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

versions=()
interpreters=()
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
  echo "Python $version: $interpreter"
  versions+=("$version")
  interpreters+=("$interpreter")
done

# run_suite VERSION INTERPRETER: its virtualenv made, then its pytest; output to
# VERSION.log, exit status to VERSION.status.
run_suite() {
  local version="$1" interpreter="$2" status=0
  SECONDS=0
  {
    "$interpreter" -m venv "$work/$version" \
      && flock "$work/install.lock" sh -c "'$work/$version/bin/pip' install -q \
        --disable-pip-version-check -e '.[test]' && '$work/$version/bin/pip' install -q \
        --disable-pip-version-check --no-deps -e samples/backup" \
      && echo "(Python $version: installed in $SECONDS s)" \
      && "$work/$version/bin/python" -m pytest -q -rs -p no:cacheprovider \
        --basetemp "$work/$version-tmp" tests/unit
  } > "$work/$version.log" 2>&1 || status=$?
  echo "(Python $version: $SECONDS s in all)" >> "$work/$version.log"
  echo "$status" > "$work/$version.status"
}

running=()
for i in "${!versions[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$parallel" ]; do wait -n || true; done
  run_suite "${versions[$i]}" "${interpreters[$i]}" &
  running+=("$!")
done
for pid in "${running[@]}"; do wait "$pid" || true; done

failed=()
for version in "${versions[@]}"; do
  echo "Python $version:"
  cat "$work/$version.log"
  [ "$(cat "$work/$version.status")" = 0 ] || failed+=("$version")
done
if [ "${#failed[@]}" -gt 0 ]; then
  echo "the unit suite failed on Python ${failed[*]}" >&2
  exit 1
fi
