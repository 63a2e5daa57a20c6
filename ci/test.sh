#!/usr/bin/env bash
# Runs every test against a real Kubernetes API server.
#
# Uses the cluster in OPERATOR_KIT_TEST_KUBECONFIG when set (kind, k3d, or a local plane
# you started); otherwise starts the project's own local control plane in a temporary
# folder (building its binaries on first use) and always stops it afterwards.
# Extra arguments go to pytest, e.g. `bash ci/test.sh tests/unit -x`.
set -euo pipefail
cd "$(dirname "$0")/.."

python -m pip install -q --disable-pip-version-check -e '.[test]'
python -m pip install -q --disable-pip-version-check --no-deps -e samples/backup
python -m pip install -q --disable-pip-version-check --no-deps -e samples/cronjob
python -m pip install -q --disable-pip-version-check --no-deps -e samples/fleet
python -m pip install -q --disable-pip-version-check --no-deps -e samples/tenancy

if [ -z "${OPERATOR_KIT_TEST_KUBECONFIG:-}" ]; then
  plane_dir="$(mktemp -d)/plane"
  trap 'python -m operator_kit.localcluster down --dir "$plane_dir" || true' EXIT
  OPERATOR_KIT_TEST_KUBECONFIG="$(python -m operator_kit.localcluster up --dir "$plane_dir")"
  export OPERATOR_KIT_TEST_KUBECONFIG
fi

python -m pytest "$@"
