# SPDX-License-Identifier: GPL-2.0
# What the engine examples share (sourced): the model argument, and a check,
# before starting an engine, that one Python environment has both the engine
# and the beluga package, saying how to get them if not.

# need_modules ENGINE_PIP_NAME MODULE...: $PYTHON imports every MODULE, or exit 1 naming the fix
need_modules() {
	local pkg=$1 m
	shift
	for m in "$@"; do
		if ! "$PYTHON" -c "import $m" 2>/dev/null; then
			echo "${0##*/}: $PYTHON cannot import $m. Install the engine and Beluga's package into" \
				"one environment: pip install $pkg ./userspace/python (from the Beluga checkout)," \
				"then run this with PYTHON=/that/env/bin/python" >&2
			exit 1
		fi
	done
}
PYTHON=${PYTHON:-python3}
# the first argument is the model (a default small enough for any GPU); the
# rest go to the engine (sourced without arguments, this shifts the script's)
model=${1:-Qwen/Qwen3-0.6B}
[ $# -eq 0 ] || shift
