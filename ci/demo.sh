#!/usr/bin/env bash
# The main job: the sample Backup operator end to end, on the cluster in KUBECONFIG or, when
# none is given, on a local control plane started here (an embedded default).
#
# It installs into a virtual environment of its own, .venv in the checkout: made with
# `python3 -m venv` on the first run (ensurepip adds pip to one that has none), reused after,
# whether or not the caller is inside another virtualenv. So it works where pip refuses to
# install outside one (PIP_REQUIRE_VIRTUALENV=true, Debian's externally-managed Python, a
# machine with python3 but no `python`). Every pip and python call below is that
# environment's. OPERATOR_KIT_DEMO_PYTHON=INTERPRETER (a path, or a name on PATH) uses that
# interpreter instead, as it is: no .venv is made, and pip installs into its environment.
set -euo pipefail

demo_python="${OPERATOR_KIT_DEMO_PYTHON:-}"
if [ -n "$demo_python" ]; then  # resolved before the cd below: relative to the caller
  case "$demo_python" in
    */*) demo_python="$(cd "$(dirname "$demo_python")" && pwd)/$(basename "$demo_python")" ;;
    *) demo_python="$(command -v "$demo_python")" \
         || { echo "OPERATOR_KIT_DEMO_PYTHON=$OPERATOR_KIT_DEMO_PYTHON: not found" >&2; exit 1; } ;;
  esac
fi
cd "$(dirname "$0")/.."

if [ -n "$demo_python" ]; then
  python="$demo_python"
  echo "using the interpreter $python (OPERATOR_KIT_DEMO_PYTHON), no virtual environment made" >&2
else
  venv=.venv
  python="$PWD/$venv/bin/python"
  pip_works() { "$python" -m pip --version >/dev/null 2>&1; }
  if [ -x "$python" ] && pip_works; then
    how="reused"
  elif [ -x "$python" ] && "$python" -m ensurepip --upgrade >/dev/null 2>&1 && pip_works; then
    how="reused; it had no pip, ensurepip added it"  # made by uv, or with --without-pip
  else
    if [ -e "$venv" ]; then how="repaired now"; else how="created now"; fi
    python3 -m venv "$venv" || {
      echo "python3 -m venv $venv failed; on Debian or Ubuntu: apt-get install python3-venv" >&2
      exit 1
    }
    pip_works || {
      echo "the virtual environment $venv has no working pip: remove it and run again" >&2
      exit 1
    }
  fi
  echo "using the virtual environment $venv ($how)" >&2
fi

"$python" -m pip install -q --disable-pip-version-check -e .

if [ -z "${KUBECONFIG:-}" ]; then
  KUBECONFIG="$("$python" -m operator_kit.localcluster up)"
  export KUBECONFIG
  echo "local control plane up; stop it with: $python -m operator_kit.localcluster down" >&2
fi
"$python" -m pip install -q --disable-pip-version-check --no-deps -e samples/backup
# The replicas' TLS keys and a ServiceAccount-token kubeconfig go under this folder; it is
# removed however the demo stops (Ctrl-C included).
work="$(mktemp -d "${TMPDIR:-/tmp}/operator-kit-demo.XXXXXX")"
trap 'rm -rf "$work"' EXIT
TMPDIR="$work" "$python" -m backup_operator.demo "$@"
