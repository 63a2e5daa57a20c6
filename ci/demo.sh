#!/usr/bin/env bash
# The main job: the sample Backup operator end to end, on the cluster in KUBECONFIG or, when
# none is given, on a local control plane started here (an embedded default).
set -euo pipefail
cd "$(dirname "$0")/.."

python -m pip install -q --disable-pip-version-check -e .

if [ -z "${KUBECONFIG:-}" ]; then
  KUBECONFIG="$(python -m operator_kit.localcluster up)"
  export KUBECONFIG
  echo "local control plane up; stop it with: python -m operator_kit.localcluster down" >&2
fi
python -m pip install -q --disable-pip-version-check --no-deps -e samples/backup
# The replicas' TLS keys and a ServiceAccount-token kubeconfig go under this folder; it is
# removed however the demo stops (Ctrl-C included).
work="$(mktemp -d "${TMPDIR:-/tmp}/operator-kit-demo.XXXXXX")"
trap 'rm -rf "$work"' EXIT
TMPDIR="$work" python -m backup_operator.demo "$@"
