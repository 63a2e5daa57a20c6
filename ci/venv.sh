# Sourced by ci/demo.sh and ci/test.sh: `ci_python OVERRIDE` sets $python to the
# interpreter they install into and run with.
#
# By default that is a virtual environment of the checkout's own, .venv: made with
# `python3 -m venv` on the first use (ensurepip adds pip to one that has none), reused
# after, whether or not the caller is inside another virtualenv. So the scripts work where
# pip refuses to install outside one (PIP_REQUIRE_VIRTUALENV=true, Debian's
# externally-managed Python, a machine with python3 but no `python`). The variable named
# OVERRIDE (OPERATOR_KIT_DEMO_PYTHON, OPERATOR_KIT_TEST_PYTHON), when set to an
# interpreter (a path, relative to the caller's directory, or a name on PATH), is used
# instead, as it is: no .venv is made, and pip installs into its environment.
# Call it before any `cd`: a relative OVERRIDE is the caller's.

ci_python() {
  local override_name="$1"
  local override="${!override_name:-}"
  local root
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  if [ -n "$override" ]; then
    case "$override" in
      */*) python="$(cd "$(dirname "$override")" && pwd)/$(basename "$override")" ;;
      *) python="$(command -v "$override")" \
           || { echo "$override_name=$override: not found" >&2; return 1; } ;;
    esac
    echo "using the interpreter $python ($override_name), no virtual environment made" >&2
    return 0
  fi
  local venv="$root/.venv" how
  python="$venv/bin/python"
  pip_works() { "$python" -m pip --version >/dev/null 2>&1; }
  if [ -x "$python" ] && pip_works; then
    how="reused"
  elif [ -x "$python" ] && "$python" -m ensurepip --upgrade >/dev/null 2>&1 && pip_works; then
    how="reused; it had no pip, ensurepip added it"  # made by uv, or with --without-pip
  else
    if [ -e "$venv" ]; then how="repaired now"; else how="created now"; fi
    python3 -m venv "$venv" || {
      echo "python3 -m venv $venv failed; on Debian or Ubuntu: apt-get install python3-venv" >&2
      return 1
    }
    pip_works || {
      echo "the virtual environment $venv has no working pip: remove it and run again" >&2
      return 1
    }
  fi
  echo "using the virtual environment .venv ($how)" >&2
}
