#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# Print the STATS fields of the uapi's one list (BELUGA_STATS_FIELDS in
# uapi/linux/beluga.h), one "NAME KIND" line each in the list's order, so
# that shell tests check outputs and documents against the list instead of
# keeping a copy of it. KIND: GEOMETRY, OCCUPANCY or COUNTER.
#
# Usage: stats-fields.sh [UAPI_HEADER]
set -eu
hdr=${1:-$(dirname "$0")/../../uapi/linux/beluga.h}
sed -n 's/^[[:space:]]*F(\([a-z_]*\), \(GEOMETRY\|OCCUPANCY\|COUNTER\),.*/\1 \2/p' "$hdr"
