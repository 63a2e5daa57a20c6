#!/usr/bin/env bash
# The main job: run against the cluster in KUBECONFIG, or start the local control plane
# (an embedded default) when none is given, and show that it serves.
set -euo pipefail
cd "$(dirname "$0")/.."

python -m pip install -q --disable-pip-version-check -e .

if [ -z "${KUBECONFIG:-}" ]; then
  KUBECONFIG="$(python -m operator_kit.localcluster up)"
  export KUBECONFIG
  echo "local control plane up; stop it with: python -m operator_kit.localcluster down" >&2
fi
exec python -m operator_kit.demo
