# test/suite_lib.sh: the counting that the shell suites share (sourced at their top). A suite
# counts its cases with pass, fail, skip, not_run or check, and ends with `finish`: the closing line
# "N passed, M failed, K skipped" that test/run_all.sh reads, and a non-zero status when a
# case failed.
passed=0 failed=0 skipped=0
pass() { echo "PASS $1"; passed=$((passed + 1)); }
fail() { echo "FAIL $1"; failed=$((failed + 1)); }
# skip NAME WHY: not run here. In CI (CI=true), where .ci/run installs what the suites need,
# a missing dependency is a failure instead.
skip() {
    if [ "${CI:-}" = true ]; then fail "$1: $2 (CI installs it)"
    else echo "SKIP $1: $2"; skipped=$((skipped + 1)); fi
}
# not_run NAME [WHY]: a case skipped wherever it runs, CI included: what it lacks is none of
# what .ci/run installs (no GPU trainer built, no writable cgroup, one processor)
not_run() { echo "SKIP $1${2:+: $2}"; skipped=$((skipped + 1)); }
# check WHAT COMMAND...: one case, passed when COMMAND succeeds
check() {
    local what=$1
    shift
    if "$@"; then pass "$what"; else fail "$what"; fi
}
finish() {
    echo "$passed passed, $failed failed, $skipped skipped"
    [ "$failed" -eq 0 ]
}
# a_processor_free: waits until fewer background jobs of this shell run than there are
# processors (before starting one more: `a_processor_free; work &`, then `wait`)
a_processor_free() { while [ "$(jobs -rp | wc -l)" -ge "$(nproc)" ]; do wait -n; done; }
# suite_arguments USAGE "$@": a suite's command line, checked before it runs anything. --help
# or -h prints "usage: USAGE" and exits 0; any other argument is one line on stderr and exit 2
# (a suite that takes none once ran whole on --help). USAGE "" names the suite alone: it takes
# no arguments. A suite with arguments of its own handles them first and passes the rest.
suite_arguments() {
    local usage=${1:-"bash $0   (no arguments: runs every case; the closing line says N passed, M failed)"}
    shift
    [ $# -eq 0 ] && return 0
    case $1 in
    -h | --help) echo "usage: $usage"; exit 0 ;;
    *) echo "$(basename "$0"): unknown argument '$1' (--help: the usage)" >&2; exit 2 ;;
    esac
}
