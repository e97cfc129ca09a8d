#!/usr/bin/env bash
# run.sh N: device call N of this folder (bench/diag/device_call.sh says what it runs)
exec bash "$(dirname "$0")/../../diag/device_call.sh" "$(dirname "$0")" "$@"
