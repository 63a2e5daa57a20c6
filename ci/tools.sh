# Sourced by .ci/run and ci/test.sh: finds, or builds once, the tools some tests need and
# exports where they are, so those tests fail rather than skip:
#
# - PROMTOOL lints /metrics (tests/unit/test_metrics.py, tests/cluster/test_cli_cluster.py);
#   built without service discovery (it only lints: a third of the build).
# - KUBE_SCORE checks the generated manifests (tests/unit/test_kube_score.py).
# - HELM renders and installs the generated chart (tests/unit/test_helm.py,
#   tests/cluster/test_helm_cluster.py).
#
# Each is built from the Go module proxy (`go install`, niced: the builds must not starve
# the machine) into ~/.cache/operator_kit/<tool>-<version>/, beside the local plane's
# binaries, and found there afterwards: nothing is rebuilt when it exists. A variable
# already naming an executable is kept as it is. Measured cold (empty Go caches, 2 cores):
# promtool 1 min 48 s, kube-score 21 s, helm 2 min 7 s (4 min 28 s while the plane's
# binaries built); warm: nothing to do.

PROMTOOL_VERSION=v0.316.0
KUBE_SCORE_VERSION=v1.20.0
HELM_VERSION=v4.3.2

# ci_tool VARIABLE PATH MODULE@VERSION [go install flags...]
ci_tool() {
  local variable="$1" path="$2" module="$3"
  shift 3
  if [ -n "${!variable:-}" ] && [ -x "${!variable}" ]; then
    export "${variable?}"
    return 0
  fi
  if [ ! -x "$path" ]; then
    command -v go >/dev/null 2>&1 || {
      echo "$variable: $path is not built and Go is not installed; install Go 1.26+ (it" \
        "builds the local plane too), or set $variable to a $(basename "$path")" >&2
      return 1
    }
    echo "building $(basename "$path") ($module) into $(dirname "$path")" >&2
    time GOFLAGS=-mod=mod GOBIN="$(dirname "$path")" nice -n 15 go install "$@" "$module" \
      || return 1
  fi
  export "$variable=$path"
}

ci_tools() {
  local cache="$HOME/.cache/operator_kit"
  ci_tool PROMTOOL "$cache/promtool-$PROMTOOL_VERSION/promtool" \
    "github.com/prometheus/prometheus/cmd/promtool@$PROMTOOL_VERSION" -tags remove_all_sd \
    && ci_tool KUBE_SCORE "$cache/kube-score-$KUBE_SCORE_VERSION/kube-score" \
    "github.com/zegl/kube-score/cmd/kube-score@$KUBE_SCORE_VERSION" \
    && ci_tool HELM "$cache/helm-$HELM_VERSION/helm" "helm.sh/helm/v4/cmd/helm@$HELM_VERSION"
}
