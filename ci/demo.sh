#!/usr/bin/env bash
# The main job: the sample Backup operator end to end, on the cluster in KUBECONFIG or, when
# none is given, on a local control plane started here (an embedded default).
#
# It installs into a virtual environment of its own, .venv in the checkout, shared with
# ci/test.sh (ci/venv.sh: made on the first run, reused after), so it works where pip
# refuses to install outside one (PIP_REQUIRE_VIRTUALENV=true, Debian's externally-managed
# Python, a machine with python3 but no `python`). Every pip and python call below is that
# environment's. OPERATOR_KIT_DEMO_PYTHON=INTERPRETER (a path, or a name on PATH) uses that
# interpreter instead, as it is: no .venv is made, and pip installs into its environment.
set -euo pipefail

# shellcheck source=ci/venv.sh
source "$(dirname "$0")/venv.sh"
ci_python OPERATOR_KIT_DEMO_PYTHON  # sets $python; before the cd: relative to the caller
cd "$(dirname "$0")/.."

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
