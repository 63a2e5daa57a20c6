#!/usr/bin/env bash
# Runs every test against a real Kubernetes API server, none skipped.
#
# Installs the checkout (with the `test` extra) and the samples into the virtual
# environment ci/demo.sh uses, .venv in the checkout (ci/venv.sh: made on the first run,
# reused after; OPERATOR_KIT_TEST_PYTHON=INTERPRETER uses that interpreter instead, as
# it is), and runs pytest with it. Finds, or builds once, the tools some tests need
# (HELM, PROMTOOL, KUBE_SCORE: ci/tools.sh; a variable already set is kept). Uses the
# cluster in OPERATOR_KIT_TEST_KUBECONFIG when set (kind, k3d, or a local plane you
# started); otherwise starts the project's own local control plane in a temporary folder
# (building its binaries on first use) and always stops it afterwards.
# Extra arguments go to pytest, e.g. `bash ci/test.sh tests/unit -x`.
set -euo pipefail

# shellcheck source=ci/venv.sh
source "$(dirname "$0")/venv.sh"
ci_python OPERATOR_KIT_TEST_PYTHON  # sets $python; before the cd: relative to the caller
cd "$(dirname "$0")/.."

"$python" -m pip install -q --disable-pip-version-check -e '.[test]'
for sample in backup cronjob fleet tenancy; do
  "$python" -m pip install -q --disable-pip-version-check --no-deps -e "samples/$sample"
done

# shellcheck source=ci/tools.sh
source ci/tools.sh
ci_tools

if [ -z "${OPERATOR_KIT_TEST_KUBECONFIG:-}" ]; then
  plane_dir="$(mktemp -d)/plane"
  trap '"$python" -m operator_kit.localcluster down --dir "$plane_dir" || true' EXIT
  OPERATOR_KIT_TEST_KUBECONFIG="$("$python" -m operator_kit.localcluster up --dir "$plane_dir")"
  export OPERATOR_KIT_TEST_KUBECONFIG
fi

"$python" -m pytest "$@"
