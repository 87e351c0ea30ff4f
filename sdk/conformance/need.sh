# Sourced by a build.sh, from its language's directory: `need TOOL HOW` exits with build.sh's
# status for a missing tool (3, SPEC.md's Layout) and a message naming TOOL and HOW to install
# it, unless TOOL is on PATH.
need() {
  if ! command -v "$1" >/dev/null 2>&1; then
    echo "build.sh: missing tool: $1 ($2)" >&2
    exit 3
  fi
}
