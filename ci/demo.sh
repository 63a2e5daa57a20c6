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
"$python" -m pip install -q --disable-pip-version-check --no-deps -e samples/backup
# The replicas' TLS keys and a ServiceAccount-token kubeconfig go under this folder; it is
# removed however the demo stops (Ctrl-C included).
work="$(mktemp -d "${TMPDIR:-/tmp}/operator-kit-demo.XXXXXX")"
trap 'rm -rf "$work"' EXIT

# Where the replicas run. Without KUBECONFIG, on a local plane started here: as real Pods
# from the operator's image when a node can run on this machine (root, its Debian
# packages, its binaries built: `localcluster node-check` looks, cheaply), else as
# processes on this host, as before. OPERATOR_KIT_DEMO_MODE=node insists on a node
# (building its binaries if needed), =processes never starts one; auto is the default.
# With KUBECONFIG, processes on this host against that cluster.
mode="${OPERATOR_KIT_DEMO_MODE:-auto}"
case "$mode" in
  auto | node | processes) ;;
  *) echo "error: OPERATOR_KIT_DEMO_MODE=$mode: give auto, node or processes" >&2; exit 2 ;;
esac
localcluster() { "$python" -m operator_kit.localcluster "$@"; }
image_args=()
if [ -z "${KUBECONFIG:-}" ]; then
  if [ "$mode" = auto ]; then
    if localcluster node-check 2>"$work/node-check"; then
      mode=node
    else
      echo "$(cat "$work/node-check"); the operator runs as processes on this host" >&2
      mode=processes
    fi
  fi
  if [ "$mode" = node ]; then
    if KUBECONFIG="$(localcluster up --node)"; then
      export KUBECONFIG
      echo "local control plane with a node up; stop both with: $python -m operator_kit.localcluster down" >&2
      if image="$(localcluster image samples/backup)"; then
        image_args=(--image "$image")
      elif [ "${OPERATOR_KIT_DEMO_MODE:-auto}" = node ]; then
        exit 1
      else
        echo "the image was not built (above); the operator runs as processes on this host" >&2
      fi
    elif [ "${OPERATOR_KIT_DEMO_MODE:-auto}" = node ]; then
      exit 1
    else
      echo "the node did not start (above); the operator runs as processes on this host" >&2
    fi
  fi
  if [ -z "${KUBECONFIG:-}" ]; then
    KUBECONFIG="$(localcluster up)"
    export KUBECONFIG
    echo "local control plane up; stop it with: $python -m operator_kit.localcluster down" >&2
  fi
elif [ "$mode" = node ]; then
  echo "error: OPERATOR_KIT_DEMO_MODE=node starts a local plane with a node: unset KUBECONFIG" >&2
  exit 2
fi
TMPDIR="$work" "$python" -m backup_operator.demo ${image_args[@]+"${image_args[@]}"} "$@"
