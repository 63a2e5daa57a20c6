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
exec python -m backup_operator.demo "$@"
